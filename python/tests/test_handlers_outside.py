"""Python handlers tested from outside: real processes, a producer that is not idem, SIGKILL.

A consumer app (outside/balance_consumer.py, an idem.App with a balance handler) runs as
a process of its own against `idem dev-broker` and a store on SQLite or PostgreSQL. A
confluent-kafka producer sends deposits, about a tenth of them twice (same event, new
offset), and records idem must dead-letter. While the records flow the consumer is
SIGKILLed three times at moments chosen by its progress (the movement count passing random
thresholds; for the second and third kill also a batch in flight: the handler, which logs
each call to a file, has run for events whose effects have not committed yet), and started
again each time; then it runs to the end of the topic and is stopped with
SIGTERM. The database and the DLQ topic are then checked against what was sent:

- every balance is the sum of the distinct events of its account, there is exactly
  one movement row per distinct event (no effect lost or applied twice), and idem's dedup
  marks of the group are exactly the events whose effects committed;
- every malformed record is on `<topic>.dlq` (key and payload as sent, a `validation.*`
  class), and no valid event is. A letter may be there more than once: docs/dlq.md says a
  consumer killed between a letter's acknowledgement and the transaction recording it
  sends it again after the restart (readers deduplicate on the original coordinates);
- a handler that raises (idem.DeadLetter, ValueError) after writing leaves nothing of its
  event committed, and the event is dead-lettered with `handler.dead_letter` or
  `handler.exception` and the message.

Three such apps run at once per backend (LANES: the sync handler, the async one, the one
that raises), each with its own topic, group and tables, so that their waits for the dev
broker's group after each SIGKILL overlap; each test checks one of them.

Nothing waits by sleeping: every wait polls the database, the broker or a process, with a
deadline. The seed of a run is in each failure message; IDEM_TEST_SEED repeats its records
and kill thresholds.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from outside.producer import Producer, Record, plan_records

HERE = Path(__file__).resolve().parent
CONSUMER_SCRIPT = HERE / "outside" / "balance_consumer.py"
EVENTS = 2000
KILLS = 3
GOOD_ACCOUNTS = [f"a{i}" for i in range(10)]
DEADLINE = 90.0  # seconds any single wait may take before the test fails


def idem_cli() -> str:
    """IDEM_TEST_CLI (ctest sets it), else the repository's build-test/ or build/."""
    given = os.environ.get("IDEM_TEST_CLI")
    if given:
        return given
    for build in ("build-test", "build"):
        built = HERE.parents[1] / build / "cli" / "idem"
        if built.exists():
            return str(built)
    pytest.fail("no idem command: set IDEM_TEST_CLI or build the target idem-cli")


def eventually(predicate: Callable[[], Any], timeout: float = DEADLINE, *, what: str,
               interval: float = 0.02) -> Any:
    """Polls `predicate` until it returns a true value (which is returned), at most
    `timeout` seconds; the pause between polls only spaces the polls out."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)


class DevBroker:
    """`idem dev-broker` as a process, with the topic (3 partitions) and its DLQ topic."""

    def __init__(self, topic: str):
        self.process = subprocess.Popen(
            [idem_cli(), "dev-broker", "--topic", f"{topic}:3", "--topic", f"{topic}.dlq:1",
             "--no-stdin"], stdout=subprocess.PIPE, text=True)
        self.bootstrap = self.process.stdout.readline().strip()
        assert self.bootstrap, "idem dev-broker printed no bootstrap servers"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


class Database:
    """The test's own view of the store (sqlite3 or psycopg, autocommit): it reads while
    the consumer writes. idem.Store is not used for it since idem's SQLite transactions
    take the write lock (BEGIN IMMEDIATE), which would stall the consumer."""

    def __init__(self, url: str):
        if url.startswith("sqlite://"):
            self.conn = sqlite3.connect(url.removeprefix("sqlite://"), isolation_level=None,
                                        timeout=30)
        else:
            import psycopg

            self.conn = psycopg.connect(url, autocommit=True)

    def rows(self, sql: str) -> list[tuple]:
        return [tuple(row) for row in self.conn.execute(sql).fetchall()]

    def execute(self, sql: str) -> None:
        self.conn.execute(sql)

    def movements(self, lane: str) -> int:
        return self.rows(f"SELECT count(*) FROM movements_{lane}")[0][0]

    def close(self) -> None:
        self.conn.close()


class ConsumerProcess:
    """balance_consumer.py as a child process; its output goes to files in `logs`."""

    def __init__(self, args: list[str], logs: Path, name: str):
        self.stdout_path = logs / f"consumer-{name}.out"
        self.stderr_path = logs / f"consumer-{name}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen([sys.executable, str(CONSUMER_SCRIPT), *args],
                                            stdout=out, stderr=err)
        self.killed = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def describe(self) -> str:
        err = self.stderr_path.read_text(errors="replace")[-3000:]
        return f"consumer pid {self.process.pid} exit {self.process.poll()}; stderr:\n{err}"

    def ended_by_itself(self) -> bool:
        return not self.killed and not self.alive()

    def kill(self) -> None:
        self.killed = True
        os.kill(self.process.pid, signal.SIGKILL)
        assert self.process.wait(timeout=30) == -signal.SIGKILL

    def stop(self) -> dict:
        """SIGTERM: app.run() returns, the script prints the stats and exits 0."""
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=60)
        assert status == 0, f"SIGTERM: {self.describe()}"
        lines = self.stdout_path.read_text().strip().splitlines()
        assert lines, f"no stats printed: {self.describe()}"
        return json.loads(lines[-1])


@dataclasses.dataclass
class Letter:
    partition: int
    offset: int
    topic: str
    group: str
    error_class: str
    message: str
    key: Optional[bytes]
    value: bytes


class DeadLetters:
    """Reads `<topic>.dlq` (one partition) from its start with confluent-kafka, no group."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.partition = TopicPartition(topic, 0, OFFSET_BEGINNING)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dlq-reader",
                                  "enable.auto.commit": False, "log_level": 3})
        self.consumer.assign([self.partition])
        self.letters: list[Letter] = []
        self.next_offset = 0

    def read_available(self) -> list[Letter]:
        while True:
            record = self.consumer.poll(0.05)
            if record is None:
                return self.letters
            if record.error() is not None:
                continue
            headers = {name: (value or b"").decode() for name, value in record.headers() or []}
            self.letters.append(Letter(
                int(headers["idem.original.partition"]), int(headers["idem.original.offset"]),
                headers["idem.original.topic"], headers.get("idem.consumer.group", ""),
                headers["idem.error.class"], headers.get("idem.error.message", ""),
                record.key(), record.value()))
            self.next_offset = record.offset() + 1

    def read_to_end(self) -> list[Letter]:
        """Every letter up to the partition's end as the broker sees it now."""
        _, end = self.consumer.get_watermark_offsets(self.partition, timeout=10, cached=False)

        def read_up_to_end() -> bool:
            self.read_available()
            return self.next_offset >= end

        eventually(read_up_to_end, what=f"the DLQ read up to offset {end}")
        return self.letters

    def close(self) -> None:
        self.consumer.close()


def committed_to_end(bootstrap: str, topic: str, group: str) -> bool:
    """Whether the group's committed offsets stand at the end of every partition: the
    consumer has taken every record (as an effect, a duplicate or a dead letter)."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False, "log_level": 3})
    try:
        partitions = [TopicPartition(topic, p) for p in range(3)]
        committed = reader.committed(partitions, timeout=10)
        for tp in committed:
            _, end = reader.get_watermark_offsets(TopicPartition(topic, tp.partition),
                                                  timeout=10, cached=False)
            if tp.offset < end:
                return False
        return True
    finally:
        reader.close()


class CallLog:
    """The consumer's --runs-log (an event id per handler call), read as it grows."""

    def __init__(self, path: Path, good: set[str]):
        self.path, self.good = path, good
        self.read, self.good_lines = 0, 0

    def good_calls(self) -> int:
        """Calls so far for the events in `good` (complete lines only)."""
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as log:
            log.seek(self.read)
            text = log.read()
        complete = text[:text.rfind(b"\n") + 1]
        self.read += len(complete)
        self.good_lines += sum(1 for line in complete.decode().split() if line in self.good)
        return self.good_lines


@dataclasses.dataclass
class Outcome:
    """What a scenario left behind, and what was sent."""

    seed: int
    records: list[Record]
    balances: dict[str, int]
    movements: dict[str, int]  # event id -> rows
    marks: set[str]  # the event ids of the group's dedup marks (idem's processed_event)
    letters: list[Letter]
    killed_at: list[int]  # movement count at each SIGKILL
    stats: dict
    topic: str
    group: str
    run_again: int  # events whose handler ran more than once (a batch undone, or re-run)


def run_scenario(store_url: str, logs: Path, lane: str, *, mode: str, raising: bool) -> Outcome:
    """Sends the planned records in chunks, kept a little ahead of the consumer, while the
    consumer is SIGKILLed KILLS times and restarted; runs it to the end and stops it. The
    lane names the tables (accounts_<lane>, movements_<lane>), the topic and the group."""
    seed = int(os.environ.get("IDEM_TEST_SEED") or secrets.randbits(32))
    rng = random.Random(seed)
    bad_accounts = ["bad-0", "bad-1", "err-0"] if raising else []
    # Good accounts three times over: about one event in eleven is a refused one.
    records = plan_records(rng, GOOD_ACCOUNTS * 3 + bad_accounts, EVENTS)
    good = {r.event_id for r in records if r.kind == "event" and not is_refused(r.account)}
    token = secrets.token_hex(4)
    topic, group = f"accounts-{lane}-{token}", f"balances-{lane}-{token}"

    db = Database(store_url)
    db.execute(f"CREATE TABLE accounts_{lane} (id TEXT PRIMARY KEY, balance BIGINT NOT NULL)")
    db.execute(f"CREATE TABLE movements_{lane} (event_id TEXT NOT NULL, account TEXT NOT NULL,"
               " amount BIGINT NOT NULL)")  # no key: a doubled effect shows as two rows
    for account in GOOD_ACCOUNTS + bad_accounts:
        db.execute(f"INSERT INTO accounts_{lane} VALUES ('{account}', 0)")

    broker = DevBroker(topic)
    runs_log = logs / f"runs-{lane}.txt"  # the handler's calls (see inside_a_batch)
    args = ["--store", store_url, "--bootstrap", broker.bootstrap, "--topic", topic,
            "--group", group, "--lane", lane, "--mode", mode,
            "--runs-log", str(runs_log)] + (["--raising"] if raising else [])
    started: list[ConsumerProcess] = []

    calls = CallLog(runs_log, good)
    since_start = {}

    def start() -> ConsumerProcess:
        since_start.update(calls=calls.good_calls(), movements=db.movements(lane))
        started.append(ConsumerProcess(args, logs, f"{lane}-{len(started)}"))
        return started[-1]

    def inside_a_batch() -> bool:
        """Whether the running process has called its handler for good events whose
        effects have not committed: a batch is in flight. True as well once every good
        event is in, so that the wait ends."""
        called = calls.good_calls() - since_start["calls"]  # read first: then a commit in
        movements = db.movements(lane)  # between can only make this False
        return called > movements - since_start["movements"] or movements >= len(good)

    def progress(at_least: int) -> Callable[[], bool]:
        def reached() -> bool:
            if started[-1].ended_by_itself():
                raise AssertionError(f"seed {seed}: the consumer ended: {started[-1].describe()}")
            return db_of_thread().movements(lane) >= at_least
        return reached

    # The producer thread polls on a connection of its own (sqlite3 connections stay in
    # their thread).
    local = threading.local()
    own_thread = threading.current_thread()

    def db_of_thread() -> Database:
        if not hasattr(local, "db"):
            local.db = db if threading.current_thread() is own_thread else Database(store_url)
        return local.db

    chunks = [records[i:i + len(records) // 10 + 1]
              for i in range(0, len(records), len(records) // 10 + 1)]
    produced_error: list[BaseException] = []

    def produce() -> None:
        try:
            producer = Producer(broker.bootstrap)
            seen: set[str] = set()
            good_before = []  # distinct good events whose first record is in earlier chunks
            for chunk in chunks:
                good_before.append(len(seen))
                seen |= {r.event_id for r in chunk if r.event_id in good}
            for index, chunk in enumerate(chunks):
                # Two chunks ahead of the consumer: records keep arriving around each kill.
                if index >= 2:
                    eventually(progress(good_before[index - 1]),
                               what=f"seed {seed}: movements before chunk {index}")
                producer.send(topic, chunk)
        except BaseException as error:  # handed to the test's thread
            produced_error.append(error)
        finally:
            if hasattr(local, "db") and local.db is not db:
                local.db.close()

    killed_at: list[int] = []
    letters_reader: Optional[DeadLetters] = None
    try:
        consumer = start()
        producer_thread = threading.Thread(target=produce, daemon=True)
        producer_thread.start()
        # One threshold in each of KILLS equal stretches of 10%..85% of the good events.
        low, high = int(0.10 * len(good)), int(0.85 * len(good))
        step = (high - low) // KILLS
        for n in range(KILLS):
            threshold = rng.randint(low + n * step, low + (n + 1) * step - 1)
            # The restarted process commits something before it is killed again.
            threshold = max(threshold, killed_at[-1] + 1 if killed_at else 0)
            eventually(progress(threshold), what=f"seed {seed}: {threshold} movements")
            if n > 0:  # the first kill falls where it falls; the others inside a batch
                eventually(inside_a_batch, interval=0.002,
                           what=f"seed {seed}: a batch in flight after {threshold} movements")
            consumer.kill()
            killed_at.append(db.movements(lane))
            consumer = start()
        producer_thread.join(timeout=DEADLINE)
        assert not producer_thread.is_alive(), f"seed {seed}: the producer did not finish"
        if produced_error:
            raise produced_error[0]

        eventually(lambda: progress(0)() and committed_to_end(broker.bootstrap, topic, group),
                   what=f"seed {seed}: the group's offsets at the end of {topic}", interval=0.2)
        stats = consumer.stop()
        letters_reader = DeadLetters(broker.bootstrap, f"{topic}.dlq")
        letters = letters_reader.read_to_end()
        balances = dict(db.rows(f"SELECT id, balance FROM accounts_{lane}"))
        movements = dict(db.rows(f"SELECT event_id, count(*) FROM movements_{lane}"
                                 " GROUP BY event_id"))
        marks = {str(uuid.UUID(bytes=event_id) if isinstance(event_id, bytes) else event_id)
                 for (event_id,) in db.rows("SELECT event_id FROM processed_event"
                                            f" WHERE consumer_group = '{group}'")}
    finally:
        for process in started:
            if process.alive():
                process.process.kill()
                process.process.wait(timeout=30)
        if letters_reader is not None:
            letters_reader.close()
        broker.close()
        db.close()
    runs = collections.Counter(runs_log.read_text().split())
    return Outcome(seed, records, balances, movements, marks, letters, killed_at, stats, topic,
                   group, sum(1 for n in runs.values() if n > 1))


def is_refused(account: Optional[str]) -> bool:
    return account is not None and (account.startswith("bad-") or account.startswith("err-"))


def expected_balances(records: list[Record], accounts: list[str]) -> dict[str, int]:
    balances = dict.fromkeys(accounts, 0)
    for record in records:
        if record.kind == "event" and record.copy == 0 and not is_refused(record.account):
            balances[record.account] += record.amount
    return balances


def check_effects(outcome: Outcome, accounts: list[str]) -> None:
    """Every good event applied exactly once; nothing of another record."""
    context = f"seed {outcome.seed}, killed at {outcome.killed_at} movements"
    good = {r.event_id for r in outcome.records
            if r.kind == "event" and not is_refused(r.account)}
    doubled = {event_id: n for event_id, n in outcome.movements.items() if n != 1}
    assert not doubled, (
        f"{context}: events with more than one movement: {list(doubled.items())[:5]}")
    assert set(outcome.movements) == good, (
        f"{context}: {len(good - set(outcome.movements))} events lost, "
        f"{len(set(outcome.movements) - good)} movements of events that must have none")
    assert outcome.balances == expected_balances(outcome.records, accounts), context
    # idem marked exactly the events whose effects committed: a dead-lettered event was
    # unmarked with its effects (a replay of its letter applies it), a malformed record has
    # no event to mark.
    assert outcome.marks == good, (
        f"{context}: {len(good - outcome.marks)} committed events unmarked, "
        f"{len(outcome.marks - good)} marks of events without effects")


def refusal(account: str) -> tuple[str, str]:
    """The class and message of the letter of a refused event (balance_consumer.py)."""
    if account.startswith("bad-"):
        return "handler.dead_letter", f"account {account} is closed"
    return "handler.exception", f"ValueError: no branch keeps {account}"


def check_letters(outcome: Outcome) -> collections.Counter:
    """The DLQ holds every malformed record and the first record of every refused event
    (key and payload as sent, the class and message of the refusal), and no other record.
    Returns how many letters each record got."""
    context = f"seed {outcome.seed}, killed at {outcome.killed_at} movements"
    sent = {(r.partition, r.offset): r for r in outcome.records}
    copies: collections.Counter = collections.Counter()
    for letter in outcome.letters:
        record = sent.get((letter.partition, letter.offset))
        where = f"{context}: letter of {letter.partition}/{letter.offset} ({letter.error_class})"
        assert record is not None, f"{where}: no such record was sent"
        assert record.kind != "event" or is_refused(record.account), (
            f"{where}: a valid event was dead-lettered: {letter.message}")
        assert (letter.topic, letter.group) == (outcome.topic, outcome.group), where
        assert (letter.key, letter.value) == (record.key, record.value), where
        if record.kind == "event":
            assert (letter.error_class, letter.message) == refusal(record.account), where
        else:
            assert letter.error_class.startswith("validation."), where
        copies[(letter.partition, letter.offset)] += 1
    # A resend of a refused event may be dead-lettered too (its first record was, and left
    # no dedup mark), or skipped when both copies share a batch; its first record must be.
    must = [r for r in outcome.records
            if r.kind != "event" or (is_refused(r.account) and r.copy == 0)]
    missing = [(r.kind, r.account, r.partition, r.offset) for r in must
               if (r.partition, r.offset) not in copies]
    assert not missing, f"{context}: not dead-lettered: {missing}"
    return copies


def summary(outcome: Outcome, copies: collections.Counter) -> str:
    again = sum(n - 1 for n in copies.values())
    return (f"seed {outcome.seed}: killed at {outcome.killed_at} movements; handler ran again "
            f"for {outcome.run_again} events; {len(copies)} records dead-lettered, {again} "
            f"letters sent again; last process {outcome.stats}")


LANES = {"sync": dict(mode="sync", raising=False), "async": dict(mode="async", raising=False),
         "raising": dict(mode="sync", raising=True)}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def outcomes(request, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The scenario of each lane (LANES), run at the same time on one backend: three apps,
    each on a topic and a group of its own, with tables of their own in one PostgreSQL
    database or in a SQLite file each. Running them together overlaps the waits for the
    dev broker's group after each SIGKILL (about 7 s each). Per lane its Outcome, or the
    exception its run raised."""
    logs = tmp_path_factory.mktemp(request.param)
    with store_urls(request.param, logs) as url_of:
        results: dict[str, Any] = {}

        def run(lane: str) -> None:
            try:
                results[lane] = run_scenario(url_of(lane), logs, lane, **LANES[lane])
            except BaseException as error:  # reported by the lane's own test
                results[lane] = error

        threads = [threading.Thread(target=run, args=(lane,)) for lane in LANES]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        yield results


@contextlib.contextmanager
def store_urls(backend: str, logs: Path) -> Iterator[Callable[[str], str]]:
    """The store URL of each lane: a SQLite file per lane (one SQLite store is written by
    one process at a time), or one new PostgreSQL database for all, dropped afterwards."""
    if backend == "sqlite":
        yield lambda lane: f"sqlite://{logs / f'{lane}.db'}"
        return
    import psycopg

    from conftest import _postgres_dsn  # skips without IDEM_TEST_PG_DSN, as every PG test

    dsn = _postgres_dsn()
    name = "idem_py_outside_" + secrets.token_hex(6)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        yield lambda lane: f"{dsn.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def outcome_of(outcomes: dict[str, Any], lane: str) -> Outcome:
    result = outcomes[lane]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_balances_are_exact_across_sigkills_with_resends_and_malformed_records(outcomes, mode):
    outcome = outcome_of(outcomes, mode)
    check_effects(outcome, GOOD_ACCOUNTS)
    copies = check_letters(outcome)
    assert len(copies) == sum(1 for r in outcome.records if r.kind != "event")
    print(summary(outcome, copies))


def test_a_raising_handler_commits_nothing_of_its_events_and_dead_letters_them(outcomes):
    outcome = outcome_of(outcomes, "raising")
    # The handler updated the balance and deferred the movement before raising: none of it
    # stays (the refused accounts stay at 0), and every other event is applied once.
    check_effects(outcome, GOOD_ACCOUNTS + ["bad-0", "bad-1", "err-0"])
    copies = check_letters(outcome)
    refused_events = {r.event_id for r in outcome.records
                      if r.kind == "event" and is_refused(r.account)}
    assert refused_events, f"seed {outcome.seed}: no refused event was sent"
    print(summary(outcome, copies))
