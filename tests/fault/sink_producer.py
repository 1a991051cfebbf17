#!/usr/bin/env python3
"""An outside producer for tests/fault/configured_sinks_fault_test.cpp: payment events
sent by python3-confluent-kafka, as plain JSON or as CloudEvents 1.0 (Kafka binding,
binary or structured mode), with 10% duplicates (the same event again: same id, a new
offset) and records that can never be valid.

    sink_producer.py --bootstrap HOST:PORT --topic T --mode json|binary|structured
                     [--events N] [--seed S]

Prints one JSON line: {"balances": {account: cents}, "events": N, "malformed": M}.
The amounts depend on the seed only, so every mode gives the same balances.
"""
import argparse
import json
import random
import sys
import time

import confluent_kafka

ACCOUNTS = [f"acct-{i}" for i in range(5)]


def uuid7(rng):
    ms = int(time.time() * 1000)
    value = (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    h = f"{value:032x}"
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def record(mode, event_id, data):
    """(value, headers) of one event in `mode`."""
    if mode == "json":
        return json.dumps(dict(event_id=event_id, event_type="payment.received.v1", **data)).encode(), []
    if mode == "binary":
        return json.dumps(data).encode(), [
            ("ce_specversion", b"1.0"), ("ce_id", event_id.encode()), ("ce_source", b"/shop"),
            ("ce_type", b"payment.received.v1"), ("content-type", b"application/json")]
    envelope = {"specversion": "1.0", "id": event_id, "source": "/shop",
                "type": "payment.received.v1", "datacontenttype": "application/json", "data": data}
    return json.dumps(envelope).encode(), [("content-type", b"application/cloudevents+json")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--mode", choices=["json", "binary", "structured"], required=True)
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    amounts = random.Random(args.seed)
    ids = random.Random()
    producer = confluent_kafka.Producer({"bootstrap.servers": args.bootstrap,
                                         "enable.idempotence": True, "linger.ms": 5})
    balances = {a: 0 for a in ACCOUNTS}
    for i in range(args.events):
        account = ACCOUNTS[i % len(ACCOUNTS)]
        cents = amounts.randint(1, 99999)
        balances[account] += cents
        value, headers = record(args.mode, uuid7(ids), {"account": account,
                                                        "amount": f"{cents // 100}.{cents % 100:02d}"})
        producer.produce(args.topic, key=account.encode(), value=value, headers=headers)
        if i % 10 == 0:
            producer.produce(args.topic, key=account.encode(), value=value, headers=headers)
    malformed = [
        record(args.mode, uuid7(ids), {"account": "acct-0"}),                    # no amount
        record(args.mode, uuid7(ids), {"account": "acct-0", "amount": "1.234"}),  # scale
        record(args.mode, "8e03978e-40d5-43e8-bc93-6894a57f9324",                 # not a v7
               {"account": "acct-0", "amount": "1.00"}),
        (b"{not json", []),
    ]
    for value, headers in malformed:
        producer.produce(args.topic, key=b"bad", value=value, headers=headers)
    if producer.flush(60):
        print("sink_producer: not every record was acknowledged", file=sys.stderr)
        return 1
    print(json.dumps({"balances": balances, "events": args.events, "malformed": len(malformed)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
