#!/usr/bin/env python3
"""The design documents' order service in Python, with idem's transactional outbox.

Confirming an order updates `orders` and writes its `order.confirmed.v1` event to
`idem_outbox` in the same transaction (the service's own sqlite3 or psycopg connection);
`idem relay` then publishes the event to Kafka, once the transaction has committed. With no
`--brokers`, the example starts idem's embedded dev broker, runs the relay until the outbox
is empty and reads the events back from the topic.

    .venv/bin/python examples/python/order_service.py            # SQLite + dev broker
    .venv/bin/python examples/python/order_service.py --db postgresql://... --brokers host:9092
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from decimal import Decimal
from pathlib import Path

import idem

TOPIC = "order-service.order.confirmed"


def connect(url: str):
    """The service's own connection: sqlite3 for sqlite:// URLs, psycopg 3 otherwise."""
    if url.startswith("sqlite://"):
        return sqlite3.connect(url.removeprefix("sqlite://"), isolation_level=None)
    import psycopg

    return psycopg.connect(url, autocommit=True)


def confirm_order(conn, order_id: int, customer_id: int, total: Decimal) -> uuid.UUID:
    """UPDATE the order and write its event in one transaction: both or neither."""
    def event(event_id: uuid.UUID) -> dict:
        # The id is born with the row and carried by the event (a resend keeps it).
        return {
            "event_id": str(event_id),
            "event_type": "order.confirmed.v1",
            "occurred_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "order_id": order_id,
            "customer_id": customer_id,
            "total_amount": str(total),  # exact: a decimal string, never a float
        }

    conn.execute("BEGIN")
    try:
        conn.execute(f"UPDATE orders SET status = 'confirmed' WHERE id = {placeholder(conn)}",
                     (order_id,))
        event_id = idem.outbox.enqueue(conn, topic=TOPIC, aggregate_type="order",
                                       aggregate_id=str(order_id), payload=event)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return event_id


def placeholder(conn) -> str:
    """The driver's parameter mark: sqlite3's ? or psycopg's %s."""
    return "?" if isinstance(conn, sqlite3.Connection) else "%s"


def idem_cli(given: str | None) -> str:
    """The idem command: --idem, else `idem` on PATH, else the repository's build/."""
    found = given or shutil.which("idem")
    if found:
        return found
    built = Path(__file__).resolve().parents[2] / "build" / "cli" / "idem"
    if built.exists():
        return str(built)
    sys.exit("order_service: no idem command: pass --idem or build it (cmake --build build)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="store URL (default: a new SQLite file)")
    parser.add_argument("--brokers", help="Kafka bootstrap servers (default: a dev broker)")
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument("--idem", help="the idem command (default: on PATH, else build/cli/idem)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="idem-orders-"))
    url = args.db or f"sqlite://{workdir / 'orders.db'}"

    idem.Store(url).migrate()  # idem's tables, idem_outbox among them
    conn = connect(url)
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, customer_id BIGINT,"
                 " total TEXT, status TEXT NOT NULL)")
    mark = placeholder(conn)
    for order_id in range(1, args.orders + 1):
        conn.execute(f"INSERT INTO orders VALUES ({mark}, {mark}, {mark}, 'created')"
                     " ON CONFLICT DO NOTHING", (order_id, 100 + order_id, f"{order_id * 10}.50"))
    ids = [confirm_order(conn, order_id, 100 + order_id, Decimal(f"{order_id * 10}.50"))
           for order_id in range(1, args.orders + 1)]
    print(f"confirmed {len(ids)} orders; their events wait in idem_outbox")

    cli = idem_cli(args.idem)
    broker = None
    brokers = args.brokers
    if not brokers:
        broker = subprocess.Popen([cli, "dev-broker", "--topic", f"{TOPIC}:3", "--no-stdin"],
                                  stdout=subprocess.PIPE, text=True)
        brokers = broker.stdout.readline().strip()
    try:
        subprocess.run([cli, "relay", "--db", url, "--brokers", brokers, "--until-empty",
                        "--timeout-s", "60"], check=True, stdout=subprocess.DEVNULL)
        print(f"idem relay published them to {TOPIC}")
        return 0 if read_back(brokers, set(ids)) else 1
    finally:
        if broker is not None:
            broker.terminate()
            broker.wait(timeout=30)


def read_back(brokers: str, expected: set[uuid.UUID]) -> bool:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "order-service-example",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    seen: set[uuid.UUID] = set()
    try:
        for _ in range(120):  # at most a minute
            record = consumer.poll(0.5)
            if record is None or record.error() is not None:
                continue
            event = json.loads(record.value())
            header = dict(record.headers())["event_id"].decode()
            assert header == event["event_id"], "the event_id header is the payload's"
            seen.add(uuid.UUID(event["event_id"]))
            print(f"  {record.key().decode():>3} {event['event_type']} total {event['total_amount']}"
                  f" event_id {event['event_id']}")
            if seen >= expected:
                break
    finally:
        consumer.close()
    missing = expected - seen
    if missing:
        print(f"order_service: {len(missing)} events were not read back", file=sys.stderr)
    return not missing


if __name__ == "__main__":
    sys.exit(main())
