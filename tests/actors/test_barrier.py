"""actors/barrier.py without Ray: alignment across inputs, held calls released in order, the
epoch write before the sink's release, and a restore from the written state."""

from __future__ import annotations

from typing import Any

import pytest

from actors import checkpoint as ck
from actors.barrier import Barriers
from actors.stage_config import StageCheckpoint
from operators.events import Cti, Insert


class Stage:
    """Records what the barrier part lets through, in order; at each alignment it writes a
    state as the shell does (the part's own state plus the stage's)."""

    def __init__(self, n_in: int, ckpt: StageCheckpoint | None, write: bool = True) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.write = write
        self.b = Barriers("window#2", n_in, ckpt, push=self.push, end=self.end,
                          aligned=self.aligned)

    def push(self, port: int, blob: Any) -> None:
        self.log.append(("push", port, blob))

    def end(self, port: int) -> None:
        self.log.append(("end", port))

    def aligned(self, epoch: int) -> None:
        self.log.append(("aligned", epoch))
        if self.write:
            self.b.write(epoch, {"epoch": epoch, "proc": len(self.log), **self.b.state()})
            self.released = self.b.committed(epoch)


def _ckpt(tmp_path: Any, sink: bool = False) -> StageCheckpoint:
    return StageCheckpoint(str(tmp_path), "q", sink)


def test_a_barrier_waits_for_every_input_and_holds_the_early_inputs_calls(tmp_path):
    s = Stage(3, _ckpt(tmp_path), write=False)
    s.b.deliver(0, "push", "a0")
    s.b.deliver(0, "barrier", 1)        # input 0 is at epoch 1: its later calls wait
    s.b.deliver(0, "push", "a1")
    s.b.deliver(1, "push", "b0")        # input 1 is not blocked: it goes through
    s.b.deliver(1, "barrier", 1)
    s.b.deliver(1, "push", "b1")
    s.b.deliver(0, "end", None)
    assert s.log == [("push", 0, "a0"), ("push", 1, "b0")]
    assert s.b.blocked == {0, 1} and len(s.b.queued) == 3
    s.b.deliver(2, "push", "c0")
    s.b.deliver(2, "barrier", 1)        # the last input: aligned, then the held calls
    assert s.log == [("push", 0, "a0"), ("push", 1, "b0"), ("push", 2, "c0"),
                     ("aligned", 1),
                     ("push", 0, "a1"), ("push", 1, "b1"), ("end", 0)]
    assert not s.b.blocked and not s.b.queued


def test_held_calls_that_reach_the_next_barrier_are_held_again_in_order(tmp_path):
    s = Stage(2, _ckpt(tmp_path), write=False)
    for call in [(0, "barrier", 1), (0, "push", "x1"), (0, "barrier", 2), (0, "push", "x2"),
                 (1, "push", "y0")]:
        s.b.deliver(*call)
    assert s.log == [("push", 1, "y0")]
    s.b.deliver(1, "barrier", 1)  # epoch 1 aligned; replaying input 0 blocks it at epoch 2
    assert s.log[1:] == [("aligned", 1), ("push", 0, "x1")]
    assert s.b.blocked == {0} and list(s.b.queued) == [(0, "push", "x2")]
    s.b.deliver(1, "push", "y1")
    s.b.deliver(1, "barrier", 2)
    assert s.log[3:] == [("push", 1, "y1"), ("aligned", 2), ("push", 0, "x2")]


def test_one_input_aligns_at_once_and_barriers_are_ignored_without_checkpoints(tmp_path):
    s = Stage(1, _ckpt(tmp_path), write=False)
    s.b.deliver(0, "barrier", 1)
    s.b.deliver(0, "push", "p")
    assert s.log == [("aligned", 1), ("push", 0, "p")]
    off = Stage(2, None, write=False)
    off.b.deliver(0, "barrier", 1)
    off.b.deliver(0, "push", "p")  # not held: no checkpoints, no alignment
    assert off.log == [("push", 0, "p")] and not off.b.blocked


def test_the_sink_releases_an_epochs_output_only_after_writing_it(tmp_path):
    s = Stage(1, _ckpt(tmp_path, sink=True))
    s.b.hold_output([Insert("a", 1, 2, "x"), Cti(2)])
    assert s.b.released == [] and s.b.pending == [Insert("a", 1, 2, "x"), Cti(2)]
    s.b.deliver(0, "barrier", 1)
    saved = ck.load(ck.stage_path(str(tmp_path), "q", 1, "window#2"))
    # the file holds the output as pending (released in the state), written before release
    assert saved["released"] == [Insert("a", 1, 2, "x"), Cti(2)]
    assert s.released == [Insert("a", 1, 2, "x"), Cti(2)] == s.b.released
    assert s.b.pending == [] and s.b.epoch == 1
    s.b.hold_output([Insert("b", 3, 4, "y")])
    s.b.acknowledge(2)  # the reader has both: forgotten
    assert s.b.released == [] and s.b.released_base == 2
    with pytest.raises(ValueError, match="position 1 was acknowledged already"):
        s.b.acknowledge(1)


def test_a_failed_write_releases_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    s = Stage(1, StageCheckpoint(str(blocker), "q", sink=True))
    s.b.hold_output([Insert("a", 1, 2, "x")])
    with pytest.raises(OSError):
        s.b.deliver(0, "barrier", 1)
    assert s.b.released == [] and s.b.pending == [Insert("a", 1, 2, "x")] and s.b.epoch == 0


def test_a_column_batch_counts_as_its_events_in_output_positions(tmp_path):
    import numpy as np

    from operators.columns import Columns

    cols = Columns(np.arange(3), np.arange(3), np.arange(3) + 1, np.array([7, 8, 9]))
    s = Stage(1, _ckpt(tmp_path, sink=True))
    s.b.hold_output([cols])
    assert len(s.b.pending) == 3


def test_a_restored_sink_resumes_its_epoch_and_unacknowledged_output(tmp_path):
    s = Stage(1, _ckpt(tmp_path, sink=True))
    s.b.hold_output([Insert("a", 1, 2, "x")])
    s.b.deliver(0, "barrier", 1)          # released, not acknowledged
    s.b.hold_output([Insert("b", 3, 4, "y")])
    s.b.deliver(0, "barrier", 2)
    s.b.acknowledge(1)
    s.b.hold_output([Insert("c", 5, 6, "z")])  # pending when the stage dies: never released
    state = ck.load(ck.stage_path(str(tmp_path), "q", 2, "window#2"))
    again = Stage(1, _ckpt(tmp_path, sink=True))
    again.b.restore(state)
    assert (again.b.epoch, again.b.restored_from) == (2, 2)
    # what epoch 2 held: released from position 0 on (the acknowledgement came after it)
    assert again.b.released == [Insert("a", 1, 2, "x"), Insert("b", 3, 4, "y")]
    assert again.b.released_base == 0 and again.b.pending == []
    again.b.acknowledge(1)
    assert again.b.released == [Insert("b", 3, 4, "y")]
    again.b.deliver(0, "barrier", 3)      # carries on at the next epoch
    assert again.b.epoch == 3
