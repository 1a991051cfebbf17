"""Python handlers on idem.App against the compiled count handler, on a durable PostgreSQL.

    scripts/with-postgres.sh /usr/bin/python3 bench/python_handlers.py \
        --idem build-rel/cli/idem --pythonpath build-rel/python \
        [--events 200000] [--partitions 32] [--batch 1000] [--rounds 5] \
        [--variants compiled,sync,async] [--poll-ms 25] [--profile-dir DIR]

(bench/python-handlers.sh does exactly this.) Three variants do the same work: one
effect_log row per new event, deferred into the batch's transaction with the dedup mark.

  compiled  `idem consume --handler count` (src/components/reference/count_handler.cpp)
  sync      bench/python/count_app.py --mode sync: a `def` handler calling tx.defer
  async     bench/python/count_app.py --mode async: an `async def` handler doing the same

The server is switched to fsync=on and full_page_writes=on first (scripts/with-postgres.sh
starts it with both off; bench/postgres_durable.hpp does the same for the C++ benchmarks)
and the settings in force are printed. One `idem dev-broker` serves the whole run; the
events (order.confirmed.v1, a UUIDv7 id each, no duplicates) are produced once, before
the rounds, on 32 partitions by default: the dev broker keeps about 5 MiB per partition and
silently drops older records (the driver checks the watermarks after producing). Every run is a process of its own with a fresh consumer group and a fresh
database (migrated with `idem migrate --reference` and CHECKPOINTed before the process
starts), and the rounds rotate which variant goes first, so that load changing on a
shared machine hits every variant alike.

The rate excludes process start-up, group join and the first batch: the driver polls each
process's admin endpoint (`admin.listen`, GET /metrics) every --poll-ms and takes
(events done, time) at the first poll that sees an event done and at the first that sees
all of them done: rate = events between the two / time between the two, where "done" is
processed + duplicates + dead-lettered (only processed is expected). The process's CPU
time (every thread, from /proc) between the same two polls gives "cpu us/ev". After each
run the driver checks that effect_log holds exactly one row per event for the group.

--profile-dir DIR: after the rounds, one more run of each variant under `perf record -g`
(when perf is installed; DIR/perf-<variant>.data and a report of the top symbols) and of
each Python variant with cProfile on the handler's thread (DIR/cprofile-<variant>.txt).
These runs are not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition

HERE = Path(__file__).resolve().parent
COUNT_APP = HERE / "python" / "count_app.py"
PYTHON = "/usr/bin/python3"
VARIANTS = ("compiled", "sync", "async")
METRIC = re.compile(
    r"^idem_consumer_(events_processed|duplicates_skipped|dead_lettered)_total(?:\{[^}]*\})? (\S+)$",
    re.M,
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- PostgreSQL ------------------------------------------------------------------------


def pg(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def show(dsn: str, setting: str) -> str:
    with pg(dsn) as c:
        return str(c.execute(f"SHOW {setting}").fetchone()[0])


def make_durable(dsn: str) -> None:
    with pg(dsn) as c:
        c.execute("ALTER SYSTEM SET fsync = on")
        c.execute("ALTER SYSTEM SET full_page_writes = on")
        c.execute("SELECT pg_reload_conf()")
    for _ in range(100):
        if show(dsn, "fsync") == "on" and show(dsn, "full_page_writes") == "on":
            return
        time.sleep(0.05)
    raise RuntimeError("fsync did not turn on")


def database_url(dsn: str, name: str) -> str:
    base, _, _ = dsn.rpartition("/")
    return f"{base}/{name}"


# ---- the events ------------------------------------------------------------------------


def uuid7_strings(n: int) -> list[str]:
    """n UUIDv7 strings (RFC 9562), increasing: the millisecond of now, then a counter in
    rand_a/rand_b's high bits (strictly increasing within the process), then random."""
    ms = time.time_ns() // 1_000_000
    out = []
    for i in range(n):
        rand = int.from_bytes(os.urandom(8), "big")
        value = (ms << 80) | (0x7 << 76) | (((i >> 30) & 0xFFF) << 64) | (0b10 << 62)
        value |= ((i & 0x3FFFFFFF) << 32) | (rand & 0xFFFFFFFF)
        h = f"{value:032x}"
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


def produce(brokers: str, topic: str, partitions: int, n: int) -> None:
    """n order.confirmed.v1 records (the reference system's shape, which the Python App
    reads as a JSON object with /event_id and /event_type), key = order id, partition =
    order id % partitions, the id also in an event_id header as the relay sends it."""
    producer = Producer({
        "bootstrap.servers": brokers,
        "enable.idempotence": True,
        "linger.ms": 20,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 500000,
        "log_level": 3,
    })
    failures = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(err)

    now = datetime.now(timezone.utc)
    occurred = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    ids = uuid7_strings(n)
    for i, event_id in enumerate(ids):
        order_id = 1_000_000 + i
        payload = (
            f'{{"event_id":"{event_id}","event_type":"order.confirmed.v1",'
            f'"occurred_at":"{occurred}","order_id":{order_id},'
            f'"customer_id":{1000 + order_id % 9000},"total_amount":"{100 + i % 100000}.{i % 100:02d}"}}'
        )
        while True:
            try:
                producer.produce(topic, payload.encode(), str(order_id).encode(),
                                 partition=order_id % partitions,
                                 headers=[("event_id", event_id.encode())],
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) != 0 or failures:
        raise RuntimeError(f"produce: {len(failures)} failed deliveries, e.g. {failures[:1]}")
    # The dev broker (librdkafka's mock cluster) keeps about 5 MiB per partition and drops
    # the oldest records beyond it without an error: check that every record is there.
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "pyb-watermarks",
                         "log_level": 3})
    kept = 0
    for partition in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        kept += high - low
    consumer.close()
    if kept != n:
        raise RuntimeError(f"the broker holds {kept} of the {n} records produced: use more "
                           f"partitions (about 2 MiB of records per partition at most)")


# ---- one run ---------------------------------------------------------------------------


@dataclass
class Run:
    variant: str
    round: int
    events: int = 0  # events between the first and the last poll
    seconds: float = 0.0
    cpu_s: float = 0.0
    load: float = 0.0
    checks: str = ""
    stdout_tail: str = ""
    samples: list = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s * 1e6 / self.events if self.events else 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of pid (the process's own line sums them)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def done_count(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    return int(sum(float(v) for _, v in METRIC.findall(text)))


def command(args, variant: str, db: str, brokers: str, group: str, port: int,
            profile: str = "") -> list[str]:
    if variant == "compiled":
        return [args.idem, "consume", "--handler", "count", "--db", db, "--brokers", brokers,
                "--topic", args.topic, "--group", group, "--batch", str(args.batch),
                "--set", f"admin.listen=127.0.0.1:{port}"]
    mode = "async" if variant.startswith("async") else variant
    cmd = [PYTHON, str(COUNT_APP), "--mode", mode, "--db", db, "--brokers", brokers,
           "--topic", args.topic, "--group", group, "--batch", str(args.batch),
           "--admin", f"127.0.0.1:{port}"]
    if profile:
        cmd += ["--profile", profile]
    if args.serve:
        cmd.append("--serve")
    return cmd


def run_once(args, variant: str, rnd: int, brokers: str, profile: str = "",
             perf_out: str = "") -> Run:
    run = Run(variant, rnd)
    name = f"idem_pyb_{variant.replace('-', '_')}_{rnd}_{secrets.token_hex(3)}"
    group = f"pyb-{variant}-{rnd}-{secrets.token_hex(3)}"
    db = database_url(args.dsn, name)
    with pg(args.dsn) as c:
        c.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    subprocess.run([args.idem, "migrate", "--reference", "--db", db], check=True,
                   stdout=subprocess.DEVNULL)
    with pg(args.dsn) as c:
        c.execute("CHECKPOINT")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=args.pythonpath)
    out_path = Path(args.workdir) / f"{name}.out"
    run.load = os.getloadavg()[0]
    with open(out_path, "w+b") as out:
        proc = subprocess.Popen(command(args, variant, db, brokers, group, port, profile),
                                stdout=out, stderr=subprocess.STDOUT, env=env)
        perf = None
        first = last = None
        deadline = time.monotonic() + args.timeout
        progress = (time.monotonic(), -1)  # the last time the count moved
        try:
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    break
                n = done_count(port)
                t = time.monotonic()
                if n is not None and n != progress[1]:
                    progress = (t, n)
                elif t - progress[0] > args.stall:
                    break
                if n is not None and n > 0:
                    try:
                        cpu = process_cpu_seconds(proc.pid)
                    except OSError:
                        break
                    if first is None:
                        first = (t, n, cpu)
                        if perf_out:
                            perf = subprocess.Popen(
                                ["perf", "record", "-F", "499", "-g", "-o", perf_out, "-p",
                                 str(proc.pid)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
                    run.samples.append((round(t - first[0], 3), n))
                    if n >= args.events:
                        last = (t, n, cpu)
                        break
                time.sleep(args.poll_ms / 1000)
        finally:
            if perf is not None:
                perf.send_signal(signal.SIGINT)
                perf.wait()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        out.seek(0)
        text = out.read().decode(errors="replace")
    run.stdout_tail = "\n".join(text.splitlines()[-5:])
    if first is None or last is None:
        raise RuntimeError(f"{variant} round {rnd}: did not finish {args.events} events "
                           f"(exit {proc.returncode}); output:\n{text[-3000:]}")
    run.events = last[1] - first[1]
    run.seconds = last[0] - first[0]
    run.cpu_s = last[2] - first[2]
    with pg(db) as c:
        rows, distinct = c.execute(
            "SELECT count(*), count(DISTINCT event_id) FROM effect_log WHERE consumer_group = %s",
            (group,)).fetchone()
    run.checks = f"effect_log rows={rows} distinct={distinct}"
    if rows != args.events or distinct != args.events:
        raise RuntimeError(f"{variant} round {rnd}: {run.checks}, expected {args.events}")
    with pg(args.dsn) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    out_path.unlink()
    return run


# ---- the report ------------------------------------------------------------------------


def median(values):
    return statistics.median(values) if values else 0.0


def report(args, runs: list[Run]) -> None:
    by = {v: [r for r in runs if r.variant == v] for v in args.variants}
    base = median([r.rate for r in by.get("compiled", [])])
    # The ratio of each round's own pair, so a slow round of both does not count twice.
    per_round = {}
    for v in args.variants:
        ratios = []
        for r in by[v]:
            twin = [c for c in by.get("compiled", []) if c.round == r.round]
            if twin and twin[0].rate > 0:
                ratios.append(r.rate / twin[0].rate)
        per_round[v] = ratios
    print()
    print("| variant | events/s (median) | every round (round order) | vs compiled (medians) "
          "| vs compiled (median of same-round ratios) | cpu us/ev (median) | load at start |")
    print("|---|---:|---|---:|---:|---:|---|")
    for v in args.variants:
        rs = by[v]
        m = median([r.rate for r in rs])
        vs = f"**{m / base:.0%}**" if base and v != "compiled" else ""
        same = f"{median(per_round[v]):.0%}" if v != "compiled" and per_round[v] else ""
        print(f"| {v} | {m:,.0f} | {' / '.join(f'{r.rate:,.0f}' for r in rs)} | {vs} | {same} | "
              f"{median([r.cpu_us_per_event for r in rs]):.1f} | "
              f"{' / '.join(f'{r.load:.1f}' for r in rs)} |")
    print()
    sys.stdout.flush()


def profile_runs(args, brokers: str) -> None:
    out = Path(args.profile_dir)
    out.mkdir(parents=True, exist_ok=True)
    have_perf = shutil.which("perf") is not None
    for v in args.variants:
        if have_perf:
            data = str(out / f"perf-{v}.data")
            r = run_once(args, v, 0, brokers, perf_out=data)
            log(f"perf run {v}: {r.rate:,.0f} ev/s (under perf)")
            text = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio",
                                   "--sort", "comm,dso,symbol", "--percent-limit", "0.7", "-g",
                                   "none"], capture_output=True, text=True, check=False).stdout
            with open(out / f"perf-{v}.txt", "w", encoding="utf-8") as f:
                f.write("\n".join(re.sub(r"\s+-\s+-\s*$", "", line)[:200].rstrip()
                                  for line in text.splitlines()) + "\n")
        if v != "compiled":
            path = str(out / f"cprofile-{v}.txt")
            r = run_once(args, v, 0, brokers, profile=path)
            log(f"cProfile run {v}: {r.rate:,.0f} ev/s (under cProfile) -> {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idem", required=True, help="the idem CLI (build-rel/cli/idem)")
    p.add_argument("--pythonpath", required=True, help="the package beside its module "
                   "(build-rel/python)")
    p.add_argument("--dsn", default=os.environ.get("IDEM_BENCH_PG_DSN")
                   or os.environ.get("IDEM_TEST_PG_DSN"))
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANTS[:3]))
    p.add_argument("--topic", default="bench.order.confirmed")
    p.add_argument("--poll-ms", type=float, default=25)
    p.add_argument("--timeout", type=float, default=600, help="seconds per run at most")
    p.add_argument("--stall", type=float, default=60,
                   help="give up a run when its count has not moved for this many seconds")
    p.add_argument("--serve", action="store_true",
                   help="Python variants run `await app.serve()` instead of app.run()")
    p.add_argument("--profile-dir", default="")
    p.add_argument("--json", default="", help="also write every run to this file")
    args = p.parse_args()
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.dsn:
        p.error("no PostgreSQL: run under scripts/with-postgres.sh or pass --dsn")
    for v in args.variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v}")

    make_durable(args.dsn)
    settings = {s: show(args.dsn, s) for s in
                ("server_version", "fsync", "full_page_writes", "synchronous_commit",
                 "wal_sync_method", "shared_buffers")}
    print("postgres: " + " ".join(f"{k}={v}" for k, v in settings.items()))
    print(f"events={args.events} partitions={args.partitions} batch={args.batch} "
          f"rounds={args.rounds} variants={','.join(args.variants)} poll={args.poll_ms}ms "
          f"cpus={os.cpu_count()}")
    print(f"start: {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

    args.workdir = tempfile.mkdtemp(prefix="idem-pyb-")
    broker = subprocess.Popen([args.idem, "dev-broker", "--topic",
                               f"{args.topic}:{args.partitions}", "--no-stdin"],
                              stdout=subprocess.PIPE, text=True)
    try:
        brokers = broker.stdout.readline().strip()
        if not brokers:
            raise RuntimeError("idem dev-broker printed no bootstrap servers")
        t = time.monotonic()
        produce(brokers, args.topic, args.partitions, args.events)
        log(f"produced {args.events} events in {time.monotonic() - t:.1f} s to {brokers}")
        runs: list[Run] = []
        for rnd in range(1, args.rounds + 1):
            k = (rnd - 1) % len(args.variants)
            for v in args.variants[k:] + args.variants[:k]:
                r = run_once(args, v, rnd, brokers)
                runs.append(r)
                print(f"round {rnd} {v:8} {r.rate:10,.0f} ev/s  {r.events} ev in "
                      f"{r.seconds:.2f} s  cpu {r.cpu_us_per_event:.1f} us/ev  "
                      f"load {r.load:.2f}  {r.checks}", flush=True)
        print(f"end: {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC, "
              f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        report(args, runs)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"settings": settings, "runs": [r.__dict__ for r in runs]}, f)
        if args.profile_dir:
            profile_runs(args, brokers)
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            broker.kill()
        shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
