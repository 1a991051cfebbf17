"""Fixtures of the idem-for-Python suite: stores on both backends.

PostgreSQL tests run on the server named by IDEM_TEST_PG_DSN (scripts/with-postgres.sh
starts a throwaway one), each in a new database of its own; without it they skip, and
under CI=true they fail, as the C++ suite's do.
"""

from __future__ import annotations

import os
import secrets
from typing import Iterator

import pytest


def _postgres_dsn() -> str:
    dsn = os.environ.get("IDEM_TEST_PG_DSN")
    if not dsn:
        if os.environ.get("CI") == "true":
            pytest.fail("IDEM_TEST_PG_DSN is not set (run under scripts/with-postgres.sh)")
        pytest.skip("IDEM_TEST_PG_DSN is not set")
    return dsn


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped afterwards."""
    import psycopg

    dsn = _postgres_dsn()
    name = "idem_py_" + secrets.token_hex(6)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    base, _, _ = dsn.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite://{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request) -> str:
    """A fresh store URL on each backend in turn."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return request.getfixturevalue(fixture)
