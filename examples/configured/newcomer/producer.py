#!/usr/bin/env python3
"""A newcomer's service in Python: it owns an SQLite database with accounts and sends
payment events to Kafka with python3-confluent-kafka. No C++ anywhere: idem applies each
payment exactly once from balance.toml (`idem consume --config balance.toml`).

    producer.py setup DB              create the service's tables (accounts at 0)
    producer.py send BOOTSTRAP TOPIC  send 200 payments, 10% of them sent twice
    producer.py check DB              exit 0 when every balance is the sum of its payments

Each event carries a UUIDv7 event_id, made once when the event is born (a resend carries
the same id): idem's dedup key.
"""
import json
import os
import random
import sqlite3
import sys
import time

ACCOUNTS = ["alice", "bob", "carol"]
PAYMENTS = 200


def uuid7(rng):
    ms = int(time.time() * 1000)
    value = (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    h = f"{value:032x}"
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def payments():
    rng = random.Random(7)
    for i in range(PAYMENTS):
        cents = rng.randint(1, 99999)
        yield {"event_id": uuid7(rng), "event_type": "payment.received.v1",
               "account": ACCOUNTS[i % len(ACCOUNTS)], "amount": f"{cents // 100}.{cents % 100:02d}"}


def setup(db):
    with sqlite3.connect(db) as c:
        # Money in cents: SQLite has no exact decimal type; the route's scale 2 binds into it.
        c.execute("CREATE TABLE account (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)")
        c.execute("CREATE TABLE movement (event_id BLOB NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL)")
        c.executemany("INSERT INTO account VALUES (?, 0)", [(a,) for a in ACCOUNTS])


def send(bootstrap, topic):
    import confluent_kafka
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, event in enumerate(payments()):
        value = json.dumps(event).encode()
        producer.produce(topic, key=event["account"].encode(), value=value)
        if i % 10 == 0:  # a resend: same event, same id, a new offset
            producer.produce(topic, key=event["account"].encode(), value=value)
    if producer.flush(30):
        sys.exit("not every payment was acknowledged")


def check(db):
    expected = {a: 0 for a in ACCOUNTS}
    for event in payments():
        units, cents = event["amount"].split(".")
        expected[event["account"]] += int(units) * 100 + int(cents)
    with sqlite3.connect(db) as c:
        balances = dict(c.execute("SELECT id, balance FROM account"))
        movements = c.execute("SELECT count(*) FROM movement").fetchone()[0]
    print(f"balances {balances} movements {movements}")
    return 0 if balances == expected and movements == PAYMENTS else 1


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "setup":
        setup(sys.argv[2])
    elif command == "send":
        send(sys.argv[2], sys.argv[3])
    else:
        sys.exit(check(sys.argv[2]))
