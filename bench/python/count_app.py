"""The `count` handler of `idem consume --handler count` written in Python on idem.App:
one effect_log row per new event, deferred, in the batch's transaction. The driver
(bench/python_handlers.py) runs it as a process of its own, like `idem consume`, and
reads its progress from the admin endpoint (`admin.listen`) the same way.

    PYTHONPATH=build-rel/python /usr/bin/python3 bench/python/count_app.py --mode sync \
        --db postgresql://... --brokers 127.0.0.1:PORT --topic T --group G \
        [--batch 1000] [--admin 127.0.0.1:PORT] [--profile FILE] [--serve]

--mode sync: a plain function; --mode async: an `async def` handler doing the same (its
defer is not awaited). --serve runs `await app.serve()` in asyncio.run instead of
app.run(). --profile FILE: cProfile of the thread(s) that run the handler, enabled at
the first call (the consumer calls Python from a thread of its own, which a profiler
enabled on the main thread does not see); the 30 largest own times go to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import threading

import idem

INSERT = (
    "INSERT INTO effect_log(consumer_group, event_id, topic, kafka_partition, kafka_offset) "
    "VALUES ($1, $2, $3, $4, $5)"
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["sync", "async"], required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--admin", default="")
    parser.add_argument("--profile", default="")
    parser.add_argument("--serve", action="store_true")
    args = parser.parse_args()

    settings = {
        "store.url": args.db,
        "kafka.bootstrap.servers": args.brokers,
        "consumer.group": args.group,
        "consumer.batch_size": args.batch,
        "kafka.auto.offset.reset": "earliest",
    }
    if args.admin:
        settings["admin.listen"] = args.admin
    app = idem.App(settings=settings)
    group = args.group

    profiles: dict[int, cProfile.Profile] = {}
    lock = threading.Lock()

    def profile_this_thread() -> None:
        # Once per thread that calls a handler: sys.setprofile is per thread.
        ident = threading.get_ident()
        if ident not in profiles:
            with lock:
                prof = cProfile.Profile()
                profiles[ident] = prof
            prof.enable()

    if args.mode == "sync":
        if args.profile:

            @app.handler(args.topic)
            def on_event_profiled(event, tx) -> None:
                profile_this_thread()
                tx.defer(INSERT, group, event.id, event.topic, event.partition, event.offset)

        else:

            @app.handler(args.topic)
            def on_event(event, tx) -> None:
                tx.defer(INSERT, group, event.id, event.topic, event.partition, event.offset)

    else:
        if args.profile:

            @app.handler(args.topic)
            async def on_event_async_profiled(event, tx) -> None:
                profile_this_thread()
                tx.defer(INSERT, group, event.id, event.topic, event.partition, event.offset)

        else:

            @app.handler(args.topic)
            async def on_event_async(event, tx) -> None:
                tx.defer(INSERT, group, event.id, event.topic, event.partition, event.offset)

    print(f"consuming {args.topic} as {group} ({args.mode})", flush=True)
    stats = asyncio.run(app.serve()) if args.serve else app.run()
    if args.profile:
        out = io.StringIO()
        for ident, prof in profiles.items():
            prof.create_stats()
            out.write(f"== thread {ident}\n")
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
        with open(args.profile, "w", encoding="utf-8") as f:
            f.write(out.getvalue())
    names = ("delivered", "processed", "duplicates", "dead_lettered", "retries", "transactions")
    # idem.Stats (attributes) or a dict of the same names.
    values = {n: stats[n] if isinstance(stats, dict) else getattr(stats, n) for n in names}
    print("stopped: " + " ".join(f"{n}={v}" for n, v in values.items()), flush=True)


if __name__ == "__main__":
    main()
