#!/usr/bin/env python3
"""An outside producer for tests/fault/outside_client_test.cpp: a client nobody on the
idem project wrote (python3-confluent-kafka) sends order.confirmed.v1 events to a topic
of `idem dev-broker`.

    outside_producer.py --bootstrap HOST:PORT --topic T --partitions P --seed S
                        [--valid N] [--duplicates N]

It sends N distinct valid events, resends of some of them (same event_id, same payload,
new offset: DUP-SOURCES "producer resend"), one record of every malformed kind the
consumer must dead-letter (EVT-4), a 2 MiB and a 999,900-byte record whose fields are
valid but which are too large, and a record with too many headers. It waits for every
acknowledgement and then prints one JSON line per record to stdout, in send order:

    {"seq": 0, "kind": "valid", "expected_class": null, "event_id": "...",
     "partition": 1, "offset": 7, "size": 201, "sha256": "..."}

`expected_class` is the DLQ error class the consumer must give the record (null for a
valid event). The last line is {"done": <records>}. Exit status 0 when every record was
acknowledged, 1 otherwise (the reason on stderr).
"""
import argparse
import hashlib
import json
import os
import random
import sys
import time

import confluent_kafka

EVENT_TYPE = "order.confirmed.v1"
BIG_SIZES = {"too_large_2mib": 2 * 1024 * 1024, "too_large_999900": 999_900}
# The consumer's ParseLimits::max_headers default: one more is refused.
MAX_HEADERS = 64


def uuid7(rng):
    """RFC 9562 UUIDv7: 48-bit Unix ms, version 7, variant 0b10, random rest."""
    ms = int(time.time() * 1000)
    rand_a = rng.getrandbits(12)
    rand_b = rng.getrandbits(62)
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{value:032x}"
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def uuid4(rng):
    value = rng.getrandbits(128)
    value = (value & ~(0xF << 76)) | (0x4 << 76)
    value = (value & ~(0x3 << 62)) | (0b10 << 62)
    h = f"{value:032x}"
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def now_rfc3339():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def fields(event_id, order_id):
    """The raw JSON values of a valid event, in schema order."""
    return [
        ("event_id", json.dumps(event_id)),
        ("event_type", json.dumps(EVENT_TYPE)),
        ("occurred_at", json.dumps(now_rfc3339())),
        ("order_id", str(order_id)),
        ("customer_id", str(1 + order_id % 97)),
        ("total_amount", json.dumps(f"{order_id % 1000}.{order_id % 100:02d}")),
    ]


def payload(fs):
    return ("{" + ",".join(f'"{k}":{v}' for k, v in fs) + "}").encode()


def replaced(fs, key, raw):
    return [(k, raw if k == key else v) for k, v in fs]


def without(fs, key):
    return [(k, v) for k, v in fs if k != key]


def malformed_records(rng, next_order_id):
    """(kind, expected class, payload bytes or None, extra headers, event id or None)."""
    out = []

    def add(kind, cls, value, headers=None, event_id=None):
        out.append((kind, "validation." + cls, value, headers or [], event_id))

    def base():
        event_id = uuid7(rng)
        return event_id, fields(event_id, next_order_id())

    eid, f = base()
    add("invalid_json_truncated", "invalid_json", payload(f)[:-1], event_id=eid)
    eid, f = base()
    add("invalid_json_top_level_array", "invalid_json", b"[" + payload(f) + b"]", event_id=eid)
    eid, f = base()
    add("invalid_json_trailing_garbage", "invalid_json", payload(f) + b"x", event_id=eid)
    add("invalid_json_empty", "invalid_json", b"")
    add("invalid_json_tombstone", "invalid_json", None)  # a null value
    eid, f = base()
    add("invalid_utf8", "invalid_utf8",
        payload(f).replace(b'"order.confirmed.v1"', b'"order\xff"'), event_id=eid)
    eid, f = base()
    add("missing_customer_id", "missing", payload(without(f, "customer_id")), event_id=eid)
    eid, f = base()
    add("missing_event_id", "missing", payload(without(f, "event_id")))
    eid, f = base()
    add("wrong_type_amount_number", "wrong_type", payload(replaced(f, "total_amount", "12.30")), event_id=eid)
    eid, f = base()
    add("wrong_type_order_id_string", "wrong_type", payload(replaced(f, "order_id", '"17"')), event_id=eid)
    eid, f = base()
    add("wrong_type_order_id_float", "wrong_type", payload(replaced(f, "order_id", "1.0")), event_id=eid)
    eid, f = base()
    add("wrong_type_event_id_number", "wrong_type", payload(replaced(f, "event_id", "123")))
    eid, f = base()
    add("not_uuid", "not_uuid", payload(replaced(f, "event_id", '"not-a-uuid"')))
    eid, f = base()
    add("not_uuid_v7_v4", "not_uuid_v7", payload(replaced(f, "event_id", json.dumps(uuid4(rng)))))
    eid, f = base()
    wrong_variant = eid[:19] + "c" + eid[20:]  # variant 0b11 instead of 0b10
    add("not_uuid_v7_variant", "not_uuid_v7", payload(replaced(f, "event_id", json.dumps(wrong_variant))))
    eid, f = base()
    add("not_decimal_amount", "not_decimal", payload(replaced(f, "total_amount", '"1,5"')), event_id=eid)
    eid, f = base()
    add("not_decimal_exponent", "not_decimal", payload(replaced(f, "total_amount", '"1e5"')), event_id=eid)
    eid, f = base()
    add("negative_amount", "negative_amount", payload(replaced(f, "total_amount", '"-0.50"')), event_id=eid)
    eid, f = base()
    add("too_many_fraction_digits", "too_many_fraction_digits",
        payload(replaced(f, "total_amount", '"1.234"')), event_id=eid)
    eid, f = base()
    add("amount_out_of_range", "out_of_range",
        payload(replaced(f, "total_amount", '"99999999999999999999"')), event_id=eid)
    eid, f = base()
    add("unknown_event_type", "unknown_event_type",
        payload(replaced(f, "event_type", '"order.exploded.v9"')), event_id=eid)
    eid, f = base()
    add("order_id_zero", "out_of_range", payload(replaced(f, "order_id", "0")), event_id=eid)
    eid, f = base()
    add("order_id_negative", "out_of_range", payload(replaced(f, "order_id", "-5")), event_id=eid)
    eid, f = base()
    add("order_id_above_int64", "out_of_range",
        payload(replaced(f, "order_id", "9223372036854775808")), event_id=eid)
    eid, f = base()
    add("customer_id_huge", "out_of_range",
        payload(replaced(f, "customer_id", "123456789012345678901234567890")), event_id=eid)
    eid, f = base()
    add("occurred_at_not_rfc3339", "not_rfc3339",
        payload(replaced(f, "occurred_at", '"2026-02-30T00:00:00Z"')), event_id=eid)
    eid, f = base()
    add("duplicate_field", "duplicate_field", payload([f[0]] + f), event_id=eid)
    eid, f = base()
    add("duplicate_field_escaped_key", "duplicate_field",
        payload([("order\\u005fid", "1")] + f), event_id=eid)
    eid, f = base()
    add("too_many_headers", "too_many_headers", payload(f),
        headers=[(f"x-h{i}", b"v") for i in range(MAX_HEADERS + 1)], event_id=eid)
    eid, f = base()
    add("too_large_70k", "too_large", payload(f + [("padding", json.dumps("p" * 70_000))]), event_id=eid)
    # Valid fields, padded with an extra (ignored) field to an exact size: refused only
    # because of its size, and too large for a dead letter to carry whole.
    for kind, size in BIG_SIZES.items():
        eid, f = base()
        head = payload(f + [("padding", '""')])
        pad = size - len(head)
        value = payload(f + [("padding", json.dumps("p" * pad))])
        assert len(value) == size, (kind, len(value))
        add(kind, "too_large", value, event_id=eid)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--valid", type=int, default=300)
    parser.add_argument("--duplicates", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    order_ids = iter(range(1, 1 << 62))
    records = []  # (kind, expected class, key, value, headers, event id, partition)
    valid = []
    for _ in range(args.valid):
        order_id = next(order_ids)
        event_id = uuid7(rng)
        r = ("valid", None, str(order_id).encode(), payload(fields(event_id, order_id)),
             [("event_id", event_id.encode())], event_id, None)
        valid.append(r)
    records.extend(valid)
    for _ in range(args.duplicates):  # the very same record again: same key, same payload
        records.append(("duplicate",) + rng.choice(valid)[1:])
    malformed = [(kind, cls, f"bad-{i}".encode(), value, headers, eid, None)
                 for i, (kind, cls, value, headers, eid) in
                 enumerate(malformed_records(rng, lambda: next(order_ids)))]
    # The big ones on partitions of their own (the dev broker keeps ~5 MiB per partition);
    # one small malformed record at the head of every partition, so that the consumer's
    # first batch, wherever it starts, dead-letters something.
    big = [r for r in malformed if r[0] in BIG_SIZES]
    small = [r for r in malformed if r[0] not in BIG_SIZES]
    rng.shuffle(small)
    heads = [r[:6] + (p,) for p, r in enumerate(small[:args.partitions])]
    big = [r[:6] + (p % args.partitions,) for p, r in enumerate(big)]
    rest = records + small[args.partitions:] + big
    rng.shuffle(rest)
    records = heads + rest

    producer = confluent_kafka.Producer({
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        # The default (1,000,000) refuses the 2 MiB record (and a 999,900-byte value with
        # its framing) in the client already.
        "message.max.bytes": 4 * 1024 * 1024,
        "linger.ms": 5,
        "log_level": 3,
    })
    reports = [None] * len(records)

    def on_delivery(seq):
        def report(err, msg):
            reports[seq] = (err, msg.partition(), msg.offset())
        return report

    for seq, (kind, cls, key, value, headers, eid, partition) in enumerate(records):
        kwargs = {"key": key, "value": value, "headers": headers, "on_delivery": on_delivery(seq)}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(args.topic, **kwargs)
                break
            except BufferError:  # the local queue is full: serve reports, then again
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        print(f"outside_producer: {left} record(s) not acknowledged in 60 s", file=sys.stderr)
        return 1
    failed = [(seq, r) for seq, r in enumerate(reports) if r is None or r[0] is not None]
    if failed:
        print(f"outside_producer: {len(failed)} record(s) failed, first: {failed[0]}", file=sys.stderr)
        return 1
    for seq, (kind, cls, key, value, headers, eid, partition) in enumerate(records):
        _, part, offset = reports[seq]
        body = value or b""
        print(json.dumps({"seq": seq, "kind": kind, "expected_class": cls, "event_id": eid,
                          "partition": part, "offset": offset, "size": len(body),
                          "sha256": hashlib.sha256(body).hexdigest()}))
    print(json.dumps({"done": len(records)}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
