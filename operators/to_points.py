"""``to_points()``: turn every event into a point event at its start (a span operator).

``[s, e)`` becomes ``[s, s + 1)``. Changing an event's end does not change its point, so only a
full retraction passes (it deletes the point); CTIs pass unchanged.

    >>> from operators.events import Insert, Retract, MAX_TIME
    >>> ToPoints().process([Insert("a", 4, MAX_TIME, None), Retract("a", 4, MAX_TIME, 9, None)])
    [Insert(id='a', start=4, end=5, payload=None)]
"""

from __future__ import annotations

from .columns import Columns
from .events import Insert, Message, Retract
from .processor import Processor


class ToPoints(Processor):
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        return [Insert(msg.id, msg.start, msg.start + 1, msg.payload)]

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """The batch's events as points: only the end column goes."""
        if not len(msg):
            return []
        # (the ignore: a Columns stands for its inserts)
        return [msg if msg.points else msg.with_lifetimes(msg.starts, None)]  # type: ignore[list-item]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if msg.new_end == msg.start:
            return [Retract(msg.id, msg.start, msg.start + 1, msg.start, msg.payload)]
        return []
