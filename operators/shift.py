"""``shift(delta)``: move every lifetime by ``delta`` ticks (a span operator).

``[s, e)`` becomes ``[s + delta, e + delta)`` (∞ stays ∞); retractions move with their event and
``Cti(c)`` becomes ``Cti(c + delta)``.

    >>> from operators.events import Insert, Cti
    >>> Shift(10).process([Insert("a", 0, 5, None), Cti(3)])
    [Insert(id='a', start=10, end=15, payload=None), Cti(time=13)]
"""

from __future__ import annotations

from .base import Processor
from .events import Insert, Message, Retract, add_time


class Shift(Processor):
    def __init__(self, delta: int, name: str | None = None) -> None:
        super().__init__(name)
        if isinstance(delta, bool) or not isinstance(delta, int):
            raise TypeError(f"shift: delta must be an int number of ticks, got {delta!r}")
        self.delta = delta

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        d = self.delta
        return [Insert(msg.id, add_time(msg.start, d), add_time(msg.end, d), msg.payload)]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        d = self.delta
        return [Retract(msg.id, add_time(msg.start, d), add_time(msg.end, d),
                        add_time(msg.new_end, d), msg.payload)]

    def on_cti(self, time: int, port: int) -> list[Message]:
        return self.emit_cti(add_time(time, self.delta))
