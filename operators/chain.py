"""``Chain``: several single-input operators run one after another as one operator.

The planner fuses adjacent operators into a chain (one actor instead of several), and
``group_apply`` runs a chain per key. The output of each stage is the next stage's input batch;
each stage checks its own input, so an event behind the chain's input CTI fails naming the
first stage.

    >>> from operators.where import Where
    >>> from operators.shift import Shift
    >>> from operators.events import Insert, Cti
    >>> Chain([Where(lambda p: p > 0), Shift(5)]).process([Insert(1, 0, 2, 1), Cti(1)])
    [Insert(id=1, start=5, end=7, payload=1), Cti(time=6)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .base import Processor
from .events import Message


class Chain(Processor):
    _parts = ("stages",)

    def __init__(self, stages: Sequence[Processor], name: str | None = None) -> None:
        super().__init__(name or " → ".join(s.name for s in stages))
        if not stages or any(s.n_inputs != 1 for s in stages):
            raise ValueError("Chain: needs one or more single-input operators")
        self.stages = list(stages)

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        msgs = list(batch)
        for stage in self.stages:
            if not msgs:
                break
            msgs = stage.process(msgs, 0)
        self.out_cti = self.stages[-1].out_cti
        return msgs

    def finish(self) -> list[Message]:
        """End of input: each stage flushes (a window records the failures of the windows it
        still holds), its output running through the later stages."""
        msgs: list[Message] = []
        for stage in self.stages:
            if msgs:
                msgs = stage.process(msgs, 0)
            msgs.extend(stage.finish())
        self.out_cti = self.stages[-1].out_cti
        return msgs

    def children(self) -> Iterable[Processor]:
        return self.stages

    def state_size(self) -> int:
        return sum(s.state_size() for s in self.stages)

    def _check(self) -> None:
        for stage in self.stages:
            stage._check()
