"""``Barriers``: a stage's part in a checkpoint — alignment, the epoch write, the sink's release.

Plain Python (no Ray, no locks): :class:`~actors.shell.OperatorShell` owns one per hosted
processor and calls it under its own locks; tests drive it directly.

* **alignment** (Chandy-Lamport / Flink): :meth:`Barriers.deliver` takes every call of the
  stage's inputs (``"push"``, ``"end"``, ``"barrier"``) in arrival order. An input whose
  barrier came first is *blocked*: its later calls (pushes, ends, later barriers) are held, in
  arrival order, until the barrier came on every input. Then the stage is *aligned* at that
  epoch (the ``aligned`` callback: the shell flushes, writes its state, forwards the barrier)
  and the held calls are delivered again in the order they came (one may block its input
  again at the next epoch).
* **the epoch write**: :meth:`write` saves the stage's state for an epoch atomically
  (:mod:`actors.checkpoint`); :meth:`committed` records the epoch once it is on disk.
* **the transactional sink**: the sink's output of the epoch in progress waits in
  :attr:`pending` (:meth:`hold_output`); :meth:`committed` releases it, once the sink's own
  checkpoint of the epoch is on disk — after every stage upstream wrote its own, since the
  barrier reaches the sink last. Released output stays in :attr:`released` until the reader
  acknowledges it (:meth:`acknowledge`). A checkpoint holds the released and pending output
  (:meth:`state`), so a restart from it (:meth:`restore`) never releases an output position
  twice.

Without a checkpoint directory (``ckpt`` None) barriers are ignored and nothing is held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from operators.columns import expand
from operators.events import Message

from . import checkpoint as ck

if TYPE_CHECKING:
    from .stage_config import StageCheckpoint

#: A call of an input: (port, ``"push"`` | ``"end"`` | ``"barrier"``, its argument).
Call = tuple[int, str, Any]


class Barriers:
    """Alignment of ``n_in`` inputs, the held calls, the epoch write and the sink's release
    (see the module docstring). ``ckpt``: where the stage checkpoints
    (:class:`~actors.stage_config.StageCheckpoint`), or None (off).
    ``push(port, blob)`` and ``end(port)`` process a delivered call; ``aligned(epoch)`` runs
    once every input's barrier ``epoch`` came."""

    def __init__(self, step: str, n_in: int, ckpt: StageCheckpoint | None,
                 push: Callable[[int, Any], None], end: Callable[[int], None],
                 aligned: Callable[[int], None]) -> None:
        self.step, self.n_in, self.ckpt = step, n_in, ckpt
        self._push, self._end, self._aligned = push, end, aligned
        self.is_sink = ckpt is not None and ckpt.sink
        self.epoch = 0  # the last epoch this stage wrote
        self.restored_from = 0
        self.blocked: set[int] = set()  # inputs whose barrier came, waiting for the others
        self.queued: deque[Call] = deque()  # their later calls, in arrival order
        self.pending: list[Message] = []  # sink: output of the epoch in progress
        self.released: list[Message] = []  # sink: released output not acknowledged yet
        self.released_base = 0  # sink: the output position of released[0]

    # -- alignment -------------------------------------------------------------------------
    def deliver(self, port: int, kind: str, arg: Any) -> None:
        """One call of input ``port``: held while the input is blocked, else processed."""
        if port in self.blocked:
            self.queued.append((port, kind, arg))
        elif kind == "push":
            self._push(port, arg)
        elif kind == "end":
            self._end(port)
        else:
            self._barrier(port, arg)

    def _barrier(self, port: int, epoch: int) -> None:
        if self.ckpt is None:
            return
        self.blocked.add(port)
        if len(self.blocked) < self.n_in:
            return
        self.blocked.clear()
        self._aligned(epoch)
        held = list(self.queued)
        self.queued.clear()
        for call in held:
            self.deliver(*call)

    # -- the epoch write ---------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of this part: the sink's output not yet acknowledged."""
        return {"released": self.released + self.pending if self.is_sink else [],
                "released_base": self.released_base}

    def write(self, epoch: int, state: dict[str, Any]) -> int:
        """Save the stage's ``state`` for ``epoch``, whole or not at all; returns its size
        (bytes)."""
        assert self.ckpt is not None, "write() without a checkpoint directory"
        return ck.save(ck.stage_path(self.ckpt.root, self.ckpt.query, epoch, self.step), state)

    def committed(self, epoch: int) -> list[Message]:
        """``epoch`` is on disk; a sink releases the epoch's output, returned here."""
        self.epoch = epoch
        return self.release() if self.is_sink else []

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from a state that :meth:`state` was part of (the stage's checkpoint)."""
        self.epoch = self.restored_from = state["epoch"]
        self.released = list(state["released"])
        self.released_base = state["released_base"]

    # -- the transactional sink ----------------------------------------------------------------
    def hold_output(self, out: list[Message]) -> None:
        """Sink: output of the epoch in progress (output positions count events: expanded)."""
        self.pending.extend(expand(out))

    def release(self) -> list[Message]:
        """Sink: release the pending output (its epoch is on disk, or the stream ended)."""
        out, self.pending = self.pending, []
        self.released.extend(out)
        return out

    def acknowledge(self, pos: int) -> None:
        """The reader has every released output position before ``pos``: forget them."""
        if pos < self.released_base:
            raise ValueError(f"step {self.step!r}: output position {pos} was acknowledged "
                             f"already (released from {self.released_base})")
        drop = pos - self.released_base
        if drop:
            del self.released[:drop]
            self.released_base = pos
