"""``Readers``: the part of an operator shell that serves who reads its output besides its
out-edges — other queries (dynamic composition) and drivers.

* **composed queries** (``Stream.published``): :meth:`~Readers.subscribe` sends the new
  subscriber the publishing sink's alive events and then everything the stage emits, as an
  out-edge (:mod:`actors.outbox`); :meth:`~Readers.unsubscribe` forgets it.
* **driver pulls** (``Query.subscribe``, ``collect``): :meth:`~Readers.open_pull`,
  :meth:`~Readers.fetch` (group ``"io"``: a fetch waits for output without holding up the
  control calls) and :meth:`~Readers.close_pull`.
* **a checkpointed sink's released output**: :meth:`~Readers.fetch_from`, by output position
  (what is before the position asked for is acknowledged and forgotten).

The bookkeeping is :class:`actors.subscriptions.Subscriptions`; this part adds the locks,
the waits and the wire format.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from operators.events import Message
from operators.publish import Publish

from .outbox import Outbox
from .wire import encode


class Readers(Outbox):
    """Subscriptions of other queries and drivers' pulls (see the module docstring)."""

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
        """Forget subscriber ``token``; whether it was there."""
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
        """End driver subscription ``pull``."""
        with self._lock:
            self.readers.close_pull(pull)
