"""The exceptions idem raises in Python."""

from __future__ import annotations


class StoreError(Exception):
    """A database error, classified by idem's core as it classifies every store error.

    ``code`` is the core's class (``connection``, ``transaction_aborted``, ``constraint``,
    ``query``, ``in_doubt``, ``timeout``, ...), ``source`` where it came from (``postgres``,
    ``sqlite``), ``detail`` the native code (a SQLSTATE such as ``23505``, an SQLite result
    code) and ``transient`` whether redoing the whole unit of work later may succeed.
    """

    def __init__(self, message: str, code: str, source: str, detail: str, transient: bool):
        super().__init__(message)
        self.code = code
        self.source = source
        self.detail = detail
        self.transient = transient


class ConfigError(ValueError):
    """The configuration is wrong: every problem at once. ``problems`` lists them as
    (key, where the value came from, what is wrong)."""

    def __init__(self, message: str, problems: list[tuple[str, str, str]]):
        super().__init__(message)
        self.problems = problems
