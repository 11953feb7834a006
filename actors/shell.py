"""``OperatorShell``: the one generic actor that hosts any pure operator of a plan.

The shell is a plain class; the deployer applies ``ray.remote`` to it with explicit options
(:data:`ACTOR_OPTIONS`). It owns one :class:`~operators.processor.Processor` (built in the
actor from a cloudpickled factory) and moves batches:

* **data path** (the default concurrency group, one thread, so the calls of one caller run in
  submission order — docs/runtime.md: async or threaded actors reorder): :meth:`push` decodes
  a batch (:mod:`actors.wire`), runs the processor, splits the output over the out-edges
  (with the router the planner's side builds, :class:`topology.routing.Router`) into
  per-edge buffers; :meth:`end` counts the ends of its input edges: an end before the last
  tells the processor that input ended (``end_input(port)``: a join or union then follows
  its open inputs' CTIs), and after the last the shell flushes the processor (``finish()``,
  e.g. a source's final CTI) and forwards the end;
  :meth:`fail` forwards an upstream failure to the output, where the driver reports it with
  the step id.
* **batching**: a buffer is sent when it holds ``batch_size`` messages, when a CTI went into
  it (so a CTI never waits), or when its oldest message is ``flush_s`` old — a timer thread
  does this, because a synchronous actor runs nothing between calls. It also polls processors
  that watch the wall clock (a source's idle timeout), when the processor says a poll may
  emit (:meth:`~operators.processor.Processor.next_poll`). The timer sleeps until its next
  deadline, or for good when there is none: an idle actor costs no wake-ups of cedar's
  (``benchmarks/idle_cost.py`` measures what Ray's own cost).
* **backpressure**: at most ``max_in_flight`` unanswered batches per out-edge; the next send
  waits for the oldest (calls from one caller complete in order), which stalls this actor's
  data path and, through its own bounded callers, everything upstream.
* **control** (group ``"control"``, answered while data flows): stats, the output CHT, dead
  letters and late events, subscriptions of other queries (dynamic composition) and of
  drivers (:meth:`open_pull` / :meth:`fetch`, group ``"io"``; :mod:`actors.subscriptions`),
  and a supervisor's vigil (:meth:`until_failed`, group ``"watch"``).

**checkpoints** (``config["checkpoint"]``, see :mod:`actors.checkpoint`; the alignment, the
epoch write and the sink's release are :class:`actors.barrier.Barriers`): the driver sends
:meth:`barrier` calls into the sources behind their data. A stage with several input edges
*aligns* them (Chandy-Lamport / Flink): an input whose barrier came first is held (its pushes,
ends and later barriers are queued in arrival order) until the barrier came on every input;
then the stage flushes its buffers, writes ``pickle(state)`` for the epoch atomically, forwards
the barrier on every out-edge and replays what it held. The sink stage is *transactional*: its
output waits in ``pending`` and is released (to :meth:`fetch_from` and the driver's pulls) only
once its own checkpoint of the epoch is on disk, when every stage upstream has written its
own. A restart from that epoch's files therefore never re-emits released output.

Two locks: ``_send_lock`` orders everything that submits calls (data path, timer,
subscriptions), ``_lock`` guards the processor and buffers; control reads take only ``_lock``,
which the data path never holds while it waits on a downstream actor.
"""

from __future__ import annotations

import gc
import os
import pickle
import reprlib
import threading
import time
import traceback
from collections.abc import Callable
from itertools import islice
from typing import Any

import ray

from operators.columns import Columns, count_events
from operators.errors import OperatorError, SourceFailed
from operators.events import MIN_TIME, Cti, Message
from operators.processor import Processor
from operators.publish import Publish

from . import checkpoint as ck
from .barrier import Barriers
from .config import ShellConfig
from .recorder import Recorder
from .subscriptions import Subscriptions, Target
from .wire import decode, decode_rows, encode

#: How the deployer applies ``ray.remote`` to the shell: no CPU reservation (an operator actor
#: mostly waits), no silent restarts (``__init__`` would run again with the state lost and the
#: input position unknown), one data thread.
ACTOR_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "max_restarts": 0,
    "max_task_retries": 0,
    "max_concurrency": 1,
    "concurrency_groups": {"control": 1, "io": 4, "watch": 1},
    # over the nodes of a cluster (topology.deploy's placement= chooses per query)
    "scheduling_strategy": "SPREAD",
}
#: How long the timer waits for the data path before it tries again.
TICK_S = 0.005
#: How long a control read (stats, inspect, trace flush) waits for the data path to let go
#: of the step's state before it answers without it: a step busy in one long batch (or a
#: function that hangs) answers from what it last reported, and says it is busy.
BUSY_WAIT_S = 0.2
#: glibc's malloc in an actor: allocations from this size on are mapped on their own, and freed
#: memory above the heap's top is given back to the system from this size on (see
#: :func:`_keep_freed_memory`).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20


def _keep_freed_memory() -> None:
    """Let glibc keep the memory a batch freed for the next batch. In a Ray worker its malloc
    gives freed memory back to the system at once (its usual thresholds, which grow to 32 MB
    for mapped and 64 MB for trimmed memory as large blocks are freed, stay at 128 kB there),
    so every batch's temporaries (sorts, masks, copies of columns) fault their pages in
    again: 51k page faults per run of the W1 benchmark's keyed window (2M events), ~90 ms of
    its ~280 ms. These are the values glibc would have grown to. No-op without glibc."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    mallopt(-1, TRIM_THRESHOLD)  # M_TRIM_THRESHOLD


def _safe_repr(obj: Any) -> str:
    """``repr(obj)``, or a stand-in when its repr raises."""
    try:
        return repr(obj)
    except Exception:  # noqa: BLE001 - only for an error message
        return f"<{type(obj).__name__} object>"


class _ShortRepr(reprlib.Repr):
    """:class:`reprlib.Repr` that keeps a dict's own key order, as ``repr`` does."""

    def repr_dict(self, x: Any, level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        shown = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                 for k, v in islice(x.items(), self.maxdict)]
        return "{" + ", ".join(shown + (["..."] if len(x) > self.maxdict else [])) + "}"


def _short_repr(obj: Any, width: int) -> str:
    """``repr(obj)`` cut to about ``width`` characters, without building the whole repr of a
    large payload (strings, bytes and containers are cut before they are repr'd)."""
    r = _ShortRepr()
    r.maxstring = r.maxother = r.maxlong = width
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 32
    r.maxarray = 32
    r.maxlevel = 4
    try:
        text = r.repr(obj)
    except Exception:  # noqa: BLE001 - only for a display
        text = _safe_repr(obj)
    return text if len(text) <= width else text[:width - 1] + "…"


#: an out-edge or a subscriber (the name the shell's subclasses know)
_Target = Target


class _Read:
    """A batch a source actor read itself (:meth:`OperatorShell.pull`), delivered as it is:
    it was made in this process for this step, so it is not encoded and decoded again (that
    turned every string of a column back into Arrow and into Python objects anew)."""

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch


def _import_data_path() -> None:
    """Import, while a query is set up, what the data path would import on its first batch:
    ``numpy.unique`` imports ``numpy.ma`` and restoring a string column imports
    ``pyarrow.compute`` (with its generated docstrings): 50-100 ms of CPU that every
    actor's first batch paid on top of its work (seen with py-spy in ``cedar demo``)."""
    import numpy.ma  # noqa: F401
    import pyarrow.compute  # noqa: F401

    _arrow_memory_pool()


def _arrow_memory_pool() -> None:
    """Arrow's buffers from jemalloc, not pyarrow's default mimalloc (unless the user chose a
    pool with ``ARROW_DEFAULT_MEMORY_POOL``): mimalloc maps its memory as transparent huge
    pages, and the kernel zeroes 2 MB at each one's first touch. In ``cedar demo`` the
    actors' first run spent 0.14-0.15 s of system time so (perf: ``clear_page_erms`` under
    ``mi_page_free_list_extend``), 0.02-0.07 s with jemalloc, which later runs reuse too."""
    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowNotImplementedError):  # a build without jemalloc
        pass


_frozen = False


def _freeze_once() -> None:
    """What is alive when the process's first shell is made (Ray's and the imported modules'
    ~80k objects) lives as long as the process: kept out of the collector, a full collection
    no longer walks it (~40 ms each in a Ray worker, about one per 2M events of the W1
    benchmark's keyed window). Once: a step host makes shells while other slots run, and
    their state must stay collectable."""
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True


class OperatorShell:
    """Hosts one processor of a plan; see the module docstring for the protocol."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._timer: threading.Thread | None = None
        #: set when the timer's next deadline came nearer (a buffer began to wait, a poll
        #: is due sooner): the timer sleeps until its deadline otherwise, or for good
        self._armed = threading.Event()
        #: how often the timer thread woke up (idle, it sleeps: tests count this)
        self.timer_wakes = 0
        #: the Ray node this actor runs on (None for a shell made outside Ray, as tests do:
        #: asking Ray would start one, or join whatever cluster /tmp/ray last recorded)
        self.node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        _keep_freed_memory()
        _freeze_once()
        self._reset()

    # -- configuration ----------------------------------------------------------------------
    def _reset(self) -> None:
        self.step = "(idle)"
        self.describe = ""
        self.proc: Processor | None = None
        self.n_in = 0
        #: splits an output batch over the out-edges (a :class:`topology.routing.Router`,
        #: built on the planner's side: the shell only calls its ``route``)
        self.router: Any = None
        self.targets: list[_Target] = []
        self.buffers: list[list[Message]] = []
        #: composed queries and driver pulls (:mod:`actors.subscriptions`)
        self.readers = Subscriptions()
        self.rows_input = False
        #: batch size, in-flight window, flush timer, trace (:mod:`actors.config`)
        self.settings = ShellConfig()
        self.info: dict[str, Any] = {}
        self.ends = 0
        self.finished = False
        self.error: str | None = None
        self.error_trace: str | None = None
        self.counts = {"events_in": 0, "events_out": 0, "batches_in": 0, "batches_out": 0}
        self.out_cti = MIN_TIME
        #: wall time (time.time()) of the last output CTI advance and of the last input batch:
        #: ``why`` says how long ago a step moved (topology/why.py)
        self.cti_wall: float | None = None
        self.push_wall: float | None = None
        self.finished_wall: float | None = None  # when every input had ended (time.time())
        #: since when (time.time()) the data path is inside the processor (None: it is not)
        self.busy_since: float | None = None
        #: the last full answer of :meth:`stats`: a busy step answers from it
        self._last_stats: dict[str, Any] | None = None
        self._oldest: float | None = None  # when the oldest buffered message arrived
        self._poll: Callable[[float], list[Message]] | None = None  # the processor's poll
        self._next_poll: float | None = None  # when (time.monotonic()) to poll next
        #: checkpoints: alignment, the epoch write, the sink's release (:mod:`actors.barrier`;
        #: off until configured with a checkpoint directory)
        self.barriers = self._barriers(None)
        #: the step's trace recorder (None: tracing off, see :mod:`actors.recorder`)
        self.trace: Recorder | None = None

    def _barriers(self, ckpt: dict[str, Any] | None) -> Barriers:
        return Barriers(self.step, self.n_in, ckpt, push=self._push, end=self._end,
                        aligned=self._aligned)

    @property
    def is_sink(self) -> bool:
        """Whether this is a checkpointed query's (transactional) sink."""
        return self.barriers.is_sink

    def configure(self, config: dict[str, Any]) -> str:
        """Host a new processor: ``step``, ``factory``, ``n_in`` (input edges), ``router``
        (a Router over the out-edges) with ``handles`` (downstream actors by step), ``rows``
        (the input is source rows), ``settings`` (a :class:`~actors.config.ShellConfig`:
        batch size, in-flight window, flush timer, trace; its defaults if absent), ``info``."""
        _import_data_path()
        with self._send_lock, self._lock:
            self._reset()
            self.step = config["step"]
            self.describe = config.get("describe", "")
            try:
                self.proc = config["factory"]()
            except Exception as exc:
                raise RuntimeError(
                    f"step {self.step!r} ({self.describe}): building the operator failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self.n_in = config.get("n_in", 1)
            self.router = config.get("router")
            edges = self.router.edges if self.router is not None else []
            handles = config.get("handles", {})
            self.targets = [_Target(e.dst, handles[e.dst], e.port) for e in edges]
            self.buffers = [[] for _ in edges]
            self.rows_input = bool(config.get("rows", False))
            self.settings = config.get("settings") or ShellConfig()
            self.info = dict(config.get("info", {}))
            self.barriers = self._barriers(config.get("checkpoint"))
            if self.barriers.ckpt and config.get("restore"):
                self._restore(ck.load(config["restore"]))
            trace = self.settings.trace
            if trace is not None and trace.traces(self.step):
                self.trace = Recorder(trace, self.step, self.proc)
            if self.proc.poll_every_s:
                self._poll = self.proc.poll
                self.proc.clock = time.monotonic
                self._schedule_poll(time.monotonic())
        if self._timer is None:
            self._timer = threading.Thread(target=self._tick_loop, name="cedar-flush",
                                           daemon=True)
            self._timer.start()
        return self.step

    def reset(self) -> None:
        """Drop the processor and every edge (the actor goes back to a pool)."""
        with self._send_lock, self._lock:
            if self.trace is not None:
                self.trace.flush()
            self._reset()
            self._wake.notify_all()

    # -- data path --------------------------------------------------------------------------
    def push(self, port: int, blob: bytes) -> None:
        """Process one batch from input ``port`` (encoded rows for a rows source)."""
        with self._send_lock:
            self._deliver(port, "push", blob)

    def end(self, port: int) -> None:
        """One input edge has ended: the processor's ``end_input(port)`` while others are
        open; after the last, finish and forward the end."""
        with self._send_lock:
            self._deliver(port, "end", None)

    def barrier(self, port: int, epoch: int) -> None:
        """Checkpoint barrier ``epoch`` on input ``port`` (see the module docstring)."""
        with self._send_lock:
            self._deliver(port, "barrier", epoch)

    def pull(self, data: Any, port: int = 0) -> None:
        """Become the reader of source ``data`` (a portable iterable of source batches: row
        lists or column batches, e.g. one file of ``from_spark(..., sources=N)``): a thread of
        this actor iterates it and processes each batch as if it had been pushed on ``port``
        (same counters, backpressure through this actor's own sends), then ends the input;
        ``stats()`` counts the batches it read in ``batches_pulled``.
        Returns once the thread has started. An error while reading fails the step, as a
        failed push does, and the input does not end. Batches travel nowhere on their way
        in (nor are they encoded: see :class:`_Read`): only the output goes to the object
        store."""
        proc = self.proc
        if proc is None:
            raise RuntimeError(f"{self!r}: configure() before pull()")
        with self._lock:  # stats() shows that this source read its batches itself
            self.counts.setdefault("batches_pulled", 0)

        over = object()

        def run() -> None:
            batches = iter(data)
            try:
                while self.proc is proc and self.error is None and not self.finished:
                    try:
                        batch: Any = next(batches, over)
                    except Exception as exc:  # noqa: BLE001 - the source's data failed
                        with self._send_lock:
                            if self.proc is not proc or self.error is not None:
                                return
                            with self._lock:
                                self._failed(SourceFailed(self.step, self.describe, exc))
                            self._forward_failure()
                        return
                    with self._send_lock:
                        if self.proc is not proc:
                            return  # reset: the actor went back to its pool
                        if batch is over:
                            self._deliver(port, "end", None)
                            return
                        self.counts["batches_pulled"] += 1
                        self._deliver(port, "push", _Read(batch))
            finally:
                close = getattr(batches, "close", None)
                if close is not None:
                    close()

        threading.Thread(target=run, name="cedar-source-pull", daemon=True).start()

    def _deliver(self, port: int, kind: str, arg: Any) -> None:
        """One call of input ``port``, through the barrier alignment (with _send_lock)."""
        self.barriers.deliver(port, kind, arg)

    def _aligned(self, epoch: int) -> None:
        """Every input is at barrier ``epoch`` (the ``aligned`` step of
        :class:`~actors.barrier.Barriers`, called with _send_lock): checkpoint the stage."""
        if self.error is not None:
            return
        try:
            self._checkpoint(epoch)
        except Exception as exc:  # noqa: BLE001 - e.g. the storage refused the file
            with self._lock:
                self._failed(OperatorError(
                    f"step {self.step!r}: writing checkpoint {epoch} failed: "
                    f"{type(exc).__name__}: {exc}"))
            self._forward_failure()

    def _checkpoint(self, epoch: int) -> None:
        """Flush, write the state of ``epoch``, release a sink's output, forward the barrier."""
        assert self.proc is not None
        with self._lock:
            ready = self._due(True)
            state = {
                "step": self.step, "epoch": epoch, "proc": self.proc.snapshot(),
                "counts": dict(self.counts), "out_cti": self.out_cti,
                **self.barriers.state(),
            }
        self.barriers.write(epoch, state)
        with self._lock:
            self._hand_out(self.barriers.committed(epoch))
        self._send(ready)
        if self.error is not None:
            self._forward_failure()
            return
        for t in self.targets:
            if t.dead is None:
                self._call(t, epoch, barrier=True)

    def _hand_out(self, released: list[Message]) -> None:
        """Sink: output released (on disk, or the stream ended) goes to the driver pulls
        and wakes the readers (called with _lock)."""
        if self.is_sink:
            self.readers.hand_out(released)
            self._wake.notify_all()

    def _restore(self, state: dict[str, Any]) -> None:
        """Resume from a checkpoint written by :meth:`_checkpoint` (called with both locks)."""
        assert self.proc is not None
        self.proc.restore(state["proc"])
        self.counts.update(state["counts"])
        self.out_cti = state["out_cti"]
        self.barriers.restore(state)

    def _push(self, port: int, blob: bytes) -> None:
        with self._lock:
            if self.error is not None or self.proc is None:
                return
            batch: Any = blob.batch if type(blob) is _Read else \
                decode_rows(blob) if self.rows_input else decode(blob)
            self.counts["events_in"] += count_events(batch)
            self.counts["batches_in"] += 1
            self.push_wall = self.busy_since = time.time()
            try:
                if self.trace is None:
                    out = self.proc.process(batch, port)
                else:
                    out = self.trace.process(self.proc, batch, port, not self.rows_input)
                self.busy_since = None
                if self._poll is not None:
                    self._schedule_poll(time.monotonic())
                ready = self._emit(out, force=False)
            except Exception as exc:  # noqa: BLE001 - reported downstream with the step
                self.busy_since = None
                self._failed(exc)
                ready = []
        self._send(ready)
        if self.error is not None:
            self._forward_failure()

    def _end(self, port: int) -> None:
        targets: list[Any] = []  # where the end goes on: nowhere until the last input ended
        with self._lock:
            self.ends += 1
            if self.finished or self.proc is None:
                return
            if self.ends < self.n_in:  # (the planner gives every input port one edge)
                if self.error is not None:
                    return
                ready = self._input_ended(port)
            else:
                ready = self._finish()
                targets = list(self.targets) + self.readers.targets()
        self._send(ready)
        if self.error is not None:
            self._forward_failure()
            return
        for t in targets:
            if t.dead is None:
                t.handle.end.remote(t.port)

    def _input_ended(self, port: int) -> list[tuple[_Target, list[Message]]]:
        """Input ``port`` ended before the others: the processor's ``end_input`` (an input
        that ended no longer holds back the others' CTI); returns the buffers due (called
        with _lock)."""
        assert self.proc is not None
        try:
            out = self.proc.end_input(port)
            if self.trace is not None and out:
                self.trace.record("out", 0, out)
            return self._emit(out, force=False)
        except Exception as exc:  # noqa: BLE001 - reported downstream with the step
            self._failed(exc)
            return []

    def _finish(self) -> list[tuple[_Target, list[Message]]]:
        """Every input ended: flush the processor, release a sink's output; returns the
        buffers due (called with _lock)."""
        assert self.proc is not None
        ready: list[tuple[_Target, list[Message]]] = []
        if self.error is None:
            try:
                out = self.proc.finish()
                if self.trace is not None and out:
                    self.trace.record("out", 0, out)
                ready = self._emit(out, force=True)
            except Exception as exc:  # noqa: BLE001 - reported downstream with the step
                self._failed(exc)
        if self.trace is not None:
            self.trace.flush()
        self.finished, self.finished_wall = True, time.time()
        self._hand_out(self.barriers.release())
        self._wake.notify_all()
        return ready

    def fail(self, port: int, message: str) -> None:
        """An upstream step failed, or the data fed to this source raised where it is read
        (the feeding process says so: :class:`~operators.errors.SourceFailed`): record the
        first failure and pass it on."""
        with self._send_lock:
            with self._lock:
                if self.error is not None:
                    return
                self.error = message
                self._wake.notify_all()
            self._forward_failure()

    def _failed(self, exc: BaseException) -> None:
        msg = str(exc)
        if self.step not in msg:
            msg = f"step {self.step!r} ({self.describe}) failed: {type(exc).__name__}: {msg}"
        self.error = msg
        self.error_trace = traceback.format_exc()
        self._wake.notify_all()

    def _forward_failure(self) -> None:
        for t in list(self.targets) + self.readers.targets():
            if t.dead is None:
                t.handle.fail.remote(t.port, self.error)

    def _emit(self, out: list[Message], force: bool) -> list[tuple[_Target, list[Message]]]:
        """Buffer ``out`` on every edge; return the buffers that are due (called with _lock)."""
        has_cti = False
        if out:
            self.counts["events_out"] += count_events(out)
            for m in reversed(out):
                if type(m) is Cti:
                    has_cti = True
                    if m.time > self.out_cti:
                        self.out_cti, self.cti_wall = m.time, time.time()
                    break
            if self.is_sink:  # released once its epoch is on disk
                self.barriers.hold_output(out)
            elif self.readers.hand_out(out):
                self._wake.notify_all()
            if self.targets:
                for buf, part in zip(self.buffers, self.router.route(out)):
                    buf.extend(part)
            self.readers.buffer(out)
            if self._oldest is None:
                self._oldest = time.monotonic()
                ready = self._due(force or has_cti)
                if self._oldest is not None:  # a buffer began to wait: wake the timer
                    self._armed.set()
                return ready
        return self._due(force or has_cti)

    def _due(self, flush: bool) -> list[tuple[_Target, list[Message]]]:
        ready: list[tuple[_Target, list[Message]]] = []
        size = self.settings.batch_size
        pending = False
        for i, buf in enumerate(self.buffers):
            if buf and (flush or len(buf) >= size):
                ready.append((self.targets[i], buf))
                self.buffers[i] = []
            elif buf:
                pending = True
        subs, waiting = self.readers.due(flush, size)
        ready.extend(subs)
        if not (pending or waiting):
            self._oldest = None
        return ready

    def _send(self, ready: list[tuple[_Target, list[Message]]]) -> None:
        """Send due batches, waiting while an edge has ``max_in_flight`` batches unanswered
        (called with _send_lock held and _lock released)."""
        for target, msgs in ready:
            if target.dead is not None:
                continue
            size = self.settings.batch_size
            for i in range(0, len(msgs), size):
                part = msgs[i:i + size]
                try:
                    blob = encode(part)
                except Exception as exc:  # noqa: BLE001 - a payload pickle cannot take
                    with self._lock:
                        self._failed(self._unserialisable(part, exc))
                    return
                if not self._call(target, blob, batch=part):
                    return
                self.counts["batches_out"] += 1

    def _call(self, target: _Target, blob: Any, barrier: bool = False,
              batch: list[Message] | None = None) -> bool:
        """Submit one call to ``target``; False when the step failed instead (the output
        cannot be serialised: Ray pickles the column batches that travel beside the bytes)."""
        inflight = target.inflight
        try:
            while len(inflight) >= self.settings.max_in_flight:
                ray.get(inflight[0])  # counted in flight (stats) while we wait for it
                inflight.popleft()
        except Exception as exc:  # the downstream actor died (or was stopped)  # noqa: BLE001
            self._lost(target, exc)
            return True
        method = target.handle.barrier if barrier else target.handle.push
        try:
            ref = method.remote(target.port, blob)
        except TypeError as exc:  # Ray: "Could not serialize the argument ..."
            if batch is None:
                raise
            with self._lock:
                self._failed(self._unserialisable(batch, exc))
            return False
        inflight.append(ref)
        return True

    def _unserialisable(self, batch: list[Message], exc: BaseException) -> OperatorError:
        """The error of an output batch that pickle cannot take, naming the step and, when
        it can be found, the first message that holds the culprit (an error path only)."""
        culprit = ""
        for m in batch:
            try:
                pickle.dumps(m if type(m) is Columns else tuple(m), protocol=5)
            except Exception:  # noqa: BLE001 - this is the one we are looking for
                text = _safe_repr(m)
                culprit = f" (first in {text[:200] + '...' if len(text) > 200 else text})"
                break
        return OperatorError(
            f"step {self.step!r} ({self.describe}): its output cannot be serialised: "
            f"{type(exc).__name__}: {exc}{culprit}; return picklable payloads from the UDM / "
            f"function (plain values, tuples, dicts, dataclasses; not locks, lambdas, open "
            f"files or generators)")

    def _lost(self, target: _Target, exc: BaseException) -> None:
        target.dead = f"{type(exc).__name__}: {exc}"
        target.inflight.clear()
        with self._lock:
            if self.readers.drop(target):  # a composed query went away: it no longer listens
                return
            if self.error is None:
                self.error = (f"step {self.step!r}: its output {target.dst!r} is gone "
                              f"({target.dead})")
                self._wake.notify_all()

    # -- the timer ------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        """Sleep until the next deadline — a buffer's time bound or a due poll — and then
        flush or poll; with neither, sleep until one comes (an idle actor costs no wake-ups)."""
        while True:
            self.timer_wakes += 1
            self._armed.clear()  # before reading the deadlines: a later set() wakes the wait
            delay = self._delay(time.monotonic())
            if delay is None or delay > 0:
                self._armed.wait(delay)
                continue
            try:
                self._tick()
            except Exception:  # never let the timer die; failures show in stats  # noqa: BLE001
                self.error_trace = traceback.format_exc()

    def _delay(self, now: float) -> float | None:
        """Seconds until the timer has something to do (None: nothing, until armed)."""
        oldest, next_poll = self._oldest, self._next_poll
        due = [oldest + self.settings.flush_s] if oldest is not None else []
        if next_poll is not None and self._poll is not None:
            due.append(next_poll)
        return min(due) - now if due else None

    def _schedule_poll(self, now: float) -> None:
        """Ask the processor when to poll it next (after an input or a poll at ``now``; called
        with _lock); wake the timer if that is sooner than it planned."""
        assert self.proc is not None
        when = self.proc.next_poll(now)
        if when is not None:
            when = max(when, now + TICK_S)  # at a deadline the clock may read a hair early
        before, self._next_poll = self._next_poll, when
        if when is not None and (before is None or when < before):
            self._armed.set()

    def _tick(self) -> None:
        now = time.monotonic()
        oldest, next_poll = self._oldest, self._next_poll
        stale = oldest is not None and now - oldest >= self.settings.flush_s
        polled = self._poll is not None and next_poll is not None and now >= next_poll
        if not stale and not polled:
            return
        if not self._send_lock.acquire(timeout=TICK_S):
            return  # the data path is busy: it flushes on its own
        try:
            with self._lock:
                if self.error is not None or self.finished or self.proc is None:
                    # nothing more goes out: no deadline either (the timer sleeps)
                    self._oldest = self._next_poll = None
                    return
                ready: list[tuple[_Target, list[Message]]] = []
                try:
                    out: list[Message] = []
                    if polled and self._poll is not None:
                        out = self._poll(now)
                        self._schedule_poll(now)
                    if self.trace is not None and out:
                        self.trace.record("out", 0, out)
                    if out or stale:
                        ready = self._emit(out, force=stale)
                except Exception as exc:  # noqa: BLE001 - reported downstream with the step
                    self._failed(exc)
            self._send(ready)
            if self.error is not None:
                self._forward_failure()
        finally:
            self._send_lock.release()

    # -- composition: other queries subscribe to this one's output --------------------------
    @ray.method(concurrency_group="control")
    def subscribe(self, token: str, handle: Any, port: int = 0) -> int:
        """Send ``handle`` this processor's alive events (``alive_snapshot()``, then the
        current CTI) and from then on everything this stage emits. Returns the number of
        snapshot messages."""
        with self._send_lock:
            with self._lock:
                if not isinstance(self.proc, Publish):
                    raise TypeError(f"step {self.step!r} cannot publish (it is not a sink)")
                snap = self.proc.alive_snapshot()
                target = self.readers.subscribe(token, handle, port)
                finished = self.finished
            if snap:
                try:
                    blob = encode(snap)
                except Exception as exc:  # the subscriber is told why
                    with self._lock:
                        self.readers.unsubscribe(token)
                    raise self._unserialisable(snap, exc) from exc
                self._call(target, blob)
            if finished:
                handle.end.remote(port)
        return len(snap)

    @ray.method(concurrency_group="control")
    def unsubscribe(self, token: str) -> bool:
        with self._lock:
            return self.readers.unsubscribe(token)

    # -- drivers pull the output -------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def open_pull(self, snapshot: bool = False) -> int:
        """A driver subscription (``Query.subscribe``, ``collect``); with ``snapshot`` it
        starts with the alive events, like a composed query."""
        with self._lock:
            initial: list[Message] = []
            if snapshot and isinstance(self.proc, Publish):
                initial = self.proc.alive_snapshot()
            return self.readers.open_pull(initial)

    @ray.method(concurrency_group="io")
    def fetch(self, pull: int, timeout_s: float = 0.5) -> tuple[Any, bool, str | None]:
        """The messages waiting for subscription ``pull`` (waiting up to ``timeout_s`` for
        some), whether the stream has ended, and the query's error if it failed."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                waiting = self.readers.waiting(pull)
                if waiting is None:
                    return encode([]), True, self.error
                if waiting or self.finished or self.error is not None:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            blob = self._encode_out(self.readers.take(pull))
            return blob, self.finished and not self.readers.waiting(pull), self.error

    @ray.method(concurrency_group="io")
    def fetch_from(self, pos: int, timeout_s: float = 0.5
                   ) -> tuple[Any, int, int, bool, str | None]:
        """Checkpointed sink: the released output from position ``pos`` on (everything before
        ``pos`` is acknowledged and forgotten), waiting up to ``timeout_s`` for some. Returns
        the messages, the position after them, the last checkpointed epoch, whether the
        stream has ended with them, and the query's error."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self.barriers.acknowledge(pos)
            while not self.barriers.released and not self.finished and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            msgs = list(self.barriers.released)
            blob = self._encode_out(msgs)
            return (blob, pos + len(msgs), self.barriers.epoch, self.finished, self.error)

    def _encode_out(self, msgs: list[Message]) -> Any:
        """``encode(msgs)`` for a driver; when the output cannot be serialised the step fails
        (the driver raises the error) and ``msgs`` is emptied (called with _lock)."""
        try:
            return encode(msgs)
        except Exception as exc:  # noqa: BLE001 - a payload pickle cannot take
            if self.error is None:
                self._failed(self._unserialisable(msgs, exc))
                self._forward_failure()
            msgs.clear()
            return encode([])

    @ray.method(concurrency_group="control")
    def close_pull(self, pull: int) -> None:
        with self._lock:
            self.readers.close_pull(pull)

    # -- control ------------------------------------------------------------------------------
    @ray.method(concurrency_group="control")
    def stats(self) -> dict[str, Any]:
        """Events in/out, the output CTI, the state size, late and dead-letter counts;
        ``busy`` (and ``busy_s``, seconds) when the step is inside one batch and did not let
        go of its state within :data:`BUSY_WAIT_S`: the answer is then what it last
        reported, with the counters it has moved since (see :meth:`_busy_stats`)."""
        if not self._lock.acquire(timeout=BUSY_WAIT_S):
            return self._busy_stats()
        try:
            proc = self.proc
            sent = [(t.dst, ref) for t in self.targets for ref in list(t.inflight)]
            s: dict[str, Any] = dict(
                step=self.step, operator=self.describe, pid=os.getpid(), node=self.node,
                **self.counts,
                cti=self.out_cti,
                state_size=proc.state_size() if proc is not None else 0,
                late=len(proc.late) if proc is not None else 0,
                dead_letters=len(proc.dead_letters) if proc is not None else 0,
                buffered=sum(map(len, self.buffers)), in_flight=0,
                subscribers=len(self.readers.subs), finished=self.finished, error=self.error,
                epoch=self.barriers.epoch, restored_from=self.barriers.restored_from,
                in_ctis=None if proc is None or proc.in_ctis is None else list(proc.in_ctis),
                in_ended=sorted(proc.in_ended or ()) if proc is not None else [],
                cti_wall=self.cti_wall, push_wall=self.push_wall,
                finished_wall=self.finished_wall,
                out_edges=[(t.dst, t.port) for t in self.targets],
                timer_wakes=self.timer_wakes,  # the timer's loop iterations (idle cost)
            )
            if proc is not None and proc.stats is not None:
                s["source"] = dict(proc.stats)
        finally:
            self._lock.release()
        # the calls sent and not answered yet (a sent call stays in ``inflight`` until the
        # edge is full, so its length alone would stay at max_in_flight once it was reached)
        # per out-edge too, against the limit; and where the step's trace goes (None: off)
        s.update(max_in_flight=self.settings.max_in_flight, in_flight_to={},
                 trace=self.trace.trace.path if self.trace is not None else None)
        if sent:
            refs = [ref for _, ref in sent]
            _, waiting = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
            s["in_flight"] = len(waiting)
            for dst, ref in sent:
                s["in_flight_to"][dst] = s["in_flight_to"].get(dst, 0) + (ref in waiting)
        s.update(busy=False, busy_s=None)
        self._last_stats = s
        return dict(s)

    def _busy_stats(self) -> dict[str, Any]:
        """:meth:`stats` while the data path holds the step's state: the last full answer
        (the state size, in-flight counts and in-CTIs as they were then), with what can be
        read without the lock now (the counters, the output CTI, finished, the error), and
        ``busy=True``, ``busy_s``: how long the current batch has run (None: not in a batch,
        the step is sending or checkpointing)."""
        first: dict[str, Any] = {
            "step": self.step, "operator": self.describe, "pid": os.getpid(),
            "node": self.node, "state_size": 0, "late": 0, "dead_letters": 0, "buffered": 0,
            "in_flight": 0, "subscribers": 0, "epoch": None, "restored_from": None,
            "in_ctis": None, "in_ended": [], "timer_wakes": 0, "trace": None,
            "out_edges": [(t.dst, t.port) for t in self.targets], "in_flight_to": {},
            "max_in_flight": self.settings.max_in_flight}  # never answered in full yet
        s = dict(self._last_stats or first)
        since = self.busy_since
        s.update(dict(self.counts), cti=self.out_cti, finished=self.finished,
                 error=self.error, cti_wall=self.cti_wall, push_wall=self.push_wall,
                 finished_wall=self.finished_wall, busy=True,
                 busy_s=None if since is None else max(0.0, time.time() - since))
        return s

    @ray.method(concurrency_group="control")
    def rows(self) -> list[tuple[int, int, Any]]:
        """The output CHT this (sink) stage holds."""
        with self._lock:
            return self.proc.rows() if isinstance(self.proc, Publish) else []

    @ray.method(concurrency_group="control")
    def newest_rows(self, n: int, width: int) -> list[tuple[int, int, str]]:
        """The ``n`` output rows this (sink) stage holds that start last (newest last), each
        payload as its repr cut to ``width`` characters: what a monitor shows, without
        moving the whole table."""
        with self._lock:
            rows = self.proc.newest(n) if isinstance(self.proc, Publish) else []
        return [(s, e, _short_repr(p, width)) for s, e, p in rows]

    @ray.method(concurrency_group="control")
    def records(self, kind: str) -> list[Any]:
        """The ``"late"`` or ``"dead_letters"`` records of the processor."""
        if kind not in ("late", "dead_letters"):
            raise ValueError(f"records({kind!r}): ask for 'late' or 'dead_letters'")
        with self._lock:
            if self.proc is None:
                return []
            return list(self.proc.late if kind == "late" else self.proc.dead_letters)

    @ray.method(concurrency_group="control")
    def inspect(self, read: Any, wait_s: float | None = None) -> Any:
        """``read(processor)`` under the lock (None without one): a driver's read-only look
        at what stats do not carry (``why`` reads a source's AdvanceTime and late times).
        With ``wait_s``: None as well when the data path keeps the lock longer (busy)."""
        if not self._lock.acquire(timeout=-1 if wait_s is None else wait_s):
            return None
        try:
            return read(self.proc) if self.proc is not None else None
        finally:
            self._lock.release()

    @ray.method(concurrency_group="control")
    def manifest(self) -> dict[str, Any]:
        """What ``deploy`` told the step of its query (set by :meth:`configure` only: read
        without waiting for a batch)."""
        return dict(self.info)

    @ray.method(concurrency_group="control")
    def error_info(self) -> tuple[str | None, str | None]:
        with self._lock:
            return self.error, self.error_trace

    @ray.method(concurrency_group="control")
    def flush_trace(self) -> str | None:
        """Write the trace rows kept so far as a parquet part (tracing on); returns its path.
        A step busy in one batch longer than :data:`BUSY_WAIT_S` keeps them for later (a
        stop does not wait for a function that hangs)."""
        if self.trace is None or not self._lock.acquire(timeout=BUSY_WAIT_S):
            return None
        try:
            return self.trace.flush() if self.trace is not None else None
        finally:
            self._lock.release()

    @ray.method(concurrency_group="watch")
    def until_failed(self, timeout_s: float) -> str | None:
        """Wait up to ``timeout_s`` for this step to fail: its error, or None. A supervisor
        keeps one such call pending on every step of its query: it returns as soon as the
        step fails and raises as soon as the actor dies, so nobody polls an idle step."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            return self.error

    @ray.method(concurrency_group="control")
    def ping(self) -> str:
        return self.step

    def __repr__(self) -> str:
        return f"<OperatorShell {self.step}>"

