"""The transactional outbox from any Python service: ``enqueue`` writes an event to
``idem_outbox`` through the service's own database connection, inside the transaction the
service has open, so that the event is published (by ``idem relay``) if and only if that
transaction commits.

The row is made by idem's core, as ``Outbox::enqueue`` makes it in C++: the event id is a
UUIDv7 born here, once, and handed to ``payload`` so the event can carry it; the shard is
the key's; a ``traceparent`` header starts the event's trace unless one is given. Nothing
is committed here: the caller commits (or rolls back) its own transaction.

Connections: psycopg 3 (``psycopg.Connection``), psycopg2, sqlite3 (``enqueue``), and
asyncpg or psycopg 3's ``AsyncConnection`` (``await enqueue_async``).
"""

from __future__ import annotations

import re
import uuid
from typing import Any, Callable, Mapping, Sequence, Union

from . import _idem, _json

Payload = Union[str, bytes, Mapping[str, Any], Any]
PayloadFactory = Callable[[uuid.UUID], Payload]

_PLACEHOLDER = re.compile(r"\$(\d+)")


def _statement(style: str) -> str:
    # The core's statement numbers its placeholders $1..$8 in order; drivers that want
    # %s or ? get the same statement with their own marks.
    if style == "dollar":
        return str(_idem.OUTBOX_INSERT)
    mark = "%s" if style == "format" else "?"
    return _PLACEHOLDER.sub(mark, str(_idem.OUTBOX_INSERT))


def _payload_text(value: Payload) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    if isinstance(value, Mapping) or isinstance(value, (list, tuple)):
        return _json.dumps(dict(value) if isinstance(value, Mapping) else list(value))
    if hasattr(value, "json") and callable(value.json):  # a pydantic (v1) model
        return str(value.json())
    raise TypeError(f"an outbox payload must be str, bytes, a dict or a model with .json(), "
                    f"not {type(value).__name__}")


def prepare(*, topic: str, aggregate_type: str, aggregate_id: str,
            payload: Union[Payload, PayloadFactory],
            headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
            message_key: str | None = None) -> tuple[Any, ...]:
    """The row's values in the INSERT's order (event_id first), without writing anything.
    ``payload`` is the event, or a callable that receives the new event id and returns it."""
    header_list = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])

    def make(event_id: uuid.UUID) -> str:
        return _payload_text(payload(event_id) if callable(payload) else payload)

    return tuple(_idem.prepare_outbox_row(topic, aggregate_type, aggregate_id, make,
                                          header_list, message_key))


def _driver(connection: Any) -> str:
    module = type(connection).__module__
    for name in ("psycopg2", "psycopg", "asyncpg", "sqlite3"):
        if module == name or module.startswith(name + "."):
            return name
    raise TypeError(f"idem.outbox: {type(connection).__module__}.{type(connection).__name__} "
                    "is not a psycopg 3, psycopg2, asyncpg or sqlite3 connection")


def _bound(row: tuple[Any, ...], driver: str) -> tuple[Any, ...]:
    event_id = row[0]
    if driver == "sqlite3":
        event_id = event_id.bytes  # idem's SQLite schema keeps a UUID as 16 bytes
    elif driver == "psycopg2":
        event_id = str(event_id)  # psycopg2 adapts uuid.UUID only once registered
    return (event_id,) + row[1:]


def enqueue(connection: Any, *, topic: str, aggregate_type: str, aggregate_id: str,
            payload: Union[Payload, PayloadFactory],
            headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
            message_key: str | None = None) -> uuid.UUID:
    """Inserts the event's outbox row through ``connection`` (psycopg 3, psycopg2 or
    sqlite3), in the transaction it has open; returns the event id. The Kafka key is
    ``message_key``, else ``aggregate_id``."""
    driver = _driver(connection)
    if driver == "asyncpg":
        raise TypeError("idem.outbox: an asyncpg connection needs `await enqueue_async(...)`")
    row = prepare(topic=topic, aggregate_type=aggregate_type, aggregate_id=aggregate_id,
                  payload=payload, headers=headers, message_key=message_key)
    values = _bound(row, driver)
    if driver == "psycopg":
        if _is_async(connection):
            raise TypeError("idem.outbox: an AsyncConnection needs `await enqueue_async(...)`")
        connection.execute(_statement("format"), values)
    elif driver == "psycopg2":
        with connection.cursor() as cursor:
            cursor.execute(_statement("format"), values)
    else:
        connection.execute(_statement("qmark"), values)
    return row[0]


async def enqueue_async(connection: Any, *, topic: str, aggregate_type: str, aggregate_id: str,
                        payload: Union[Payload, PayloadFactory],
                        headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
                        message_key: str | None = None) -> uuid.UUID:
    """``enqueue`` for asyncpg and psycopg 3's AsyncConnection."""
    driver = _driver(connection)
    row = prepare(topic=topic, aggregate_type=aggregate_type, aggregate_id=aggregate_id,
                  payload=payload, headers=headers, message_key=message_key)
    values = _bound(row, driver)
    if driver == "asyncpg":
        await connection.execute(_statement("dollar"), *values)
    elif driver == "psycopg" and _is_async(connection):
        await connection.execute(_statement("format"), values)
    else:
        raise TypeError("idem.outbox: enqueue_async takes an asyncpg connection or a psycopg "
                        "AsyncConnection; use enqueue for the others")
    return row[0]


def _is_async(connection: Any) -> bool:
    return type(connection).__name__.startswith("Async")
