"""``OperatorShell``: the one generic actor that hosts any pure operator of a plan.

The shell is a plain class; the deployer applies ``ray.remote`` to it with explicit options
(:data:`ACTOR_OPTIONS`). It owns one :class:`~operators.processor.Processor`, built in the
actor from the :class:`~actors.stage_config.StageConfig` the driver sends (:meth:`configure`),
and moves batches. It is composed of parts, one module each, over one state
(:class:`~actors.shell_state.ShellState`: the step, its edges, counters, failure and the two
locks):

* **data path** (here; the default concurrency group, one thread, so the calls of one caller
  run in submission order — docs/runtime.md: async or threaded actors reorder): :meth:`push`
  decodes a batch (:mod:`actors.wire`), runs the processor and hands the output to the
  outbox; :meth:`end` counts the ends of its input edges: an end before the last tells the
  processor that input ended (``end_input(port)``: a join or union then follows its open
  inputs' CTIs), and after the last the shell flushes the processor (``finish()``, e.g. a
  source's final CTI) and forwards the end; :meth:`fail` forwards an upstream failure to the
  output, where the driver reports it with the step id; :meth:`pull` makes a source actor
  read its own data.
* **outbox** (:mod:`actors.outbox`): per-edge buffers split by the stage's router (the
  planner's :class:`topology.planning.routing.Router`), batching, the flush timer, backpressure
  (``max_in_flight`` unanswered batches per out-edge).
* **barriers** (:mod:`actors.checkpointing`, over :class:`actors.barrier.Barriers`): aligned
  checkpoints at the :meth:`barrier` calls the driver sends behind the data, and the
  transactional sink's release.
* **readers** (:mod:`actors.readers`): subscriptions of other queries (dynamic composition)
  and of drivers (:meth:`~actors.readers.Readers.open_pull` /
  :meth:`~actors.readers.Readers.fetch`, group ``"io"``; :mod:`actors.subscriptions`).
* **inspection** (:mod:`actors.inspection`, group ``"control"``, answered while data flows):
  stats, the output CHT, dead letters and late events, and a supervisor's vigil
  (:meth:`~actors.inspection.Inspection.until_failed`, group ``"watch"``).
* **metrics** (:mod:`actors.metrics`): the step's counters exported through Ray's metrics
  (records in/out, CTIs and their lag per input, busy time, state rows, checkpoints) by one
  thread per process every few seconds; docs/operations.md lists them.
* **process set-up** (:mod:`actors.process`): malloc, Arrow's pool, the collector, the
  imports of the first batch.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from operators.columns import count_events
from operators.errors import SourceFailed

from . import checkpoint as ck
from .barrier import Barriers
from .checkpointing import Checkpointing
from .inspection import Inspection
from .metrics import StepMetrics, publisher
from .outbox import Ready
from .process import import_data_path
from .readers import Readers
from .recorder import Recorder
from .stage_config import StageCheckpoint, StageConfig
from .subscriptions import Target
from .wire import decode, decode_rows

#: How the deployer applies ``ray.remote`` to the shell: no CPU reservation (an operator actor
#: mostly waits), no silent restarts (``__init__`` would run again with the state lost and the
#: input position unknown), one data thread.
ACTOR_OPTIONS: dict[str, Any] = {
    "num_cpus": 0,
    "max_restarts": 0,
    "max_task_retries": 0,
    "max_concurrency": 1,
    "concurrency_groups": {"control": 1, "io": 4, "watch": 1},
    # over the nodes of a cluster (topology.running.deploy's placement= chooses per query)
    "scheduling_strategy": "SPREAD",
}


class _Read:
    """A batch a source actor read itself (:meth:`OperatorShell.pull`), delivered as it is:
    it was made in this process for this step, so it is not encoded and decoded again (that
    turned every string of a column back into Arrow and into Python objects anew)."""

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch


class OperatorShell(Inspection, Readers, Checkpointing):
    """Hosts one processor of a plan; see the module docstring for the protocol and the
    parts it is made of."""

    # -- configuration ----------------------------------------------------------------------
    def _barriers(self, ckpt: StageCheckpoint | None) -> Barriers:
        return Barriers(self.step, self.n_in, ckpt, push=self._push, end=self._end,
                        aligned=self._aligned)

    def configure(self, config: StageConfig) -> str:
        """Host a new processor, the stage ``config`` describes (built here with its
        ``factory``; a checkpointed stage given ``restore`` resumes from that file); returns
        the step id. What the shell hosted before is dropped."""
        if not isinstance(config, StageConfig):
            raise TypeError(f"configure({type(config).__name__}): pass the stage as an "
                            f"actors.stage_config.StageConfig (topology.running.deploy."
                            f"stage_config makes one from a plan's stage)")
        import_data_path()
        with self._send_lock, self._lock:
            self._reset()
            self.step = config.step
            self.describe = config.describe
            try:
                self.proc = config.factory()
            except Exception as exc:
                raise RuntimeError(
                    f"step {self.step!r} ({self.describe}): building the operator failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self.n_in = config.n_in
            self.router = config.router
            self.targets = [Target(e.dst, config.handles[e.dst], e.port) for e in config.edges]
            self.buffers = [[] for _ in self.targets]
            self.rows_input = config.rows
            self.settings = config.settings
            self.info = dict(config.info)
            self.barriers = self._barriers(config.checkpoint)
            if self.barriers.ckpt and config.restore:
                self._restore(ck.load(config.restore))
            trace = self.settings.trace
            if trace is not None and trace.traces(self.step):
                self.trace = Recorder(trace, self.step, self.proc)
            self.proc.clock = time.monotonic  # (a source's idle timer; when rows came)
            if self.proc.poll_every_s:
                self._poll = self.proc.poll
                self._schedule_poll(time.monotonic())
            metrics = self.metrics = StepMetrics(
                config.query, self.step, type(self.proc).__name__, self._metrics_reading)
        publisher().add(metrics)
        self._start_timer()
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
        """Checkpoint barrier ``epoch`` on input ``port``: aligned over the inputs, then the
        stage's checkpoint (:mod:`actors.checkpointing`)."""
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

    def _push(self, port: int, blob: bytes) -> None:
        """A batch of input ``port`` through the processor, its output to the outbox (past
        the barrier alignment; called with _send_lock)."""
        with self._lock:
            if self.error is not None or self.proc is None:
                return
            batch: Any = blob.batch if type(blob) is _Read else \
                decode_rows(blob) if self.rows_input else decode(blob)
            self.counts["events_in"] += count_events(batch)
            self.counts["batches_in"] += 1
            began = self.push_wall = self.busy_since = time.time()
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
            self.busy_s += time.time() - began
        self._send(ready)
        if self.error is not None:
            self._forward_failure()

    def _end(self, port: int) -> None:
        """The end of input ``port`` (past the barrier alignment; called with _send_lock)."""
        targets: list[Target] = []  # where the end goes on: nowhere until the last input ended
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

    def _input_ended(self, port: int) -> Ready:
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

    def _finish(self) -> Ready:
        """Every input ended: flush the processor, release a sink's output; returns the
        buffers due (called with _lock)."""
        assert self.proc is not None
        ready: Ready = []
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

    def __repr__(self) -> str:
        return f"<OperatorShell {self.step}>"
