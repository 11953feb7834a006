"""``Chain``: several single-input operators run one after another as one operator.

The planner fuses adjacent operators into a chain (one actor instead of several), and
``group_apply`` runs a chain per key. A :class:`SourceChain` is a source with the stateless
operators after it fused in. The output of each stage is the next stage's input batch;
each stage checks its own input, so an event behind the chain's input CTI fails naming the
first stage.

    >>> from operators.where import Where
    >>> from operators.shift import Shift
    >>> from operators.events import Insert, Cti
    >>> Chain([Where(lambda p: p > 0), Shift(5)]).process([Insert(1, 0, 2, 1), Cti(1)])
    [Insert(id=1, start=5, end=7, payload=1), Cti(time=6)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .errors import DeadLetter, LateEvent
from .events import Message
from .processor import Processor


class Chain(Processor):
    _parts = ("stages",)

    def __init__(self, stages: Sequence[Processor], name: str | None = None) -> None:
        super().__init__(name or " → ".join(s.name for s in stages))
        if not stages or any(s.n_inputs != 1 for s in stages):
            raise ValueError("Chain: needs one or more single-input operators")
        self.stages = list(stages)

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        return self._through(list(batch), 0)

    def _through(self, msgs: list[Message], first: int) -> list[Message]:
        """``msgs`` run through the stages from ``first`` on."""
        for stage in self.stages[first:]:
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


class FusedChain(Chain):
    """A chain the planner made of a plan's steps, run as one stage (one actor): its records
    are all its steps' records, in data order (a window's failed windows, the dead letters of
    an alter_lifetime, the late events of a CTI import), as the steps' own stages would have
    reported them. (A group_apply's sub-query is a plain :class:`Chain`: group_apply takes
    the records of each step itself.)

    >>> from operators.alter_lifetime import AlterLifetime
    >>> from operators.where import Where
    >>> from operators.events import Insert, MAX_TIME
    >>> c = FusedChain([Where(bool), AlterLifetime(start=lambda s: MAX_TIME, name="later")])
    >>> c.process([Insert(1, 0, 2, 1)])
    []
    >>> [d.where for d in c.dead_letters]
    ['later']
    """

    @property
    def late(self) -> Sequence[LateEvent]:  # type: ignore[override]
        return [r for s in self.stages for r in s.late]

    @property
    def dead_letters(self) -> Sequence[DeadLetter]:  # type: ignore[override]
        return [r for s in self.stages for r in s.dead_letters]


class SourceChain(FusedChain):
    """A source (``stages[0]``) with the operators after it: the planner fuses stateless
    steps into their source's actor, so their input never crosses actors. The source takes
    its input as it comes (rows, a column batch, messages) and keeps its idle timer (the
    runtime's polls and clock go to it); its row accounting is the source's, its late events
    and dead letters those of every step (:class:`FusedChain`).

    >>> from operators.sources import RowsSource
    >>> from operators.where import Where
    >>> c = SourceChain([RowsSource("rows", start="t"), Where(lambda r: r["v"] > 1)])
    >>> c.process([{"t": 1, "v": 1}, {"t": 2, "v": 2}])
    [Insert(id=1, start=2, end=3, payload={'t': 2, 'v': 2})]
    """

    def __init__(self, stages: Sequence[Processor], name: str | None = None) -> None:
        super().__init__(stages, name)
        self.poll_every_s = self.stages[0].poll_every_s

    def process(self, batch: Iterable[Any], port: int = 0) -> list[Message]:
        return self._through(self.stages[0].process(batch, port), 1)

    def poll(self, now: float) -> list[Message]:
        return self._through(self.stages[0].poll(now), 1)

    def next_poll(self, now: float) -> float | None:
        return self.stages[0].next_poll(now)

    @property
    def clock(self) -> Callable[[], float] | None:
        return self.stages[0].clock

    @clock.setter
    def clock(self, clock: Callable[[], float] | None) -> None:
        self.stages[0].clock = clock

    @property
    def stats(self) -> dict[str, int] | None:  # type: ignore[override]
        return self.stages[0].stats
