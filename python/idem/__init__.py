"""idem for Python: exactly-once effects for Kafka consumers, on idem's own engine.

This package binds idem's C++ core (the compiled module ``idem._idem``); nothing of the
engine is re-implemented in Python. What it offers:

- ``App``: handlers written in Python (``@app.handler(topic)``, sync or ``async def``),
  run by idem's own consumer with its dedup marks, offsets, DLQ and retry topics,
  configured as ``idem consume`` is;
- ``uuid7()``: a UUIDv7 (RFC 9562) from the core's monotonic generator, the event ids
  idem's consumers dedup on;
- ``Store``: idem's store (PostgreSQL or SQLite) by URL, its transactions, and rows with
  names and Python types (int, Decimal, float, bool, UUID, datetime, JSON, bytes, str);
- ``outbox.enqueue`` / ``outbox.enqueue_async``: the transactional outbox through a
  service's own psycopg 3, psycopg2, asyncpg or sqlite3 connection, published by
  ``idem relay``.

See docs/python.md.
"""

from __future__ import annotations

import uuid as _uuid

from . import _idem, outbox
from ._app import App, AsyncTx, DeadLetter, Event, Request, Response, Retry, Tx
from ._store import Result, Store, Transaction
from .errors import ConfigError, StoreError

__all__ = ["uuid7", "App", "Event", "Tx", "AsyncTx", "Retry", "DeadLetter", "Request",
           "Response", "Store",
           "Transaction", "Result", "StoreError", "ConfigError", "outbox"]


def uuid7() -> _uuid.UUID:
    """A new UUIDv7 (RFC 9562): strictly increasing within this process, also within one
    millisecond and when the clock steps back."""
    return _uuid.UUID(bytes=_idem.uuid7_bytes())
