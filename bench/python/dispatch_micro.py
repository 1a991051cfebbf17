"""The Python side of one event in isolation: idem/_app.py's dispatcher running the count
handler (sync and async) against a transaction whose defer does nothing, no engine, no
database; and the same async dispatch with the handlers' loop set running once instead of
around every event (bench/python/count_app.py --loop-once). It reaches into idem._app's
private parts (_dispatcher, _Route, _HandlerLoop), so it follows their signatures.

    PYTHONPATH=build-rel/python /usr/bin/python3 bench/python/dispatch_micro.py [N]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

from idem import _app

sys.path.insert(0, str(Path(__file__).resolve().parent))
import count_app  # noqa: E402

INSERT = count_app.INSERT


class NoDatabase:
    active = True

    def defer(self, sql, *params) -> None:  # type: ignore[no-untyped-def]
        pass


def sync_handler(event, tx) -> None:  # type: ignore[no-untyped-def]
    tx.defer(INSERT, "group", event.id, event.topic, event.partition, event.offset)


async def async_handler(event, tx) -> None:  # type: ignore[no-untyped-def]
    tx.defer(INSERT, "group", event.id, event.topic, event.partition, event.offset)


def per_event_us(fn, is_async: bool, n: int) -> float:  # type: ignore[no-untyped-def]
    loop = _app._HandlerLoop()
    dispatch = _app._dispatcher([_app._Route("t", None, fn, None, is_async)], loop)
    raw, id_bytes, headers = NoDatabase(), uuid.uuid4().bytes, [("event_id", b"x" * 36)]
    start = time.perf_counter()
    for i in range(n):
        dispatch(0, id_bytes, "order.confirmed.v1", "{}", "t", 3, i, b"1000", headers, raw, None)
    elapsed = time.perf_counter() - start
    loop.close()
    return elapsed / n * 1e6


def loop_us(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn(n)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    best = lambda f: min(f() for _ in range(3))  # noqa: E731
    print(f"dispatch, sync handler:  {best(lambda: per_event_us(sync_handler, False, n)):.2f} us/event")
    print(f"dispatch, async handler: {best(lambda: per_event_us(async_handler, True, n)):.2f} us/event")
    event_loop = asyncio.new_event_loop()
    set_running = asyncio.events._set_running_loop

    def pairs(k: int) -> None:
        for _ in range(k):
            set_running(event_loop)
            set_running(None)

    def getpids(k: int) -> None:
        for _ in range(k):
            os.getpid()

    def uuids(k: int) -> None:
        for _ in range(k):
            uuid.UUID(bytes=b"0123456789abcdef")

    print(f"  asyncio._set_running_loop(loop) + (None): {best(lambda: loop_us(pairs, n)):.2f} us")
    print(f"  os.getpid() (a system call):              {best(lambda: loop_us(getpids, n)):.2f} us")
    print(f"  uuid.UUID(bytes=...) (event.id):          {best(lambda: loop_us(uuids, n)):.2f} us")
    count_app.set_running_loop_once()
    print(f"dispatch, async handler, running loop set once: "
          f"{best(lambda: per_event_us(async_handler, True, n)):.2f} us/event")


if __name__ == "__main__":
    main()
