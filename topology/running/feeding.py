"""The Ray runtime's feeding: each source's data to its actor, in batches, with backpressure.

A source of a plan is fed in one of three ways, as its node declares
(:data:`topology.building.nodes.Feed`, :func:`fed_by_cluster`):

* its actor reads the data itself (:meth:`OperatorShell.pull <actors.shell.OperatorShell.pull>`:
  the files of ``from_spark(df, sources=N)``; :func:`pulls`, :func:`start_pulls`);
* the query's host actor feeds it from the cluster (rows in a list, a pyarrow table, parquet
  files: a :class:`FeedJob` sent to :class:`actors.host.QueryHost`);
* the deploying process feeds it (a generator, an iterator, a Spark DataFrame exist only
  there: :data:`DRIVER_FED`).

A :class:`Sender` keeps at most ``max_in_flight`` batches unanswered per source actor.
``collect()`` feeds its sources in turn, one batch of each (:func:`feed_round_robin`); a
deployed query feeds each from a thread of its own (:class:`Feeders`, :func:`feed_thread`),
a slow source's partial batch released after ``flush_s`` (:func:`timed_chunks`), and a held
query (``deploy(..., hold=True)``) opens its sources and waits for ``Query.start()``.
:mod:`topology.running.deploy` puts the plan on actors and uses these.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from actors.config import ShellConfig
from actors.wire import encode, encode_rows
from operators.errors import SourceFailed
from operators.feeds import END, guarded, round_robin
from topology.building import nodes as n
from topology.planning.plan import Plan
from topology.running.inline import close_feeds, feed_of, source_batches


def driver_sources(plan: Plan) -> list[str]:
    """The sources of ``plan`` a runtime feeds (all but ``published()`` ones, which another
    query's sink feeds)."""
    return [s for s in plan.sources if not isinstance(plan.stages[s].source, n.Published)]


def fed_by_cluster(plan: Plan, step: str) -> bool:
    """Whether source ``step`` is fed by the cluster (its host or its own actor), not by this
    driver: what its node declares (:data:`topology.building.nodes.Feed`)."""
    src = plan.stages[step].source
    return isinstance(src, (n.FromEvents, n.FromRows)) and src.feed != "driver"


def batched(plan: Plan, step: str) -> bool:
    """Whether source ``step``'s data is ready batches (a streaming source's micro-batches,
    a table's record batches), not rows or messages to cut into batches."""
    src = plan.stages[step].source
    return isinstance(src, (n.FromEvents, n.FromRows)) and src.batched


def encoder(plan: Plan, step: str) -> Callable[[Any], Any]:
    """How a batch of source ``step`` is put on the wire: rows or messages (:mod:`actors.wire`)."""
    return encode_rows if isinstance(plan.stages[step].source, n.FromRows) else encode


class Sender:
    """Sends batches to one source actor with at most ``max_in_flight`` unanswered."""

    def __init__(self, handle: Any, rows: bool, max_in_flight: int) -> None:
        self.handle, self.rows, self.max = handle, rows, max_in_flight
        self.inflight: deque[Any] = deque()

    def fail(self, error: SourceFailed) -> None:
        """The source's data raised where it is read: the source step fails with ``error``
        (behind the batches sent before it), and its failure travels down the query."""
        self.handle.fail.remote(0, str(error))

    def send(self, batch: list[Any]) -> None:
        import ray

        while len(self.inflight) >= self.max:
            ray.get(self.inflight.popleft())
        blob = encode_rows(batch) if self.rows else encode(batch)
        self.inflight.append(self.handle.push.remote(0, blob))

    def end(self) -> None:
        self.handle.end.remote(0)


def pulls(plan: Plan, step: str) -> Any:
    """The data of source ``step`` if its actor reads it itself (:meth:`OperatorShell.pull
    <actors.shell.OperatorShell.pull>`), its feed being ``"actor"`` (the files of
    ``from_spark(df, sources=N)``); else None (fed batch by batch, as a ``from_arrow`` table
    is)."""
    src = plan.stages[step].source
    return src.rows if isinstance(src, n.FromRows) and src.feed == "actor" else None


def collect_pulls(plan: Plan, steps: list[str]) -> list[Any]:
    """collect()'s :func:`pulls`: also the data of the sources that any process can read
    (``from_arrow`` over a table, whose buffers travel to the actor once through the object
    store) when every source of the query is such a table: each actor reads its own, as a
    ``from_spark(..., sources=N)`` part, all in parallel. Fed by the driver, every batch of
    such a source was cut and turned into Python values here, pickled, sent and decoded
    again in the actor (Q0 at 1M events: ~0.3 s of the driver's CPU; Q3's two sources at 1M:
    0.73 s on Ray against 0.37 s pulled, 0.25 s inline). Tables are finite and in memory
    already, so a source that runs ahead of another (a join then holds more of its events
    until the other's CTI catches up) holds at most its own table. Sources of other kinds
    (rows, generators) stay fed in turn by the driver, which keeps them at the same pace."""
    data = [pulls(plan, s) for s in steps]
    srcs = [plan.stages[s].source for s in steps]
    if all(d is None for d in data) and all(
            isinstance(src, n.FromRows) and src.feed == "host" and src.batched
            for src in srcs):
        data = [src.rows for src in srcs]  # type: ignore[union-attr]
    return data


def start_pulls(handles: list[Any], data: list[Any]) -> list[bool]:
    """Each source actor whose data is given (not None, see :func:`pulls`) starts reading it
    itself, all in parallel; returns, per source, whether the driver still feeds it: no data
    to pull, or data that cannot travel to an actor (it holds something only this process
    has)."""
    import ray

    refs, fed = [], []
    for h, d in zip(handles, data):
        try:
            if d is not None:
                refs.append(h.pull.remote(d))
        except TypeError:  # Ray: "Could not serialize the argument ..."
            d = None
        fed.append(d is None)
    ray.get(refs)
    return fed


def feed_round_robin(plan: Plan, handles: dict[str, Any], settings: ShellConfig) -> None:
    """collect(): the sources that can read their own data start reading it (in parallel,
    in their actors); the driver feeds the others to their end, one batch of each in turn."""
    steps = driver_sources(plan)
    fed = start_pulls([handles[s] for s in steps], collect_pulls(plan, steps))
    steps = [s for s, f in zip(steps, fed) if f]
    senders = [Sender(handles[s], isinstance(plan.stages[s].source, n.FromRows),
                      settings.max_in_flight) for s in steps]
    feeds = [source_batches(plan, s, settings.batch_size) for s in steps]
    try:
        for round_ in round_robin(feeds):
            for i, batch in round_:
                if batch is END:
                    senders[i].end()
                else:
                    senders[i].send(batch)
    finally:
        close_feeds(feeds)


def timed_chunks(items: Iterable[Any], size: int, flush_s: float,
                 stop: threading.Event) -> Iterator[list[Any]]:
    """Batches of at most ``size`` items; a partial batch is released ``flush_s`` after its
    first item, so a slow source (a generator that waits for rows) keeps its latency low.
    An exception raised while ``items`` are read is raised here, after the items before it."""
    q: queue.Queue[Any] = queue.Queue(maxsize=4 * size)
    done = object()
    failed: list[BaseException] = []

    def read() -> None:
        try:
            for item in items:
                if stop.is_set():
                    break
                q.put(item)
        except BaseException as exc:  # noqa: BLE001 - raised in the consumer's thread
            failed.append(exc)
        finally:
            q.put(done)

    threading.Thread(target=read, name="cedar-source-reader", daemon=True).start()
    buf: list[Any] = []
    first = 0.0
    while not stop.is_set():
        timeout = None if not buf else max(0.0, first + flush_s - time.monotonic())
        try:
            item = q.get(timeout=timeout)
        except queue.Empty:
            yield buf
            buf = []
            continue
        if item is done:
            break
        if not buf:
            first = time.monotonic()
        buf.append(item)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf and not stop.is_set():
        yield buf
    if failed and not stop.is_set():
        raise failed[0]


def feed_thread(sender: Sender, feed: Feed, batch_size: int, flush_s: float,
                stop: threading.Event, errors: list[tuple[str, str]],
                gate: threading.Event | None = None,
                primed: threading.Event | None = None) -> threading.Thread:
    """Feeds ``feed``'s data (rows or messages; batched, ready batches) to ``sender``.
    With a ``gate`` (a held query) the thread opens the source and reads its first batch
    at once (a Spark source plans its read then: the files, the order of their row groups),
    and sends nothing before the gate opens (``Query.start()``); ``primed`` is set once the
    first batch is read (or failed). Data that raises while it is read fails the source
    step (:class:`~operators.errors.SourceFailed`, passed down the query as a step's own
    failure is); every failure is also kept in ``errors`` as ``(step, reason)``."""
    def run() -> None:
        try:
            items = guarded(feed.data, feed.step, feed.describe)
            batches = items if feed.batched else \
                timed_chunks(items, batch_size, flush_s, stop)
            try:
                try:
                    first = [next(batches, END)] if gate is not None else []
                finally:
                    if primed is not None:
                        primed.set()
                while gate is not None and not gate.wait(0.5):
                    if stop.is_set():
                        return
                for batch in itertools.chain(first, batches):
                    if stop.is_set() or batch is END:
                        break
                    sender.send(batch)
            finally:
                close_feeds([batches])
            if not stop.is_set():
                sender.end()
        except SourceFailed as exc:
            if not stop.is_set():
                errors.append((feed.step, str(exc)))
                sender.fail(exc)
        except Exception as exc:  # the query was stopped, or its actor is gone  # noqa: BLE001
            if not stop.is_set():
                errors.append((feed.step, f"feeding the source failed: "
                                          f"{type(exc).__name__}: {exc}"))

    t = threading.Thread(target=run, name="cedar-feeder", daemon=True)
    t.start()
    return t


#: How long ``deploy(..., hold=True)`` waits for its sources' first batches (a source that
#: has no row yet, such as a generator waiting for input, is not waited for longer).
PRIME_S = 10.0


@dataclasses.dataclass(frozen=True)
class Feed:
    """One source to feed: its step, what it is (for errors), its actor, whether that takes
    rows, its data, and whether the data is ready batches."""

    step: str
    describe: str
    handle: Any
    rows: bool
    data: Any
    batched: bool


@dataclasses.dataclass
class FeedJob:
    """A query's feeding without checkpoints: each source's data to its actor, from the
    query's host (the sources any process can read) or from this driver (the others)."""

    feeds: list[Feed]
    settings: ShellConfig
    #: whether each feed's actor reads its data itself (:func:`pulls`), when it can travel
    pull: list[bool] = dataclasses.field(default_factory=list)
    #: ``deploy(..., hold=True)``: feeding waits for :meth:`Feeders.go` (``Query.start()``)
    held: bool = False

    @classmethod
    def of(cls, plan: Plan, handles: dict[str, Any], steps: list[str],
           settings: ShellConfig) -> FeedJob:
        """The feeds of source ``steps`` of ``plan`` to their actors (``handles``)."""
        feeds = [Feed(s, plan.stages[s].describe, handles[s],
                      isinstance(plan.stages[s].source, n.FromRows), feed_of(plan, s),
                      batched(plan, s)) for s in steps]
        return cls(feeds, settings, [pulls(plan, s) is not None for s in steps])

    def start(self, resume: bool = False) -> Feeders:
        feeders = Feeders([], threading.Event(), [], self)
        if self.held:
            feeders.prepare()
        else:
            feeders.go()
        return feeders


@dataclasses.dataclass
class Feeders:
    """The feeding threads of a :class:`FeedJob` (none until :meth:`go`)."""

    threads: list[threading.Thread]
    stop_event: threading.Event
    #: (source step, reason) of each feed that failed
    errors: list[tuple[str, str]]
    job: FeedJob
    started: bool = False
    #: opened by :meth:`go`: the prepared feeders of a held query send from then on
    gate: threading.Event = dataclasses.field(default_factory=threading.Event)

    def prepare(self) -> None:
        """A held query: a thread per source the driver feeds opens it and reads its first
        batch now, and sends it when :meth:`go` opens the gate. Waits (up to ``PRIME_S``)
        until every first batch is read, so that the run starts with its input ready."""
        primed = [self._feed(f) for f, pull in zip(self.job.feeds, self.job.pull) if not pull]
        deadline = time.monotonic() + PRIME_S
        for event in primed:
            event.wait(max(0.0, deadline - time.monotonic()))

    def go(self) -> None:
        """Start feeding (once): the sources that read their own data start reading it,
        and a thread per other source feeds it (started by :meth:`prepare` when held)."""
        if self.started or self.stop_event.is_set():
            return
        self.started = True
        job = self.job
        fed = start_pulls([f.handle for f in job.feeds],
                          [f.data if p else None for f, p in zip(job.feeds, job.pull)])
        for feed, by_driver, pull in zip(job.feeds, fed, job.pull):
            if by_driver and (pull or not job.held):  # not prepared yet
                self._feed(feed)
        self.gate.set()

    def _feed(self, feed: Feed) -> threading.Event:
        """Start a thread feeding ``feed`` to its actor; returns the event set when its
        first batch is read (held) or at once."""
        settings, primed = self.job.settings, threading.Event()
        self.threads.append(feed_thread(
            Sender(feed.handle, feed.rows, settings.max_in_flight), feed,
            settings.batch_size, settings.flush_s, self.stop_event, self.errors,
            gate=self.gate if self.job.held else None, primed=primed))
        return primed

    def feed_errors(self) -> list[tuple[str, str]]:
        """(source step, reason) of each feed that failed."""
        return list(self.errors)

    def stop(self, kill: bool = False) -> None:
        self.stop_event.set()


#: What ``explain()`` of a deployed query says of the sources the deploying process feeds.
DRIVER_FED = (
    "fed by the deploying process: {steps} (a generator, an iterator or a Spark DataFrame "
    "exists only there): the query stops receiving their input when that process exits; rows "
    "in a list, a pyarrow table or parquet files are read by the query's host in the cluster"
)
