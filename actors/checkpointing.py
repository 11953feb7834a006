"""``Checkpointing``: the part of an operator shell that takes its checkpoints.

The driver sends ``barrier`` calls into the sources behind their data (see
:mod:`actors.checkpoint`). A stage with several input edges *aligns* them (Chandy-Lamport /
Flink, :class:`actors.barrier.Barriers`): an input whose barrier came first is held (its
pushes, ends and later barriers are queued in arrival order) until the barrier came on every
input. Then this part flushes the stage's buffers, writes ``pickle(state)`` for the epoch
atomically, forwards the barrier on every out-edge, and the held calls are replayed.

The sink stage is *transactional*: its output waits in ``pending`` and is handed out (to
``fetch_from`` and the driver's pulls) only once its own checkpoint of the epoch is on disk,
when every stage upstream has written its own. A restart from that epoch's files
(:meth:`Checkpointing._restore`) therefore never re-emits released output.
"""

from __future__ import annotations

import time
from typing import Any

from operators.errors import OperatorError
from operators.events import Message

from .outbox import Outbox


class Checkpointing(Outbox):
    """Aligned barriers, the epoch write and the sink's release (see the module docstring)."""

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
        began = time.monotonic()
        size = self.barriers.write(epoch, state)
        self.checkpoints += 1  # what the step's metrics show (actors.metrics)
        self.last_checkpoint = ((time.monotonic() - began) * 1000, size)
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
