"""The producer of the outside tests: a client that is not idem (python3-confluent-kafka)
sends deposit events to a topic of `idem dev-broker`, some of them twice, and a few records
that idem must dead-letter.

`plan_records` decides what is sent and in which order; `Producer.send` sends a slice of
it and waits for every acknowledgement, which gives each record its partition and offset
(the coordinates the dead letters name in `idem.original.partition` / `.offset`).
"""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
from typing import Optional

import idem

EVENT_TYPE = "deposit.v1"


@dataclasses.dataclass
class Record:
    """One record to send. `kind` is "event" (a valid deposit; `copy` 0 is its first
    record, 1 a resend with the same id and payload), or the malformed kind: "not_json",
    "no_event_id", "not_v7"."""

    kind: str
    key: bytes
    value: bytes
    event_id: Optional[str] = None
    account: Optional[str] = None
    amount: int = 0
    copy: int = 0
    partition: int = -1
    offset: int = -1


def deposit(event_id: str, account: str, amount: int) -> bytes:
    return json.dumps({"event_id": event_id, "event_type": EVENT_TYPE, "account": account,
                       "amount": amount}).encode()


def plan_records(rng: random.Random, accounts: list[str], events: int,
                 resend_share: float = 0.1, malformed_each: int = 2) -> list[Record]:
    """`events` distinct deposits on `accounts` (ids from idem.uuid7(), amounts 1..100),
    about `resend_share` of them sent a second time at a later position (a new offset), and
    `malformed_each` records of every malformed kind at random positions. Keys are account
    names, so an account's records share a partition (and the malformed records land among
    them)."""
    records = []
    for _ in range(events):
        account = rng.choice(accounts)
        event_id = str(idem.uuid7())
        amount = rng.randint(1, 100)
        records.append(Record("event", account.encode(), deposit(event_id, account, amount),
                              event_id, account, amount))
    for original in [r for r in records if rng.random() < resend_share]:
        later = rng.randint(records.index(original) + 1, len(records))
        records.insert(later, dataclasses.replace(original, copy=1))
    for _ in range(malformed_each):
        account = rng.choice(accounts)
        malformed = [
            Record("not_json", account.encode(), b"deposit a3 17 {not json"),
            Record("no_event_id", account.encode(), json.dumps(
                {"event_type": EVENT_TYPE, "account": account, "amount": 17}).encode()),
            Record("not_v7", account.encode(), deposit(str(uuid.UUID(int=rng.getrandbits(128),
                                                                      version=4)), account, 17)),
        ]
        for record in malformed:
            records.insert(rng.randint(0, len(records)), record)
    return records


class Producer:
    """confluent_kafka.Producer with every acknowledgement awaited."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all",
                                        "linger.ms": 5, "log_level": 3})

    def send(self, topic: str, records: list[Record], timeout: float = 30.0) -> None:
        """Sends `records` in order and waits until each is acknowledged; fills in their
        partition and offset. Raises RuntimeError when one was refused or not acknowledged."""
        failures: list[str] = []

        def acknowledged(record: Record):
            def callback(err, message):
                if err is not None:
                    failures.append(str(err))
                else:
                    record.partition, record.offset = message.partition(), message.offset()
            return callback

        for record in records:
            self._producer.produce(topic, key=record.key, value=record.value,
                                   on_delivery=acknowledged(record))
            self._producer.poll(0)
        left = self._producer.flush(timeout)
        if failures or left:
            raise RuntimeError(f"producer: {left} records not acknowledged, errors {failures[:3]}")
