"""Rows with names and Python types, through idem's own store, on both backends."""

import datetime
import uuid
from decimal import Decimal

import pytest

import idem


def test_postgres_values_come_back_as_their_python_types(postgres_url):
    store = idem.Store(postgres_url)
    event_id = idem.uuid7()
    with store.begin() as tx:
        row = tx.execute(
            "SELECT 42::int8 AS count, 7::int2 AS small, 99999999999999.99::numeric(16,2) AS amount,"
            " 0.5::float8 AS ratio, true AS flag, $1::uuid AS event_id,"
            " '2026-12-05 19:50:35.123+00'::timestamptz AS at, 'hello'::text AS greeting,"
            " '{\"fee\": 0.00005, \"n\": 3}'::jsonb AS doc, '\\x00ff'::bytea AS raw,"
            " NULL::text AS nothing, 12345678901234567890::numeric AS huge",
            event_id).one()
    assert row.count == 42 and type(row.count) is int
    assert row.small == 7
    assert row.amount == Decimal("99999999999999.99") and isinstance(row.amount, Decimal)
    assert row.ratio == 0.5 and type(row.ratio) is float
    assert row.flag is True
    assert row.event_id == event_id
    assert row.at == datetime.datetime(2026, 12, 5, 19, 50, 35, 123000, tzinfo=datetime.timezone.utc)
    assert row.greeting == "hello"
    assert row.doc == {"fee": Decimal("0.00005"), "n": 3}
    assert row.raw == b"\x00\xff"
    assert row.nothing is None
    assert row.huge == Decimal("12345678901234567890")


def test_sqlite_values_follow_storage_class_and_declared_type(sqlite_url):
    store = idem.Store(sqlite_url)
    event_id = idem.uuid7()
    with store.begin() as tx:
        tx.execute("CREATE TABLE t (n INTEGER, r REAL, s TEXT, b BOOLEAN, id UUID, at TIMESTAMP,"
                   " doc JSON, raw BLOB)")
        tx.execute("INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", 2**62, 0.25,
                   "text", True, event_id, "2026-12-05T19:50:35+00:00", {"a": Decimal("1.10")},
                   None)
        row = tx.execute("SELECT n, r, s, b, id, at, doc, raw, n + 1 AS next FROM t").one()
    assert row.n == 2**62 and type(row.n) is int
    assert row.r == 0.25
    assert row.s == "text"
    assert row.b is True
    assert row.id == event_id  # a UUID binds as 16 bytes on SQLite and reads back as one
    assert row.at == datetime.datetime(2026, 12, 5, 19, 50, 35, tzinfo=datetime.timezone.utc)
    assert row.doc == {"a": Decimal("1.10")}
    assert row.raw is None
    assert row.next == 2**62 + 1  # an expression has no declared type: its storage class


def test_result_has_columns_rowcount_and_positional_access(store_url):
    store = idem.Store(store_url)
    with store.begin() as tx:
        tx.execute("CREATE TABLE accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL)")
        tx.defer("INSERT INTO accounts (id, balance) VALUES ($1, $2)", "a", 10)
        tx.defer("INSERT INTO accounts (id, balance) VALUES ($1, $2)", "b", 20)
        updated = tx.execute("UPDATE accounts SET balance = balance + $1", 5)
        assert updated.rowcount == 2
        rows = tx.execute("SELECT id, balance, 1 + 1 FROM accounts ORDER BY id")
    assert rows.columns[:2] == ("id", "balance")
    assert [(r.id, r.balance) for r in rows] == [("a", 15), ("b", 25)]
    assert rows[0][2] == 2 and rows[0]._2 == 2  # a column without a usable name
    assert rows[1]._asdict()["balance"] == 25


def test_a_failed_statement_raises_store_error_with_its_class(store_url):
    store = idem.Store(store_url)
    with store.begin() as tx:
        tx.execute("CREATE TABLE once (id INTEGER PRIMARY KEY)")
        tx.execute("INSERT INTO once VALUES ($1)", 1)
        with pytest.raises(idem.StoreError) as raised:
            tx.execute("INSERT INTO once VALUES ($1)", 1)
        tx.rollback()
    assert raised.value.code == "constraint"
    assert raised.value.transient is False
    assert raised.value.source == store.backend


def test_context_manager_commits_or_rolls_back(store_url):
    store = idem.Store(store_url)
    with store.begin() as tx:
        tx.execute("CREATE TABLE kept (v INTEGER)")
    with pytest.raises(RuntimeError):
        with store.begin() as tx:
            tx.execute("INSERT INTO kept VALUES ($1)", 1)
            raise RuntimeError("undo")
    with store.begin() as tx:
        tx.execute("INSERT INTO kept VALUES ($1)", 2)
    with store.begin() as tx:
        assert [r.v for r in tx.execute("SELECT v FROM kept")] == [2]


def test_a_finished_transaction_refuses_statements(store_url):
    store = idem.Store(store_url)
    tx = store.begin()
    tx.commit()
    with pytest.raises(idem.StoreError, match="finished"):
        tx.execute("SELECT 1")


def test_parameters_of_an_unsupported_type_name_the_placeholder(sqlite_url):
    store = idem.Store(sqlite_url)
    with store.begin() as tx:
        with pytest.raises(TypeError, match=r"parameter \$2: a set cannot be bound"):
            tx.execute("SELECT $1, $2", 1, {1})
