"""``where(pred)``: keep the events whose payload satisfies ``pred`` (a span operator).

Lifetimes are kept; a retraction follows its insert (``pred`` must be deterministic, so it gives
the same answer for the retraction's payload); CTIs pass unchanged.

    >>> from operators.events import Insert, Cti
    >>> Where(lambda p: p > 1).process([Insert(1, 0, 5, 1), Insert(2, 1, 3, 2), Cti(4)])
    [Insert(id=2, start=1, end=3, payload=2), Cti(time=4)]
"""

from __future__ import annotations

from typing import Any, Callable

from .base import Processor
from .columns import Columns, apply_columns
from .events import Insert, Message, Retract


class Where(Processor):
    """On a :class:`~operators.columns.Columns` batch, ``pred`` is called once on the payload
    columns when it works column-wise (see :func:`~operators.columns.apply_columns`), else
    per event."""

    def __init__(self, pred: Callable[[Any], bool], name: str | None = None) -> None:
        super().__init__(name)
        self.pred = pred
        #: False once ``pred`` proved not to work on columns (then it runs per event)
        self.vectorised = True

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        if self.vectorised:
            mask = apply_columns(self.pred, msg)
            if mask is not None and mask.dtype == bool:
                return [msg.take(mask)] if mask.any() else []
            self.vectorised = False
        return super().on_columns(msg, port)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        return [msg] if self.pred(msg.payload) else []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        return [msg] if self.pred(msg.payload) else []
