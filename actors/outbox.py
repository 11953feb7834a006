"""``Outbox``: the part of an operator shell that sends its output — batching, backpressure
and the flush timer.

* **batching**: the output is buffered per out-edge (split by the stage's router) and per
  subscriber; a buffer is sent when it holds ``batch_size`` messages, when a CTI went into it
  (so a CTI never waits), or when its oldest message is ``flush_s`` old — a timer thread
  does this, because a synchronous actor runs nothing between calls. It also polls processors
  that watch the wall clock (a source's idle timeout), when the processor says a poll may
  emit (:meth:`~operators.processor.Processor.next_poll`). The timer sleeps until its next
  deadline, or for good when there is none: an idle actor costs no wake-ups of cedar's
  (``benchmarks/idle_cost.py`` measures what Ray's own cost).
* **backpressure**: at most ``max_in_flight`` unanswered batches per out-edge; the next send
  waits for the oldest (calls from one caller complete in order), which stalls this actor's
  data path and, through its own bounded callers, everything upstream.
* **failures on the way out**: a batch pickle cannot take fails the step, naming the first
  message that holds the culprit; a downstream actor that died fails it too, while a
  subscriber that went away is only dropped.

The state and locks are :class:`~actors.shell_state.ShellState`'s.
"""

from __future__ import annotations

import pickle
import threading
import time
import traceback
from typing import Any

import ray

from operators.columns import Columns, count_events
from operators.errors import OperatorError
from operators.events import Cti, Message

from .reprs import safe_repr
from .shell_state import ShellState
from .subscriptions import Target
from .wire import encode

#: How long the timer waits for the data path before it tries again (seconds); also the
#: earliest a poll is scheduled after the clock was read.
TICK_S = 0.005

#: Batches due to go out: each with the out-edge or subscriber it goes to.
Ready = list[tuple[Target, list[Message]]]


class Outbox(ShellState):
    """Buffers, sends and times the shell's output (see the module docstring)."""

    def _emit(self, out: list[Message], force: bool) -> Ready:
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
            if self.targets and self.router is not None:
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

    def _due(self, flush: bool) -> Ready:
        """Take the buffers that are due: all non-empty ones when ``flush``, else the full
        ones (called with _lock)."""
        ready: Ready = []
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

    def _send(self, ready: Ready) -> None:
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

    def _call(self, target: Target, blob: Any, barrier: bool = False,
              batch: list[Message] | None = None) -> bool:
        """Submit one call to ``target``; False when the step failed instead (the output
        cannot be serialised: Ray pickles the column batches that travel beside the bytes)."""
        inflight = target.inflight
        if len(inflight) >= self.settings.max_in_flight:  # backpressured: wait, timed
            waited = time.monotonic()
            try:
                while len(inflight) >= self.settings.max_in_flight:
                    ray.get(inflight[0])  # counted in flight (stats) while we wait for it
                    inflight.popleft()
            except Exception as exc:  # the downstream actor died (or was stopped)  # noqa: BLE001
                self._lost(target, exc)
                return True
            finally:
                self.backpressured_s += time.monotonic() - waited
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
                text = safe_repr(m)
                culprit = f" (first in {text[:200] + '...' if len(text) > 200 else text})"
                break
        return OperatorError(
            f"step {self.step!r} ({self.describe}): its output cannot be serialised: "
            f"{type(exc).__name__}: {exc}{culprit}; return picklable payloads from the UDM / "
            f"function (plain values, tuples, dicts, dataclasses; not locks, lambdas, open "
            f"files or generators)")

    def _lost(self, target: Target, exc: BaseException) -> None:
        """``target``'s actor is gone: a subscriber is dropped, an out-edge fails the step."""
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
    def _start_timer(self) -> None:
        """Start the timer thread, once per shell (it outlives a reset: the next step uses
        it)."""
        if self._timer is None:
            self._timer = threading.Thread(target=self._tick_loop, name="cedar-flush",
                                           daemon=True)
            self._timer.start()

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
        """Flush the buffers past their time bound and poll a processor that is due."""
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
                ready: Ready = []
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
