"""``FusedDag``: a connected part of a plan run as one stage (``fuse="all"``, one actor).

The planner (:func:`topology.planning.planner._fuse_parts`) hands it the part as a plan of its own:
its stages as the unfused plan had them, and as inputs either the part's source (the part then is
a source stage, fed rows or messages as the source was) or one
:class:`~operators.sources.Passthrough` per input port of the part, fed from the stages
outside it. Inside, a :class:`~topology.planning.dag.DagProcessor` pushes each output batch straight
into the steps it feeds: no hop, no serialisation, one process's idle cost for all of them.

What the runtime reads of a stage it reads of the part as a whole: its late events and dead
letters are every step's, in plan order; a source part polls, keeps the clock and counts
rows as its source does. Its output keeps column batches as they are (the next stage, or the
driver, expands them if it must). A checkpoint holds every step's state (the DagProcessor's
``procs``).

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> p = Stream.from_events([], name="in").shift(2).plan()
    >>> dag = FusedDag(p, "all", source=True)
    >>> dag.process([Insert("a", 0, 5, 1), Cti(5)])
    [Insert(id='a', start=2, end=7, payload=1), Cti(time=7)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from operators.errors import DeadLetter, LateEvent
from operators.events import Message
from topology.planning.dag import DagProcessor

if TYPE_CHECKING:
    from topology.planning.plan import Plan


class FusedDag(DagProcessor):
    """The stages of ``plan`` in one processor; with ``source`` its one input is the plan's
    source (whose polls, clock and row accounting the part's are), else input ``i`` is the
    plan's ``i``-th source (a passthrough into one port of a step)."""

    def __init__(self, plan: Plan, name: str | None = None, source: bool = False) -> None:
        super().__init__(plan, name)
        self.expand_output = False
        #: the part's source processor (None: the part has no source)
        self.head = self.procs[plan.sources[0]] if source else None
        if self.head is not None:
            self.poll_every_s = self.head.poll_every_s

    def poll(self, now: float) -> list[Message]:
        if self.head is None:
            return []
        out: list[Message] = []
        res = self.head.poll(now)
        if res:
            self._forward(self.inputs[0], res, out)
        return out

    def next_poll(self, now: float) -> float | None:
        return None if self.head is None else self.head.next_poll(now)

    @property
    def clock(self) -> Callable[[], float] | None:
        return None if self.head is None else self.head.clock

    @clock.setter
    def clock(self, clock: Callable[[], float] | None) -> None:
        if self.head is not None:
            self.head.clock = clock

    @property
    def late(self) -> Sequence[LateEvent]:  # type: ignore[override]
        return [r for p in self.procs.values() for r in p.late]

    @property
    def dead_letters(self) -> Sequence[DeadLetter]:  # type: ignore[override]
        return [r for p in self.procs.values() for r in p.dead_letters]

    @property
    def stats(self) -> dict[str, int] | None:  # type: ignore[override]
        return None if self.head is None else self.head.stats
