"""The operator shell, driven in-process, ends one input of several: the processor's
``end_input`` runs at once (its output CTI goes on), or, while a checkpoint barrier holds that
input, after the alignment, in the order the calls came (actors/barrier.py)."""

from __future__ import annotations

import pickle
from typing import Any

from actors import checkpoint as ck
from actors.shell import OperatorShell
from actors.stage_config import StageCheckpoint, StageConfig
from actors.wire import decode, encode
from operators.events import Cti, Message
from operators.union import Union


def _union_shell(**config: Any) -> tuple[OperatorShell, int]:
    shell = OperatorShell()
    shell.configure(StageConfig(step="union#2", describe="union", factory=lambda: Union(2),
                                n_in=2, **config))
    return shell, shell.open_pull()


def _out(shell: OperatorShell, pull: int) -> tuple[list[Message], bool]:
    blob, finished, error = shell.fetch(pull, timeout_s=0)
    assert error is None
    return decode(blob), finished


def test_the_shell_ends_one_input_and_follows_the_other():
    #   input 0   Cti(3)  end
    #   input 1   Cti(5)       Cti(9)  end
    #   output    Cti(3)  Cti(5)  Cti(9)  (finished)
    shell, pull = _union_shell()
    shell.push(0, encode([Cti(3)]))
    shell.push(1, encode([Cti(5)]))
    assert _out(shell, pull) == ([Cti(3)], False)
    shell.end(0)
    assert _out(shell, pull) == ([Cti(5)], False)
    assert shell.stats()["cti"] == 5 and not shell.stats()["finished"]
    shell.push(1, encode([Cti(9)]))
    assert _out(shell, pull) == ([Cti(9)], False)
    shell.end(1)
    assert _out(shell, pull) == ([], True)


def test_an_end_behind_a_barrier_waits_for_the_alignment(tmp_path):
    ckpt = StageCheckpoint(str(tmp_path), "q", sink=False)
    shell, pull = _union_shell(checkpoint=ckpt)
    shell.push(0, encode([Cti(3)]))
    shell.push(1, encode([Cti(5)]))
    assert _out(shell, pull)[0] == [Cti(3)]
    shell.barrier(0, 1)
    shell.end(0)  # held: input 0 is at the barrier of epoch 1
    assert _out(shell, pull)[0] == []
    shell.barrier(1, 1)  # aligned: the checkpoint, then the held end
    assert _out(shell, pull)[0] == [Cti(5)]
    state = ck.load(ck.stage_path(str(tmp_path), "q", 1, "union#2"))
    assert state["proc"]["in_ended"] is None  # written before the end, as it came after
    again = Union(2)
    again.restore(pickle.loads(pickle.dumps(state["proc"])))
    assert again.in_ctis == [3, 5]
