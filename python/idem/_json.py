"""JSON text for values bound as parameters and written as outbox payloads.

The standard library's encoder writes a float's shortest repr and refuses Decimal; money
must keep its digits, so a Decimal is written as the JSON number of its exact text
(``Decimal("99999999999999.99")`` stays 99999999999999.99). Everything else follows
``json.dumps``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


def dumps(value: Any) -> str:
    """``value`` (dict, list, str, int, float, bool, None, Decimal) as compact JSON text."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Any, out: list[str]) -> None:
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} has no JSON form")
        out.append(str(value))
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            if not isinstance(key, str):
                raise TypeError(f"a JSON object key must be a str, not {type(key).__name__}")
            out.append(json.dumps(key))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        out.append(json.dumps(value, allow_nan=False, separators=(",", ":")))
