"""``shift(delta)``: move every lifetime by ``delta`` ticks (a span operator).

``[s, e)`` becomes ``[s + delta, e + delta)`` (∞ stays ∞); retractions move with their event and
``Cti(c)`` becomes ``Cti(c + delta)``. It is ``alter_lifetime(start=lambda s: s + delta)``,
whose end follows the start and whose CTI needs no holding back.

    >>> from operators.events import Insert, Cti
    >>> Shift(10).process([Insert("a", 0, 5, None), Cti(3)])
    [Insert(id='a', start=10, end=15, payload=None), Cti(time=13)]

At the ends of the time axis (see :mod:`operators.alter_lifetime`): a finite end moved past it
is cut to its last finite instant ``MAX_TIME - 1``; an event whose start leaves it has no
output and goes to the dead letters with the reason. The query goes on.

    >>> from operators.events import MAX_TIME
    >>> op = Shift(10)
    >>> op.process([Insert("a", MAX_TIME - 20, MAX_TIME - 5, None)])
    [Insert(id='a', start=9223372036854775797, end=9223372036854775806, payload=None)]
    >>> op.process([Insert("b", MAX_TIME - 5, MAX_TIME - 2, None)])
    []
    >>> op.dead_letters[0].reason
    'shift(10) moves the start 9223372036854775802 to 9223372036854775812: at or past the \
end of the time axis [MIN_TIME, MAX_TIME - 1); the event has no output'
"""

from __future__ import annotations

import numpy as np

from .alter_lifetime import SAFE, AlterLifetime
from .ticks import Duration, to_duration


class Shift(AlterLifetime):
    def __init__(self, delta: Duration, name: str | None = None) -> None:
        ticks: int = to_duration(delta, "shift", "delta")
        super().__init__(name=name)
        self.delta = ticks
        self.what = f"shift({ticks})"

    def map_start(self, s: int) -> int:
        return s + self.delta

    def map_starts(self, starts: np.ndarray) -> np.ndarray | None:
        d = self.delta
        return starts + d if -SAFE < d < SAFE else None  # (starts lie within ±2**61)
