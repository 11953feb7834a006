"""``Inspection``: the control reads of an operator shell — what ``Query.stats()``, ``why``,
``cedar status`` / ``inspect`` / ``ui`` and a supervisor ask a running step.

Every method runs in the ``"control"`` concurrency group (answered while data flows), but
:meth:`~Inspection.until_failed` (group ``"watch"``: a supervisor keeps one pending on every
step). A read takes only the state lock, and waits at most :data:`BUSY_WAIT_S` for the data
path to let go of it: a step busy in one long batch (or a function that hangs) answers from
what it last reported, and says it is busy.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from operators.publish import Publish

from .metrics import Reading
from .reprs import short_repr
from .shell_state import ShellState

#: How long a control read (stats, inspect, trace flush) waits for the data path to let go
#: of the step's state before it answers without it (seconds).
BUSY_WAIT_S = 0.2


class Inspection(ShellState):
    """The shell's read-only control calls (see the module docstring)."""

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

    def _metrics_reading(self) -> Reading:
        """The counters the step's metrics export (:mod:`actors.metrics`; its publisher
        thread calls this every few seconds): read without waiting for the data path, as
        :meth:`_busy_stats` does; the state size only when the state lock is free at once
        (else None: the last value stays)."""
        proc, counts = self.proc, self.counts
        state_rows = None
        if proc is not None and self._lock.acquire(blocking=False):
            try:
                state_rows = proc.state_size()
            finally:
                self._lock.release()
        ckpt = self.last_checkpoint
        return Reading(
            records_in=counts["events_in"], records_out=counts["events_out"],
            out_cti=self.out_cti,
            in_ctis=None if proc is None or proc.in_ctis is None else list(proc.in_ctis),
            in_ended=frozenset(proc.in_ended or ()) if proc is not None else frozenset(),
            source=None if proc is None or proc.stats is None else dict(proc.stats),
            dead_letters=len(proc.dead_letters) if proc is not None else 0,
            busy_s=self.busy_s, backpressured_s=self.backpressured_s, state_rows=state_rows,
            checkpoints=self.checkpoints,
            checkpoint_ms=None if ckpt is None else ckpt[0],
            checkpoint_bytes=None if ckpt is None else ckpt[1])

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
        return [(s, e, short_repr(p, width)) for s, e, p in rows]

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
        """What ``deploy`` told the step of its query (set by ``configure`` only: read
        without waiting for a batch)."""
        return dict(self.info)

    @ray.method(concurrency_group="control")
    def error_info(self) -> tuple[str | None, str | None]:
        """The step's error and its traceback (None, None while it runs well)."""
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
        """The hosted step's id (``"(idle)"`` for a shell not configured): the actor is up."""
        return self.step
