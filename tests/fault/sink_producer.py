#!/usr/bin/env python3
"""An outside producer for tests/fault/configured_sinks_fault_test.cpp: events sent by
python3-confluent-kafka, as plain JSON or as CloudEvents 1.0 (Kafka binding, binary or
structured mode, or `cloudevents`: both modes alternating on one topic), with 10%
duplicates (the same event again: same id, a new offset) and records that can never be
valid.

    sink_producer.py --bootstrap HOST:PORT --topic T
                     --mode json|binary|structured|cloudevents
                     [--kind payments|orders] [--events N] [--seed S]

payments (payment.received.v1, keyed by account): prints one JSON line
{"balances": {account: cents}, "events": N, "malformed": M}; the amounts depend on the
seed only, so every mode gives the same balances.
orders (order.confirmed.v1, order ids 1..N, keyed by customer "c<order_id % 7>"): prints
{"events": N, "malformed": M}.
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


def record(mode, event_id, data, event_type="payment.received.v1"):
    """(value, headers) of one event in `mode`."""
    if mode == "json":
        return json.dumps(dict(event_id=event_id, event_type=event_type, **data)).encode(), []
    if mode == "binary":
        return json.dumps(data).encode(), [
            ("ce_specversion", b"1.0"), ("ce_id", event_id.encode()), ("ce_source", b"/shop"),
            ("ce_type", event_type.encode()), ("content-type", b"application/json")]
    envelope = {"specversion": "1.0", "id": event_id, "source": "/shop",
                "type": event_type, "datacontenttype": "application/json", "data": data}
    return json.dumps(envelope).encode(), [("content-type", b"application/cloudevents+json")]


def mode_of(mode, i):
    """The mode of the i-th event: `cloudevents` alternates binary and structured."""
    if mode != "cloudevents":
        return mode
    return "binary" if i % 2 == 0 else "structured"


def produce_orders(producer, args, ids):
    """Orders 1..N keyed by customer; amounts of every cent value, from the seed."""
    amounts = random.Random(args.seed)
    for i in range(1, args.events + 1):
        cents = amounts.randint(1, 99999)
        mode = mode_of(args.mode, i)
        value, headers = record(mode, uuid7(ids), {"order_id": i, "customer_id": i % 7,
                                                   "total_amount": f"{cents // 100}.{cents % 100:02d}"},
                                "order.confirmed.v1")
        key = f"c{i % 7}".encode()
        producer.produce(args.topic, key=key, value=value, headers=headers)
        if i % 10 == 0:
            producer.produce(args.topic, key=key, value=value, headers=headers)
    mode = mode_of(args.mode, 1)
    return [
        record(mode, uuid7(ids), {"order_id": 0, "customer_id": 0}, "order.confirmed.v1"),
        record(mode, uuid7(ids), {"order_id": 0, "customer_id": 0, "total_amount": "1.234"},
               "order.confirmed.v1"),
        record(mode, "8e03978e-40d5-43e8-bc93-6894a57f9324",
               {"order_id": 0, "customer_id": 0, "total_amount": "1.00"}, "order.confirmed.v1"),
        (b"{not json", []),
    ]


def produce_payments(producer, args, amounts, ids):
    """Payments to five accounts; returns the malformed records and each balance in cents."""
    balances = {a: 0 for a in ACCOUNTS}
    for i in range(args.events):
        account = ACCOUNTS[i % len(ACCOUNTS)]
        cents = amounts.randint(1, 99999)
        balances[account] += cents
        value, headers = record(mode_of(args.mode, i), uuid7(ids),
                                {"account": account, "amount": f"{cents // 100}.{cents % 100:02d}"})
        producer.produce(args.topic, key=account.encode(), value=value, headers=headers)
        if i % 10 == 0:
            producer.produce(args.topic, key=account.encode(), value=value, headers=headers)
    mode = mode_of(args.mode, 1)
    malformed = [
        record(mode, uuid7(ids), {"account": "acct-0"}),                    # no amount
        record(mode, uuid7(ids), {"account": "acct-0", "amount": "1.234"}),  # scale
        record(mode, "8e03978e-40d5-43e8-bc93-6894a57f9324",                 # not a v7
               {"account": "acct-0", "amount": "1.00"}),
        (b"{not json", []),
    ]
    return malformed, balances


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--mode", choices=["json", "binary", "structured", "cloudevents"],
                        required=True)
    parser.add_argument("--kind", choices=["payments", "orders"], default="payments")
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    amounts = random.Random(args.seed)
    ids = random.Random()
    producer = confluent_kafka.Producer({"bootstrap.servers": args.bootstrap,
                                         "enable.idempotence": True, "linger.ms": 5})
    report = {"events": args.events}
    if args.kind == "orders":
        malformed = produce_orders(producer, args, ids)
    else:
        malformed, report["balances"] = produce_payments(producer, args, amounts, ids)
    for value, headers in malformed:
        producer.produce(args.topic, key=b"bad", value=value, headers=headers)
    if producer.flush(60):
        print("sink_producer: not every record was acknowledged", file=sys.stderr)
        return 1
    report["malformed"] = len(malformed)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
