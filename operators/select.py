"""``select(fn)``: replace each payload by ``fn(payload)`` (a span operator).

Lifetimes and ids are kept; ``fn`` is applied again to a retraction's payload, so it must be
deterministic; CTIs pass unchanged.

    >>> from operators.events import Insert
    >>> Select(lambda p: p * 10).process([Insert(1, 0, 5, 2)])
    [Insert(id=1, start=0, end=5, payload=20)]
"""

from __future__ import annotations

from typing import Any, Callable

from .base import Processor
from .columns import Columns, apply_columns
from .events import Insert, Message, Retract


class Select(Processor):
    """On a :class:`~operators.columns.Columns` batch, ``fn`` is called once on the payload
    columns when it works column-wise (see :func:`~operators.columns.apply_columns`), else
    per event."""

    def __init__(self, fn: Callable[[Any], Any], name: str | None = None) -> None:
        super().__init__(name)
        self.fn = fn
        #: False once ``fn`` proved not to work on columns (then it runs per event)
        self.vectorised = True

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        if self.vectorised:
            payload = apply_columns(self.fn, msg)
            if payload is not None:
                return [msg.with_payload(payload)]
            self.vectorised = False
        return super().on_columns(msg, port)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        return [Insert(msg.id, msg.start, msg.end, self.fn(msg.payload))]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        return [Retract(msg.id, msg.start, msg.end, msg.new_end, self.fn(msg.payload))]
