"""The billing consumer written in Python (examples/python/billing_consumer.py), as real
processes, against `idem provider` with latency and faults: a provider that is slow, breaks
off answers after storing the charge and answers 503 before storing anything. Orders are
produced by confluent-kafka (not idem), 10% of them twice (the same event at a new offset);
the consumer process is SIGKILLed while charges are in flight and restarted.

Afterwards, on SQLite and on PostgreSQL:
- the provider made exactly one charge per order, under the order's event id as its
  Idempotency-Key;
- billing_ledger holds one row per order, naming that charge;
- each customer's charges (the Kafka key, the calls' ordering key) were made in offset order
  (the provider's payment ids are UUIDv7s of its store thread: they sort by creation).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import idem

confluent_kafka = pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "billing_consumer.py"
TOPIC = "order-service.order.confirmed"
ORDERS = 300
CUSTOMERS = 12
KILLS = 3
# The dev broker's group timing (docs/dev-broker.md): every rejoin of the group after a
# SIGKILL waits about session.timeout.ms - 1 s.
MOCK_GROUP = ["--set", "kafka.session.timeout.ms=4000", "--set", "kafka.heartbeat.interval.ms=1000"]


def cli() -> str:
    path = os.environ.get("IDEM_TEST_CLI")
    if not path:
        pytest.skip("IDEM_TEST_CLI (the idem binary) is not set")
    return path


def eventually(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)  # polling with a deadline, not a synchronisation by sleeping


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """(brokers, provider URL, provider store) of a dev broker and a faulty provider."""
    broker = subprocess.Popen([cli(), "dev-broker", "--topic", f"{TOPIC}:3", "--no-stdin"],
                              stdout=subprocess.PIPE, text=True)
    provider_db = tmp_path / "provider.db"
    provider = subprocess.Popen(
        [cli(), "provider", "--db", f"sqlite://{provider_db}", "--latency", "20ms",
         "--reset-after-commit", "0.05", "--unavailable", "0.05"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert broker.stdout is not None and provider.stdout is not None
        brokers = broker.stdout.readline().strip()
        listening = provider.stdout.readline().strip()
        assert listening.startswith("listening "), listening
        yield brokers, listening.split(" ", 1)[1], provider_db
    finally:
        for process in (provider, broker):
            process.terminate()
            process.wait(timeout=30)


def produce_orders(brokers: str) -> dict[int, tuple[str, str]]:
    """ORDERS orders over CUSTOMERS keys, 10% sent twice; {order id: (key, event id)}."""
    producer = confluent_kafka.Producer({"bootstrap.servers": brokers})
    orders: dict[int, tuple[str, str]] = {}
    for order_id in range(1, ORDERS + 1):
        key = f"customer-{order_id % CUSTOMERS}"
        event_id = str(idem.uuid7())
        value = json.dumps({"event_id": event_id, "event_type": "order.confirmed.v1",
                            "occurred_at": "2026-12-06T08:00:00Z", "order_id": order_id,
                            "customer_id": order_id % CUSTOMERS,
                            "total_amount": f"{order_id}.{order_id % 100:02d}"}).encode()
        producer.produce(TOPIC, key=key.encode(), value=value)
        if order_id % 10 == 0:
            producer.produce(TOPIC, key=key.encode(), value=value)  # a producer's resend
        orders[order_id] = (key, event_id)
    assert producer.flush(30) == 0
    return orders


def ledger_count(store_url: str) -> int:
    with idem.Store(store_url).begin() as tx:
        return int(tx.execute("SELECT count(*) AS n FROM billing_ledger").scalar())


def start_consumer(store_url: str, brokers: str, provider: str, log: Path) -> subprocess.Popen:
    env = dict(os.environ)
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--db", store_url, "--brokers", brokers, "--provider",
         provider, "--set", "consumer.batch_window=10ms", *MOCK_GROUP],
        stdout=log.open("a"), stderr=subprocess.STDOUT, env=env)


def test_billing_charges_each_order_once_in_key_order_through_sigkills(store_url, services,
                                                                      tmp_path):
    brokers, provider, provider_db = services
    subprocess.run([cli(), "migrate", "--db", store_url, "--reference"], check=True,
                   stdout=subprocess.DEVNULL)
    orders = produce_orders(brokers)
    log = tmp_path / "consumer.log"

    consumer = start_consumer(store_url, brokers, provider, log)
    try:
        for kill in range(1, KILLS + 1):
            threshold = ORDERS * kill // (KILLS + 2)
            eventually(lambda: ledger_count(store_url) >= threshold, 120,
                       f"{threshold} ledger rows before kill {kill}; log: {log}")
            consumer.send_signal(signal.SIGKILL)
            consumer.wait()
            consumer = start_consumer(store_url, brokers, provider, log)
        eventually(lambda: ledger_count(store_url) >= ORDERS, 180,
                   f"every order in the ledger; log: {log}")
    finally:
        consumer.send_signal(signal.SIGTERM)
        assert consumer.wait(timeout=60) == 0, log.read_text()[-2000:]

    with urllib.request.urlopen(f"{provider}/payments/summary", timeout=10) as answer:
        summary = json.load(answer)
    assert summary["resets_after_commit"] > 0, f"the reset fault never fired: {summary}"
    assert summary["unavailable"] > 0, f"the 503 fault never fired: {summary}"
    assert summary["orders_charged_more_than_once"] == []

    with sqlite3.connect(provider_db) as db:
        charges = db.execute("SELECT payment_id, order_id, idempotency_key, amount "
                             "FROM provider_charge ORDER BY payment_id").fetchall()
    charged = [order_id for _, order_id, _, _ in charges]
    assert sorted(charged) == list(range(1, ORDERS + 1)), "an order charged twice or never"
    for _, order_id, key, amount in charges:
        assert key == orders[order_id][1], f"order {order_id} charged under another key"
        assert Decimal(amount) == Decimal(f"{order_id}.{order_id % 100:02d}")

    by_customer: dict[str, list[int]] = {}
    for order_id in charged:
        by_customer.setdefault(orders[order_id][0], []).append(order_id)
    for customer, seen in by_customer.items():
        assert seen == sorted(seen), f"{customer}: charged in the order {seen}"

    with idem.Store(store_url).begin() as tx:
        ledger = tx.execute("SELECT order_id, event_id, provider_payment_id FROM billing_ledger")
    assert sorted(r.order_id for r in ledger) == list(range(1, ORDERS + 1))
    payment_of = {order_id: payment_id for payment_id, order_id, _, _ in charges}
    for row in ledger:
        # The reference schema keeps the id as a uuid on PostgreSQL, 16 bytes on SQLite.
        event_id = row.event_id if not isinstance(row.event_id, bytes) else uuid.UUID(
            bytes=row.event_id)
        assert str(event_id) == orders[row.order_id][1]
        assert row.provider_payment_id == payment_of[row.order_id]
