"""The outbox helper: rows inserted through a service's own connection, in its own
transaction, as idem's core makes them, and published by `idem relay`."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import uuid
from decimal import Decimal

import pytest

import idem


def _order_event(event_id: uuid.UUID) -> dict:
    return {"event_id": str(event_id), "order_id": "o-1", "amount": Decimal("99999999999999.99")}


def _outbox_rows(url: str) -> list:
    with idem.Store(url).begin() as tx:
        return list(tx.execute(
            "SELECT event_id, aggregate_type, aggregate_id, topic, message_key, shard, payload, "
            "headers FROM idem_outbox ORDER BY id"))


def _check_row(row, event_id: uuid.UUID, headers_of) -> None:
    assert row.event_id == event_id or uuid.UUID(bytes=row.event_id) == event_id
    assert (row.aggregate_type, row.aggregate_id, row.topic, row.message_key) == (
        "order", "o-1", "orders", "o-1")
    # The payload carries the id born for the row, and money keeps its digits.
    assert json.loads(row.payload, parse_float=Decimal) == {
        "event_id": str(event_id), "order_id": "o-1", "amount": Decimal("99999999999999.99")}
    headers = headers_of(row.headers)
    assert headers["tenant"] == "t1"
    assert headers["traceparent"].startswith("00-")  # the event's trace starts here
    # The shard is the core's FNV-1a of the key, as the C++ outbox computes it.
    assert row.shard == idem.outbox.prepare(topic="t", aggregate_type="a", aggregate_id="o-1",
                                            payload="{}")[5]


def test_psycopg3_commits_the_row_with_the_caller_and_never_without(postgres_url):
    import psycopg

    idem.Store(postgres_url).migrate()
    with psycopg.connect(postgres_url) as conn:
        with conn.transaction():
            event_id = idem.outbox.enqueue(conn, topic="orders", aggregate_type="order",
                                           aggregate_id="o-1", payload=_order_event,
                                           headers={"tenant": "t1"})
        with pytest.raises(RuntimeError):
            with conn.transaction():
                idem.outbox.enqueue(conn, topic="orders", aggregate_type="order",
                                    aggregate_id="o-2", payload="{}")
                raise RuntimeError("the business change failed")
    rows = _outbox_rows(postgres_url)
    assert len(rows) == 1  # the rolled-back transaction left no event
    assert event_id.version == 7
    _check_row(rows[0], event_id, lambda h: h)


def test_psycopg2(postgres_url):
    import psycopg2

    idem.Store(postgres_url).migrate()
    conn = psycopg2.connect(postgres_url)
    try:
        event_id = idem.outbox.enqueue(conn, topic="orders", aggregate_type="order",
                                       aggregate_id="o-1", payload=_order_event,
                                       headers=[("tenant", "t1")])
        conn.commit()
    finally:
        conn.close()
    rows = _outbox_rows(postgres_url)
    assert len(rows) == 1
    _check_row(rows[0], event_id, lambda h: h)


def test_asyncpg_and_psycopg_async(postgres_url):
    import asyncpg
    import psycopg

    idem.Store(postgres_url).migrate()

    async def write() -> list[uuid.UUID]:
        conn = await asyncpg.connect(postgres_url)
        try:
            async with conn.transaction():
                first = await idem.outbox.enqueue_async(
                    conn, topic="orders", aggregate_type="order", aggregate_id="o-1",
                    payload=_order_event, headers={"tenant": "t1"})
        finally:
            await conn.close()
        async with await psycopg.AsyncConnection.connect(postgres_url) as aconn:
            async with aconn.transaction():
                second = await idem.outbox.enqueue_async(
                    aconn, topic="orders", aggregate_type="order", aggregate_id="o-1",
                    payload=_order_event, headers={"tenant": "t1"})
        return [first, second]

    ids = asyncio.run(write())
    rows = _outbox_rows(postgres_url)
    assert len(rows) == 2
    for row, event_id in zip(rows, ids):
        _check_row(row, event_id, lambda h: h)
    assert ids[0] < ids[1]


def test_an_async_connection_in_enqueue_is_refused_by_name(postgres_url):
    import asyncpg

    async def misuse() -> None:
        conn = await asyncpg.connect(postgres_url)
        try:
            with pytest.raises(TypeError, match="enqueue_async"):
                idem.outbox.enqueue(conn, topic="orders", aggregate_type="order",
                                    aggregate_id="o-1", payload="{}")
        finally:
            await conn.close()

    asyncio.run(misuse())


def test_bad_messages_are_refused_before_anything_is_written(sqlite_url):
    idem.Store(sqlite_url).migrate()
    conn = sqlite3.connect(sqlite_url.removeprefix("sqlite://"))
    with pytest.raises(idem.StoreError, match="must not be empty"):
        idem.outbox.enqueue(conn, topic="", aggregate_type="order", aggregate_id="o-1",
                            payload="{}")
    with pytest.raises(idem.StoreError, match="event_id header"):
        idem.outbox.enqueue(conn, topic="orders", aggregate_type="order", aggregate_id="o-1",
                            payload="{}", headers={"event_id": "x"})
    with pytest.raises(TypeError, match="not a psycopg 3, psycopg2, asyncpg or sqlite3"):
        idem.outbox.enqueue(object(), topic="orders", aggregate_type="order",
                            aggregate_id="o-1", payload="{}")
    conn.commit()
    conn.close()
    assert _outbox_rows(sqlite_url) == []


def _idem_cli() -> str:
    # IDEM_TEST_*: idem's configuration loader ignores that prefix (any other IDEM_* variable
    # it does not know makes the commands refuse to start).
    cli = os.environ.get("IDEM_TEST_CLI")
    if not cli:
        pytest.skip("IDEM_TEST_CLI is not set (ctest sets it)")
    return cli


def test_sqlite3_rows_are_published_by_idem_relay(sqlite_url, tmp_path):
    from confluent_kafka import Consumer

    cli = _idem_cli()
    idem.Store(sqlite_url).migrate()
    conn = sqlite3.connect(sqlite_url.removeprefix("sqlite://"))
    with conn:  # sqlite3's context manager commits
        event_id = idem.outbox.enqueue(conn, topic="orders", aggregate_type="order",
                                       aggregate_id="o-1", payload=_order_event,
                                       headers={"tenant": "t1"})
    conn.close()
    _check_row(_outbox_rows(sqlite_url)[0], event_id, json.loads)

    broker = subprocess.Popen([cli, "dev-broker", "--topic", "orders:1", "--no-stdin"],
                              stdout=subprocess.PIPE, text=True)
    try:
        bootstrap = broker.stdout.readline().strip()
        assert bootstrap, "idem dev-broker printed no bootstrap servers"
        subprocess.run([cli, "relay", "--db", sqlite_url, "--brokers", bootstrap,
                        "--until-empty", "--timeout-s", "60"], check=True, timeout=120)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "outbox-test",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["orders"])
        try:
            record = None
            for _ in range(120):
                record = consumer.poll(0.5)
                if record is not None and record.error() is None:
                    break
            assert record is not None and record.error() is None, "nothing was published"
        finally:
            consumer.close()
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    assert record.key() == b"o-1"
    assert json.loads(record.value())["event_id"] == str(event_id)
    headers = {k: v.decode() for k, v in record.headers()}
    assert headers["event_id"] == str(event_id)
    assert headers["tenant"] == "t1"
