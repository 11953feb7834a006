"""``union(*others)``: merge N streams into one (an N-input operator).

The output CHT is the concatenation of the input CHTs: every insert and retraction passes
through unchanged except its id, which becomes the pair ``(port, id)`` so that ids stay unique
across inputs (two inputs may both use id ``"a"``). The output CTI is the minimum of the
inputs' CTIs: an input whose CTI lags may still send events that far back::

    input 0   a: [1 ── 4)   Cti(5)
    input 1   a: [2 ─── 6)            Cti(3)
    output    (0, 'a'): [1 ── 4)  (1, 'a'): [2 ─── 6)  Cti(3)

    >>> from operators.events import Insert, Cti
    >>> u = Union(2)
    >>> u.process([Insert("a", 1, 4, "x"), Cti(5)], 0)
    [Insert(id=(0, 'a'), start=1, end=4, payload='x')]
    >>> u.process([Insert("a", 2, 6, "y"), Cti(3)], 1)
    [Insert(id=(1, 'a'), start=2, end=6, payload='y'), Cti(time=3)]
    >>> u.finish()  # at the end of every input: no input holds the CTI back any more
    [Cti(time=5)]

Union holds no events: its only state is the CTI of each input. It is also the step that merges
the partitions of ``group_apply(..., partitions=N)`` into one stream again.
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import Processor
from .events import Insert, Message, Retract


class Union(Processor):
    """Merges ``n_inputs`` streams; output ids are ``(port, input id)``."""

    def __init__(self, n_inputs: int = 2, name: str | None = None) -> None:
        super().__init__(name)
        if isinstance(n_inputs, bool) or not isinstance(n_inputs, int) or n_inputs < 1:
            raise ValueError(f"union: n_inputs must be a positive int, got {n_inputs!r}")
        self.n_inputs = n_inputs

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        if not 0 <= port < self.n_inputs:
            raise ValueError(f"union {self.name!r} has inputs 0..{self.n_inputs - 1}, got a "
                             f"batch for input {port}; build it with Union(n_inputs={port + 1})")
        return super().process(batch, port)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        return [Insert((port, msg.id), msg.start, msg.end, msg.payload)]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        return [Retract((port, msg.id), msg.start, msg.end, msg.new_end, msg.payload)]

    def on_cti(self, time: int, port: int) -> list[Message]:
        return self.emit_cti(self.in_cti)

    def finish(self) -> list[Message]:
        """Every input has ended, so none can send anything more: the output CTI moves up to
        the furthest input's (as a finished source's watermark stops holding back a Flink
        operator), and what that CTI makes final downstream is not held back by an input
        that simply stopped earlier."""
        return self.emit_cti(max(self.in_ctis or [self.out_cti]))
