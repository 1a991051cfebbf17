"""Stores and transactions: idem's own (the same code as ``idem consume``), from Python."""

from __future__ import annotations

import collections
from typing import Any

from . import _idem


class Result(list):  # type: ignore[type-arg]
    """The rows of one statement: a list of named tuples (``row.balance``, ``row[0]``,
    ``row._asdict()``), with ``columns`` (the names the statement gives) and ``rowcount``
    (rows inserted, updated or deleted). A column whose name is not a Python identifier
    (``count(*)``) is reached by position or as ``_<position>``."""

    columns: tuple[str, ...]
    rowcount: int

    def __init__(self, columns: tuple[str, ...], rows: list[tuple[Any, ...]], rowcount: int):
        row_type = _row_type(columns)
        super().__init__(row_type._make(r) for r in rows)
        self.columns = columns
        self.rowcount = rowcount

    def one(self) -> Any:
        """The only row; raises LookupError unless there is exactly one."""
        if len(self) != 1:
            raise LookupError(f"expected one row, got {len(self)}")
        return self[0]

    def scalar(self) -> Any:
        """The first column of the only row (None when there is no row)."""
        if not self:
            return None
        return self.one()[0]


_row_types: dict[tuple[str, ...], type] = {}


def _row_type(columns: tuple[str, ...]) -> Any:
    # One named-tuple class per distinct list of column names: a handler runs the same few
    # statements, so the classes are made once and reused.
    row_type = _row_types.get(columns)
    if row_type is None:
        row_type = collections.namedtuple("Row", columns, rename=True)  # type: ignore[misc]
        if len(_row_types) < 1024:
            _row_types[columns] = row_type
    return row_type


class Statements:
    """Statements in a transaction of the compiled module: ``execute`` runs one at once and
    returns its rows; ``defer`` queues one whose result is not needed (PostgreSQL sends the
    queued ones in one round trip, merging consecutive INSERTs of one text). Placeholders
    are ``$1``..``$n``; values are bound, never spliced."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any):
        self._raw = raw

    def execute(self, sql: str, *params: Any) -> Result:
        columns, rows, rowcount = self._raw.execute(sql, *params)
        return Result(columns, rows, rowcount)

    def defer(self, sql: str, *params: Any) -> None:
        self._raw.defer(sql, *params)


class Transaction(Statements):
    """One database transaction (``execute``, ``defer``: Statements). As a context manager
    it commits when the block ends normally and rolls back when it raises."""

    __slots__ = ()

    def sync(self) -> None:
        """Runs the deferred statements now and raises the first error among them."""
        self._raw.sync()

    def commit(self) -> None:
        self._raw.commit()

    def rollback(self) -> None:
        self._raw.rollback()

    @property
    def active(self) -> bool:
        return bool(self._raw.active)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.active:
            self.commit()
        else:
            self.rollback()


class Store:
    """A connection to a store by URL, as ``idem consume`` opens it:
    ``postgresql://user@host/db`` (several hosts for failover) or ``sqlite:///path.db``.
    One connection: one transaction at a time, one thread at a time. It closes when the
    last reference to it (its own or a transaction's) is gone."""

    def __init__(self, url: str, *, application_name: str = "idem-python",
                 connect_timeout: float = 10.0):
        self._raw = _idem.Store(url, application_name, connect_timeout)

    @property
    def backend(self) -> str:
        """``postgres`` or ``sqlite``."""
        return str(self._raw.backend)

    def migrate(self) -> list[str]:
        """Creates or upgrades idem's own tables (processed_event, idem_outbox, ...); returns
        the migrations it applied."""
        return list(self._raw.migrate())

    def begin(self) -> Transaction:
        return Transaction(self._raw.begin())
