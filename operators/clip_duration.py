"""``clip_duration(limit)``: cut every lifetime to at most ``limit`` ticks (a span operator).

``[s, e)`` becomes ``[s, min(e, s + limit))``. A retraction passes only where it changes the
clipped end; CTIs pass unchanged (a clipped end never moves before the input's sync time).

    >>> from operators.events import Insert, Retract, MAX_TIME
    >>> ClipDuration(10).process([Insert("a", 0, MAX_TIME, None),
    ...                           Retract("a", 0, MAX_TIME, 4, None)])
    [Insert(id='a', start=0, end=10, payload=None),
     Retract(id='a', start=0, end=10, new_end=4, payload=None)]
"""

from __future__ import annotations

import numpy as np

from .columns import Columns
from .events import MAX_TIME, Insert, Message, Retract, add_time
from .processor import Processor
from .ticks import Duration, to_duration


class ClipDuration(Processor):
    def __init__(self, limit: Duration, name: str | None = None) -> None:
        super().__init__(name)
        self.limit = to_duration(limit, "clip_duration", "limit", positive=True)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        end = min(msg.end, add_time(msg.start, self.limit))
        return [Insert(msg.id, msg.start, end, msg.payload)]

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """Every end at once, ``min(e, s + limit)``, when no ``s + limit`` passes ∞ (else
        event by event, where it is clamped); points stay as they are."""
        if msg.points or not len(msg):
            return [msg] if len(msg) else []  # type: ignore[list-item]  # a Columns stands for its inserts
        if int(msg.starts.max()) > MAX_TIME - self.limit:
            return super().on_columns(msg, port)
        ends = np.minimum(msg.ends, msg.starts + self.limit)
        return [msg.with_lifetimes(msg.starts, ends)]  # type: ignore[list-item]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        cap = add_time(msg.start, self.limit)
        old, new = min(msg.end, cap), min(msg.new_end, cap)
        if old == new:
            return []
        return [Retract(msg.id, msg.start, old, new, msg.payload)]
