"""idem.App in one process: handlers written in Python run by idem's consumer against a
dev broker (`idem dev-broker`, librdkafka's mock cluster speaking the Kafka protocol), on
SQLite and PostgreSQL. Records are produced by confluent-kafka, a client that is not idem.
The multi-process tests (SIGKILLs of the consumer) are in test_handlers_outside.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
import uuid
from decimal import Decimal
from typing import Any, Callable, Iterator

import pytest

import idem

confluent_kafka = pytest.importorskip("confluent_kafka")


def eventually(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)  # polling with a deadline, not a synchronisation by sleeping


@pytest.fixture(scope="module")
def brokers() -> Iterator[str]:
    cli = os.environ.get("IDEM_TEST_CLI")
    if not cli:
        pytest.skip("IDEM_TEST_CLI (the idem binary) is not set")
    broker = subprocess.Popen([cli, "dev-broker", "--no-stdin"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert broker.stdout is not None
        yield broker.stdout.readline().strip()
    finally:
        broker.terminate()
        broker.wait(timeout=30)


def produce(brokers: str, topic: str, values: list[bytes], key: bytes = b"k") -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": brokers})
    for value in values:
        producer.produce(topic, value=value, key=key)
    assert producer.flush(30) == 0


def event(event_type: str = "deposit.v1", **fields: Any) -> bytes:
    return json.dumps({"event_id": str(idem.uuid7()), "event_type": event_type,
                       **fields}).encode()


def fresh_topic(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


# The dev broker's group timing (docs/dev-broker.md): its first join waits 3 s and every
# later rebalance of a group about session.timeout.ms - 1 s, so each test has a group of
# its own and a session timeout just above the first join's wait.
MOCK_GROUP = {"kafka.session.timeout.ms": 4000, "kafka.heartbeat.interval.ms": 1000}


def make_app(store_url: str, brokers: str, group: str, **extra: Any) -> idem.App:
    settings = {"store.url": store_url, "kafka.bootstrap.servers": brokers,
                "consumer.group": f"{group}-{uuid.uuid4().hex[:8]}",
                "consumer.batch_window": "5ms", **MOCK_GROUP, **extra}
    return idem.App(settings=settings)


class Running:
    """An App's run() on a thread of its own, stopped by the test."""

    def __init__(self, app: idem.App):
        self.app = app
        self.outcome: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome["stats"] = self.app.run()
        except BaseException as error:  # noqa: B036 - handed to the test
            self.outcome["error"] = error

    def stop(self) -> dict[str, Any]:
        self.app.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "run() did not return after stop()"
        if "error" in self.outcome:
            raise self.outcome["error"]
        return self.outcome["stats"]


def rows(store_url: str, sql: str, *params: Any) -> list[Any]:
    store = idem.Store(store_url)
    with store.begin() as tx:
        return list(tx.execute(sql, *params))


def create(store_url: str, sql: str) -> None:
    store = idem.Store(store_url)
    with store.begin() as tx:
        tx.execute(sql)


def test_each_event_applied_once_duplicates_and_bad_records_dead_lettered(store_url, brokers):
    topic = fresh_topic("deposits")
    create(store_url, "CREATE TABLE movements (event_id TEXT PRIMARY KEY, account TEXT, "
                      "amount TEXT, kafka_offset BIGINT)")
    events = [event(account=f"a{i % 3}", amount=i) for i in range(40)]
    produce(brokers, topic, events + events[:5] + [b"not json", event()[:-1],
                                                   b'{"event_type": "deposit.v1"}'])
    app = make_app(store_url, brokers, "once")

    @app.handler(topic, type="deposit.v1")
    def deposit(ev: idem.Event, tx: idem.Tx) -> None:
        assert isinstance(ev.data["amount"], int)
        tx.defer("INSERT INTO movements VALUES ($1, $2, $3, $4)", str(ev.id),
                 ev.data["account"], str(ev.data["amount"]), ev.offset)

    running = Running(app)
    eventually(lambda: app.stats().get("dead_lettered", 0) == 3
               and app.stats().get("processed", 0) == 40, what="40 applied, 3 dead letters")
    stats = running.stop()
    assert rows(store_url, "SELECT count(*) AS n FROM movements")[0].n == 40
    assert stats["duplicates"] >= 5
    assert stats["dead_lettered"] == 3


def test_outcomes_retry_dead_letter_exception_and_store_error(store_url, brokers):
    topic = fresh_topic("outcomes")
    create(store_url, "CREATE TABLE done (account TEXT PRIMARY KEY)")
    names = ["ok1", "letter", "boom", "flaky", "ok2", "dup", "dup"]
    produce(brokers, topic, [event(account=n) for n in names])
    attempts: dict[str, int] = {}
    app = make_app(store_url, brokers, "outcomes")

    @app.handler(topic)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        account = ev.data["account"]
        tx.execute("INSERT INTO done VALUES ($1)", account)  # undone for every failed event
        attempts[account] = attempts.get(account, 0) + 1
        if account == "letter":
            raise idem.DeadLetter("accounts named letter are refused")
        if account == "boom":
            raise ValueError("no such account")
        if account == "flaky" and attempts[account] == 1:
            raise idem.Retry("locked")

    running = Running(app)
    eventually(lambda: app.stats().get("dead_lettered", 0) == 3
               and app.stats().get("processed", 0) == 4, what="four applied, three dead letters")
    stats = running.stop()
    done = sorted(r.account for r in rows(store_url, "SELECT account FROM done"))
    # The second "dup" is another event (a new id): its INSERT fails on the primary key,
    # which is that event's own fault (a constraint): it is dead-lettered.
    assert done == ["dup", "flaky", "ok1", "ok2"]
    assert attempts["flaky"] >= 2
    by_reason = stats["dead_lettered_by_reason"]
    assert by_reason.get("handler.dead_letter") == 1
    assert by_reason.get("handler.exception") == 2  # boom, and the second dup's constraint


def test_a_statement_no_event_could_make_work_stops_the_consumer(store_url, brokers):
    topic = fresh_topic("refused")
    produce(brokers, topic, [event()])
    app = make_app(store_url, brokers, "refused")

    @app.handler(topic)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        tx.execute("INSERT INTO no_such_table VALUES (1)")

    with pytest.raises(idem.StoreError, match="refused a statement for good"):
        app.run()
    assert rows(store_url, "SELECT count(*) AS n FROM processed_event")[0].n == 0


def test_tx_is_unusable_after_the_handler_returned(sqlite_url, brokers):
    topic = fresh_topic("kept")
    produce(brokers, topic, [event()])
    kept: list[idem.Tx] = []
    app = make_app(sqlite_url, brokers, "kept")

    @app.handler(topic)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        kept.append(tx)
        assert tx.active

    running = Running(app)
    eventually(lambda: app.stats().get("processed", 0) == 1, what="one event")
    running.stop()
    assert not kept[0].active
    with pytest.raises(idem.StoreError, match="handler call that has returned"):
        kept[0].execute("SELECT 1")


def test_numbers_keep_their_digits_and_async_handlers_await_their_transaction(store_url,
                                                                             brokers):
    topic = fresh_topic("amounts")
    create(store_url, "CREATE TABLE amounts (event_id TEXT PRIMARY KEY, amount TEXT, n BIGINT)")
    produce(brokers, topic, [
        json.dumps({"event_id": str(idem.uuid7()), "event_type": "t"}).encode()[:-1]
        + b', "amount": 12.30, "n": 9007199254740993}'])
    app = make_app(store_url, brokers, "amounts")
    seen: list[Any] = []

    @app.handler(topic)
    async def handle(ev: idem.Event, tx: idem.AsyncTx) -> None:
        seen.append(ev.data)
        await asyncio.sleep(0)  # something of asyncio: the coroutine goes through the loop
        present = await tx.execute("SELECT count(*) AS n FROM amounts")
        assert present.scalar() == 0
        # Money on SQLite (docs/python.md, "Values"): a Decimal bound to a TEXT column keeps
        # its digits, as on PostgreSQL.
        tx.defer("INSERT INTO amounts VALUES ($1, $2, $3)", ev.id, ev.data["amount"],
                 ev.data["n"])

    running = Running(app)
    eventually(lambda: app.stats().get("processed", 0) == 1, what="one event")
    running.stop()
    assert seen[0]["amount"] == Decimal("12.30") and str(seen[0]["amount"]) == "12.30"
    assert seen[0]["n"] == 9007199254740993
    row = rows(store_url, "SELECT amount, n FROM amounts")[0]
    assert (row.amount, row.n) == ("12.30", 9007199254740993)


def test_decode_with_a_pydantic_model_dead_letters_what_it_refuses(sqlite_url, brokers):
    pydantic = pytest.importorskip("pydantic")

    class Deposit(pydantic.BaseModel):
        account: str
        amount: Decimal

    topic = fresh_topic("decoded")
    create(sqlite_url, "CREATE TABLE decoded (account TEXT, amount TEXT)")
    produce(brokers, topic, [event(account="a1", amount="10.50"), event(account="a2")])
    app = make_app(sqlite_url, brokers, "decoded")

    @app.handler(topic, decode=Deposit)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        assert isinstance(ev.data, Deposit)
        tx.execute("INSERT INTO decoded VALUES ($1, $2)", ev.data.account, str(ev.data.amount))

    running = Running(app)
    eventually(lambda: app.stats().get("dead_lettered", 0) == 1, what="one dead letter")
    running.stop()
    assert [tuple(r) for r in rows(sqlite_url, "SELECT * FROM decoded")] == [("a1", "10.50")]


def test_publish_writes_the_outbox_in_the_handlers_transaction(store_url, brokers):
    topic = fresh_topic("published")
    produce(brokers, topic, [event(order=7)])
    app = make_app(store_url, brokers, "published")
    ids: list[uuid.UUID] = []

    @app.handler(topic)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        ids.append(tx.publish("billing.charged", "7",
                              lambda event_id: {"event_id": str(event_id), "order": 7,
                                                "amount": Decimal("1.10")}))

    running = Running(app)
    eventually(lambda: app.stats().get("processed", 0) == 1, what="one event")
    running.stop()
    payloads = rows(store_url, "SELECT payload FROM idem_outbox WHERE topic = $1",
                    "billing.charged")
    assert len(payloads) == 1
    assert json.loads(payloads[0].payload if isinstance(payloads[0].payload, str)
                      else json.dumps(payloads[0].payload))["event_id"] == str(ids[-1])


def test_keyboard_interrupt_in_a_handler_stops_and_commits_nothing_of_its_batch(sqlite_url,
                                                                               brokers):
    topic = fresh_topic("interrupted")
    create(sqlite_url, "CREATE TABLE seen (n BIGINT)")
    produce(brokers, topic, [event(n=i) for i in range(3)])
    app = make_app(sqlite_url, brokers, "interrupted",
                   **{"consumer.batch_size": 10, "consumer.batch_window": "2s"})

    @app.handler(topic)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        tx.execute("INSERT INTO seen VALUES ($1)", ev.data["n"])
        if ev.data["n"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        app.run()
    assert rows(sqlite_url, "SELECT count(*) AS n FROM seen")[0].n == 0
    assert rows(sqlite_url, "SELECT count(*) AS n FROM processed_event")[0].n == 0


def test_a_wrong_setting_is_reported_with_its_key_when_the_app_is_made(sqlite_url):
    with pytest.raises(idem.ConfigError) as raised:
        idem.App(settings={"store.url": sqlite_url, "consumer.batch_size": "many"})
    assert any(key == "consumer.batch_size" for key, _, _ in raised.value.problems)


def test_a_topic_without_group_is_refused_before_it_runs(sqlite_url, brokers):
    app = idem.App(settings={"store.url": sqlite_url, "kafka.bootstrap.servers": brokers})

    @app.handler("t")
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        pass

    with pytest.raises(idem.ConfigError, match="consumer.group"):
        app.run()


def test_serve_keeps_the_programs_loop_free_and_stops_when_cancelled(sqlite_url, brokers):
    topic = fresh_topic("served")
    create(sqlite_url, "CREATE TABLE served (n BIGINT)")
    produce(brokers, topic, [event(n=i) for i in range(3)])
    app = make_app(sqlite_url, brokers, "served")

    @app.handler(topic)
    async def handle(ev: idem.Event, tx: idem.AsyncTx) -> None:
        await tx.execute("INSERT INTO served VALUES ($1)", ev.data["n"])

    ticks = 0

    async def program() -> None:
        nonlocal ticks
        serving = asyncio.create_task(app.serve())
        while app.stats().get("processed", 0) < 3:
            ticks += 1  # the program's own loop keeps turning meanwhile
            await asyncio.sleep(0.02)
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving

    asyncio.run(program())
    assert ticks > 0
    assert rows(sqlite_url, "SELECT count(*) AS n FROM served")[0].n == 3
    with pytest.raises(RuntimeError, match="ran already"):
        app.run()


def test_cloudevents_in_binary_mode_reach_the_handler_of_their_type(sqlite_url, brokers):
    topic = fresh_topic("cloud")
    producer = confluent_kafka.Producer({"bootstrap.servers": brokers})
    ids = [str(idem.uuid7()) for _ in range(2)]
    for event_id, kind in zip(ids, ["com.example.deposit", "com.example.unknown"]):
        producer.produce(topic, value=b'{"amount": 5}', headers=[
            ("ce_specversion", b"1.0"), ("ce_id", event_id.encode()),
            ("ce_source", b"/tests"), ("ce_type", kind.encode()),
            ("content-type", b"application/json")])
    assert producer.flush(30) == 0
    app = make_app(sqlite_url, brokers, "cloud")
    seen: list[tuple[str, Any]] = []

    @app.handler(topic, type="com.example.deposit", format="cloudevents")
    def deposit(ev: idem.Event, tx: idem.Tx) -> None:
        seen.append((str(ev.id), ev.data["amount"]))

    running = Running(app)
    eventually(lambda: app.stats().get("dead_lettered", 0) == 1
               and app.stats().get("processed", 0) == 1, what="one applied, one without handler")
    stats = running.stop()
    assert seen == [(ids[0], 5)]
    assert list(stats["dead_lettered_by_reason"]) == ["validation.unknown_event_type"]


def test_a_topic_with_a_route_in_the_file_and_a_python_handler_is_refused(sqlite_url, brokers,
                                                                          tmp_path):
    config = tmp_path / "idem.toml"
    config.write_text('''
[routes.deposits]
topic = "shared"
type = "deposit.v1"
sql = "INSERT INTO t (id) VALUES ($id)"

[routes.deposits.params]
id = { from = "/account", type = "text" }
''')
    app = idem.App(config=str(config), settings={
        "store.url": sqlite_url, "kafka.bootstrap.servers": brokers, "consumer.group": "g"})

    @app.handler("shared")
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        pass

    with pytest.raises(idem.ConfigError, match="topic shared has routes in"):
        app.run()


def test_retry_topics_and_a_second_store_connection_work_for_python_handlers(postgres_url,
                                                                             brokers):
    # consumer.pipeline_depth 2: the next batch's handlers run while the batch before
    # commits on a second connection; consumer.retry_topics.delays: an idem.Retry sends the
    # record to a retry topic and its partition moves on.
    topic = fresh_topic("retried")
    create(postgres_url, "CREATE TABLE retried (n BIGINT PRIMARY KEY)")
    produce(brokers, topic, [event(n=i) for i in range(200)])
    app = make_app(postgres_url, brokers, "retried", **{
        "consumer.pipeline_depth": 2, "consumer.batch_size": 20,
        "consumer.retry_topics.delays": "200ms"})
    retried: set[int] = set()

    @app.handler(topic)
    def handle(ev: idem.Event, tx: idem.Tx) -> None:
        n = ev.data["n"]
        # A record back from a retry topic comes to its topic's handler with the attempts
        # made so far in `idem.attempts`. The decision rests on the record, not on a count
        # kept in memory: a handler may run twice for one delivery.
        attempts = ev.header("idem.attempts")
        if n % 50 == 7 and attempts is None:
            raise idem.Retry(f"not yet: {n}")
        if attempts is not None:
            assert ev.topic == topic and attempts == b"1"
            retried.add(n)
        tx.defer("INSERT INTO retried VALUES ($1)", n)

    running = Running(app)
    eventually(lambda: rows(postgres_url, "SELECT count(*) AS n FROM retried")[0].n == 200,
               what="every event applied, the retried ones from their retry topic")
    stats = running.stop()
    assert stats["retry_topic_sends"] == 4
    assert stats["dead_lettered"] == 0
    assert retried == {7, 57, 107, 157}
