"""Handlers written in Python, run by idem's own consumer (the C++ engine of ``idem consume``).

The engine reads the records, checks them, marks each event's id in the store and keeps the
offsets; an event reaches Python only when its handler is to run, inside the batch's
transaction, on the consumer's thread. What the handler decides goes back to the engine as
a compiled handler's outcome does. docs/python.md says what each part guarantees.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, Awaitable, Callable, Mapping, Optional, Sequence, Union

from . import _idem, _json
from ._store import Result, Statements
from .errors import StoreError


class Retry(Exception):
    """Raised by a handler: this event failed for a reason that may pass (a row locked, a
    service down). Nothing of it commits; its partition waits (capped exponential backoff)
    and the event runs again, or, with retry topics on, it goes to the next retry topic."""

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = reason


class DeadLetter(Exception):
    """Raised by a handler: this event can never succeed. Nothing of it commits and it goes
    to the DLQ topic with class ``handler.dead_letter`` and ``reason`` as its message."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Request:
    """The one HTTP call a handler declares per event (``request=``), made by the engine:
    concurrently across ordering keys (the Kafka key), one at a time within a key, in
    offset order, with the event's id as its ``Idempotency-Key`` on every attempt.
    ``json`` is written as JSON (Decimals as exact numbers); else ``body`` is sent as it is
    with ``content_type``."""

    url: str
    method: str = "POST"
    json: Any = None
    body: Union[str, bytes, None] = None
    content_type: str = "application/json"
    headers: Union[Mapping[str, str], Sequence[tuple[str, str]], None] = None


class Response:
    """The 2xx answer to a handler's call: ``status``, ``headers`` (name, value pairs as
    received), ``body`` (bytes); ``text`` and ``json()`` (numbers with a fraction as
    Decimal) read it."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body, parse_float=Decimal)

    def header(self, name: str) -> Optional[str]:
        """The first header called ``name`` (any case), or None."""
        wanted = name.lower()
        for header_name, value in self.headers:
            if header_name.lower() == wanted:
                return value
        return None


class Event:
    """One event and the record that carried it. ``data`` is the event's JSON (the whole
    object, or a CloudEvent's data): JSON integers are ``int``, every other number a
    ``decimal.Decimal`` of its digits as written, never a float; with a ``decode`` step,
    what it returned. ``key`` and header values are the record's bytes."""

    __slots__ = ("_id", "type", "_data_text", "_data", "topic", "partition", "offset", "key",
                 "headers")

    def __init__(self, id_bytes: bytes, type_: str, data_text: str, topic: str, partition: int,
                 offset: int, key: Optional[bytes], headers: Sequence[tuple[str, bytes]]):
        self._id: Union[bytes, uuid.UUID] = id_bytes
        self.type = type_
        self._data_text = data_text
        self._data: Any = _UNREAD
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.headers = headers

    @property
    def id(self) -> uuid.UUID:
        """The event's id (a UUIDv7): the key its effects are deduplicated on."""
        if isinstance(self._id, bytes):
            self._id = uuid.UUID(bytes=self._id)
        return self._id

    @property
    def data(self) -> Any:
        if self._data is _UNREAD:
            self._data = json.loads(self._data_text, parse_float=Decimal)
        return self._data

    @property
    def data_json(self) -> str:
        """The data's JSON text exactly as the record carried it."""
        return self._data_text

    def header(self, name: str) -> Optional[bytes]:
        """The value of the first header called ``name``, or None."""
        for header_name, value in self.headers:
            if header_name == name:
                return value
        return None

    def __repr__(self) -> str:
        return (f"Event(id={self.id}, type={self.type!r}, topic={self.topic!r}, "
                f"partition={self.partition}, offset={self.offset})")


_UNREAD = object()


def _payload_maker(value: Any) -> Callable[[uuid.UUID], str]:
    from .outbox import _payload_text

    if callable(value):
        return lambda event_id: _payload_text(value(event_id))
    text = _payload_text(value)
    return lambda _event_id: text


class Tx(Statements):
    """The batch's transaction, as a handler sees it; valid only while the handler runs.
    ``execute`` runs a statement at once and returns its rows; ``defer`` queues one whose
    result is not needed (PostgreSQL sends the queued ones in one round trip per batch);
    ``publish`` writes an event to the transactional outbox (``idem relay`` publishes it
    once the batch commits). Placeholders are ``$1``..``$n``. Nothing here commits: the
    consumer commits the batch, with each event's dedup mark."""

    __slots__ = ()

    def publish(self, topic: str, key: str, value: Any, *,
                headers: Optional[Union[Mapping[str, str], Sequence[tuple[str, str]]]] = None,
                aggregate_type: Optional[str] = None) -> uuid.UUID:
        """Writes one event to ``idem_outbox`` in this transaction and returns its id, a
        UUIDv7 born here. ``value``: a dict (JSON, Decimals exact), str, bytes, a pydantic
        model, or a callable that receives the new id and returns one of those. ``key`` is
        the Kafka key (one relay publishes a key's events in order)."""
        header_list = list(headers.items()) if isinstance(headers, Mapping) else list(headers or [])
        return self._raw.publish(topic, key, _payload_maker(value), aggregate_type or topic,
                                 header_list)

    @property
    def active(self) -> bool:
        """False once the handler call it belongs to has returned."""
        return bool(self._raw.active)


class AsyncTx(Tx):
    """The transaction of an ``async def`` handler: ``await tx.execute(...)``; ``defer`` and
    ``publish`` are called without ``await`` (they only queue, or write locally)."""

    __slots__ = ()

    async def execute(self, sql: str, *params: Any) -> Result:  # type: ignore[override]
        # Runs at once, on the consumer's thread (the handlers' loop runs there too): the
        # await completes without handing the loop anything, so a handler that awaits only
        # its transaction costs no trip through the loop.
        return Statements.execute(self, sql, *params)


Handler = Callable[[Event, Tx], Union[None, Awaitable[None]]]


@dataclass
class _Route:
    topic: str
    type: Optional[str]
    fn: Callable[..., Any]
    decode: Optional[Callable[[Any], Any]]
    is_async: bool
    request: Optional[Callable[[Event], Request]] = None


@dataclass
class _TopicFormat:
    format: str
    id_pointer: str
    type_pointer: str


_RETRY, _DEAD_LETTER, _EXCEPTION, _STORE_ERROR, _STOP = 1, 2, 3, 4, 5


def _decoder(decode: Optional[Callable[[Any], Any]]) -> Optional[Callable[[Any], Any]]:
    if decode is None:
        return None
    parse_obj = getattr(decode, "parse_obj", None)  # a pydantic (v1) model class
    return parse_obj if callable(parse_obj) else decode


def _setting_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return f"{int(value.total_seconds() * 1000)}ms"
    if isinstance(value, (list, tuple)):
        return ",".join(_setting_text(v) for v in value)
    return str(value)


class App:
    """A consumer of Kafka topics whose handlers are Python functions, with exactly-once
    effects: configured as ``idem consume`` is (the same keys, file and ``IDEM_*``
    variables; ``settings`` wins over both, as ``--set`` does), run by the same engine.

    ``config``: a TOML file (default: ``$IDEM_CONFIG``). ``settings``: keys and values,
    e.g. ``{"store.url": "sqlite:///app.db", "consumer.group": "billing",
    "consumer.batch_size": 1000, "kafka.bootstrap.servers": "127.0.0.1:9092"}``.
    ``consumer.topics`` defaults to the topics of the handlers (and of the routes the file
    declares, which may read other topics than the handlers)."""

    def __init__(self, config: Optional[str] = None,
                 settings: Optional[Mapping[str, Any]] = None):
        self._config = "" if config is None else str(config)
        self._settings = [(k, _setting_text(v)) for k, v in (settings or {}).items()]
        self._routes: list[_Route] = []
        self._formats: dict[str, _TopicFormat] = {}
        self._started = False
        # Loads now, so a wrong key or value is reported here (idem.ConfigError), not later.
        # The compiled consumer is thread-safe for stop() and stats(), before and during its
        # run: a stop asked for before the run makes the run return at once.
        self._consumer = _idem.Consumer(self._config, self._settings, "idem.App(settings)")
        self.warnings: list[str] = list(self._consumer.warnings())

    def handler(self, topic: str, *, type: Optional[str] = None,
                decode: Optional[Callable[[Any], Any]] = None,
                request: Optional[Callable[[Event], Request]] = None, format: str = "json",
                id_pointer: str = "/event_id",
                type_pointer: str = "/event_type") -> Callable[[Handler], Handler]:
        """Registers the decorated function for the events of ``topic`` whose type is
        ``type`` (None: every type without a handler of its own). It is called as
        ``fn(event, tx)``; ``async def`` functions are awaited. ``decode`` (any callable,
        or a pydantic model, whose ``parse_obj`` is used) turns ``event.data`` into what
        the handler gets as ``event.data``; its exception dead-letters the event. A topic's
        records are JSON events (``format="json"``: the id at ``id_pointer``, the type at
        ``type_pointer``), CloudEvents (``"cloudevents"``) or either (``"auto"``).

        ``request`` declares one HTTP call per event: ``request(event)`` returns an
        ``idem.Request``, the engine makes the call outside any transaction (the event id as
        its Idempotency-Key, concurrently across keys, one at a time within a key) and,
        on a 2xx answer, runs the handler as ``fn(event, response, tx)`` in the batch's
        transaction. Either every handler of a topic declares a call or none does."""
        wanted = _TopicFormat(format, id_pointer, type_pointer)
        known = self._formats.setdefault(topic, wanted)
        if known != wanted:
            raise ValueError(f"topic {topic}: one topic is read one way; its handlers give "
                             f"{known} and {wanted}")

        def register(fn: Handler) -> Handler:
            for route in self._routes:
                if route.topic == topic and route.type == type:
                    what = f"type {type!r}" if type is not None else "every type"
                    raise ValueError(f"topic {topic}, {what}: {route.fn.__qualname__} handles "
                                     f"it already")
            calls = {r.request is not None for r in self._routes if r.topic == topic}
            if calls and calls != {request is not None}:
                raise ValueError(f"topic {topic}: either every handler of a topic declares an "
                                 f"HTTP call (request=) or none does")
            self._routes.append(_Route(topic, type, fn, _decoder(decode),
                                       inspect.iscoroutinefunction(fn), request))
            return fn

        return register

    # -- running ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Consumes until Ctrl-C, SIGTERM or ``stop()``, then finishes the batch in progress,
        commits it and leaves the group (within consumer.stop_timeout); returns the
        consumer's counts. The consumer runs on a thread of its own, so this thread keeps
        Python's signal handling. A handler that raises KeyboardInterrupt (or SystemExit)
        stops it at once, committing nothing of its batch, and run() raises
        KeyboardInterrupt."""
        consumer, handler_loop = self._prepare()
        outcome: dict[str, Any] = {}
        finished = threading.Event()

        def consume() -> None:
            try:
                outcome["stats"] = consumer.run()
            except BaseException as error:  # handed to the caller's thread
                outcome["error"] = error
            finally:
                handler_loop.close()
                finished.set()

        worker = threading.Thread(target=consume, name="idem-consumer", daemon=True)
        restore = self._stop_on_sigterm()
        worker.start()
        try:
            try:
                finished.wait()
            except KeyboardInterrupt:
                self.stop()
                finished.wait()
        finally:
            restore()
        worker.join()
        if "error" in outcome:
            raise outcome["error"]
        return dict(outcome["stats"])

    async def serve(self) -> dict[str, Any]:
        """``run()`` for an asyncio program: consumes until ``stop()`` or until the awaiting
        task is cancelled (then stops as on SIGTERM and re-raises the cancellation), and
        leaves the caller's loop free meanwhile. The handlers still run on the consumer's
        thread, async ones in a loop of their own there (docs/python.md)."""
        loop = asyncio.get_running_loop()
        consumer, handler_loop = self._prepare()
        done: asyncio.Future[dict[str, Any]] = loop.create_future()

        def settle(result: Any, error: Optional[BaseException]) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(dict(result))

        def consume() -> None:
            try:
                result = consumer.run()
                loop.call_soon_threadsafe(settle, result, None)
            except BaseException as error:
                loop.call_soon_threadsafe(settle, None, error)
            finally:
                handler_loop.close()

        threading.Thread(target=consume, name="idem-consumer", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            self.stop()
            await asyncio.wait([done])
            raise

    def stop(self) -> None:
        """Asks the consumer to finish its batch, commit and leave the group. From any
        thread; returns at once."""
        self._consumer.stop()

    def stats(self) -> dict[str, Any]:
        """The consumer's counts now (zero before it runs)."""
        return dict(self._consumer.stats())

    @property
    def admin_port(self) -> Optional[int]:
        """The port of the admin endpoints (/metrics, /readyz) once serving, with
        admin.listen set; else None."""
        return self._consumer.admin_port  # type: ignore[no-any-return]

    def describe(self) -> str:
        """Every configuration key with its value and where it came from, secrets redacted
        (as ``idem consume --print-config``)."""
        return str(self._consumer.describe())

    def _prepare(self) -> tuple[Any, "_HandlerLoop"]:
        if not self._routes and not self._consumer.has_routes:
            raise ValueError("no handler: decorate a function with @app.handler(topic) first")
        if self._started:
            raise RuntimeError("this App ran already: make a new one to run again")
        self._started = True
        handler_loop = _HandlerLoop()
        for topic, fmt in self._formats.items():
            routes = [r for r in self._routes if r.topic == topic]
            requester = _requester(routes) if routes[0].request is not None else None
            has_async = any(r.is_async for r in routes)
            self._consumer.add_topic(topic, fmt.format, fmt.id_pointer, fmt.type_pointer,
                                     [r.type for r in routes], _dispatcher(routes, handler_loop),
                                     requester, handler_loop.enter if has_async else None,
                                     handler_loop.leave if has_async else None)
        return self._consumer, handler_loop

    def _stop_on_sigterm(self) -> Callable[[], None]:
        # SIGTERM stops as Ctrl-C does (orderly: the batch in progress commits), as it does
        # for `idem consume`; only the main thread may set a handler.
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: self.stop())
        return lambda: signal.signal(signal.SIGTERM, previous)


class _HandlerLoop:
    """The event loop of a consumer's ``async def`` handlers, on the consumer's thread.

    A handler's coroutine is first stepped directly: one that awaits only its transaction
    (which completes at once) finishes in that step, without a trip through the loop. One
    that awaits anything else (``asyncio.sleep``, a client of its own) is handed to the
    loop, which runs until it finishes; the loop belongs to this thread, so everything
    asyncio does for it is on the thread it expects.

    The loop is set as this thread's running loop for a whole batch pass (enter() and
    leave(), called by the engine's HandlerScope of a topic with async handlers), not per
    event: on Python 3.11 setting it costs a system call (getpid), which per event took
    most of an async handler's overhead (bench/PYTHON-RESULTS.md)."""

    def __init__(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def enter(self) -> None:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        asyncio.events._set_running_loop(self._loop)

    def leave(self) -> None:
        asyncio.events._set_running_loop(None)

    def run(self, coroutine: Any) -> Any:
        """Runs a handler's coroutine to its end, inside enter() and leave()."""
        loop = self._loop
        assert loop is not None, "a handler's coroutine outside its batch pass"
        try:
            yielded = coroutine.send(None)
        except StopIteration as finished:
            return finished.value
        except BaseException:
            coroutine.close()
            raise
        # run_until_complete refuses to start while a loop is set as running.
        asyncio.events._set_running_loop(None)
        try:
            return loop.run_until_complete(_resume(coroutine, yielded))
        finally:
            asyncio.events._set_running_loop(loop)

    def close(self) -> None:
        """On the consumer's thread, once it stopped."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None


async def _resume(coroutine: Any, yielded: Any) -> Any:
    return await _Resumed(coroutine, yielded)


class _Resumed:
    """Awaits the rest of a coroutine that was stepped by hand and yielded ``first`` (a
    future of the loop): what the loop's task sends or throws in goes on to it."""

    def __init__(self, coroutine: Any, first: Any):
        self._coroutine = coroutine
        self._first = first

    def __await__(self) -> Any:
        coroutine, value = self._coroutine, self._first
        while True:
            try:
                sent = yield value
            except BaseException as thrown:
                try:
                    value = coroutine.throw(thrown)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    value = coroutine.send(sent)
                except StopIteration as finished:
                    return finished.value


class _DecodeFailed(Exception):
    """The decode step of a route refused the event (dead-lettered with its message)."""


def _event_of(route: _Route, *record: Any) -> Event:
    """The event of a record as the engine hands it over, decoded when the route says so.
    \raises _DecodeFailed naming what the decode step raised."""
    event = Event(*record)
    if route.decode is not None:
        try:
            event._data = route.decode(event.data)
        except Exception as error:
            raise _DecodeFailed(f"decode: {type(error).__name__}: {error}") from error
    return event


def _answer_for(error: BaseException, topic: str) -> tuple[int, str]:
    """What the engine is told of an exception a handler (or its request) raised."""
    if isinstance(error, Retry):
        return (_RETRY, error.reason)
    if isinstance(error, DeadLetter):
        return (_DEAD_LETTER, error.reason)
    if isinstance(error, _DecodeFailed):
        return (_DEAD_LETTER, str(error))
    if isinstance(error, StoreError):
        return (_STORE_ERROR, f"StoreError: {error}")
    if isinstance(error, (KeyboardInterrupt, SystemExit)):
        return (_STOP, f"{type(error).__name__} in the handler of {topic}")
    return (_EXCEPTION, f"{type(error).__name__}: {error}")


def _dispatcher(routes: list[_Route], handler_loop: _HandlerLoop) -> Callable[..., Any]:
    """The function the engine calls for each event of one topic: it runs the event's
    handler and answers None (done) or (what happened, text); every exception of the
    handler is answered, never raised."""

    def dispatch(index: int, id_bytes: bytes, type_: str, data_text: str, topic: str,
                 partition: int, offset: int, key: Optional[bytes],
                 headers: Sequence[tuple[str, bytes]], raw_tx: Any, response: Any) -> Any:
        route = routes[index]
        try:
            event = _event_of(route, id_bytes, type_, data_text, topic, partition, offset, key,
                              headers)
            tx = AsyncTx(raw_tx) if route.is_async else Tx(raw_tx)
            if response is None:
                result = route.fn(event, tx)
            else:
                result = route.fn(event, Response(*response), tx)
            if route.is_async:
                handler_loop.run(result)
            return None
        except BaseException as error:  # every outcome goes back to the engine as an answer
            return _answer_for(error, topic)

    return dispatch


def _requester(routes: list[_Route]) -> Callable[..., Any]:
    """The function the engine calls to start an event's HTTP call: it answers
    (0, method, url, body, content type, headers) with the handler's request, or
    (what happened, text) when making it raised (as the dispatcher answers; any exception
    but Retry dead-letters the event: the call was never made)."""

    def request(index: int, id_bytes: bytes, type_: str, data_text: str, topic: str,
                partition: int, offset: int, key: Optional[bytes],
                headers: Sequence[tuple[str, bytes]]) -> Any:
        route = routes[index]
        assert route.request is not None
        try:
            event = _event_of(route, id_bytes, type_, data_text, topic, partition, offset, key,
                              headers)
            made = route.request(event)
        except BaseException as error:
            code, text = _answer_for(error, topic)
            if code in (_RETRY, _DEAD_LETTER):
                return (code, text)
            return (_DEAD_LETTER, f"request: {text}")
        if not isinstance(made, Request):
            return (_DEAD_LETTER, f"request= returned {type(made).__name__}, not idem.Request")
        if made.json is not None:
            body: Union[str, bytes] = _json.dumps(made.json)
        else:
            body = made.body if made.body is not None else b""
        if isinstance(body, str):
            body = body.encode("utf-8")
        extra = made.headers
        header_list = list(extra.items()) if isinstance(extra, Mapping) else list(extra or [])
        return (0, made.method, made.url, body, made.content_type, header_list)

    return request


__all__ = ["App", "Event", "Tx", "AsyncTx", "Retry", "DeadLetter", "Request", "Response"]
