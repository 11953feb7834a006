"""``where(pred)``: keep the events whose payload satisfies ``pred`` (a span operator).

Lifetimes are kept; a retraction follows its insert (``pred`` must be deterministic, so it gives
the same answer for the retraction's payload); CTIs pass unchanged. ``Where(pred, vectorized=True)``
takes a function of a batch's payload columns returning a boolean mask instead
(:mod:`operators.vectorized`).

    >>> from operators.events import Insert, Cti
    >>> Where(lambda p: p > 1).process([Insert(1, 0, 5, 1), Insert(2, 1, 3, 2), Cti(4)])
    [Insert(id=2, start=1, end=3, payload=2), Cti(time=4)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .columns import Columns, apply_columns
from .events import Insert, KeyCtis, Message, Retract
from .expr import truthy
from .processor import Processor
from .vectorized import Vectorized


class Where(Processor):
    """On a :class:`~operators.columns.Columns` batch, ``pred`` runs once on the payload
    columns where that is exact (see :mod:`operators.expr`), else per event. A
    :class:`~operators.vectorized.Vectorized` ``pred`` (or ``vectorized=True``) runs once on
    every batch, and on a single event as a one-row batch."""

    def __init__(self, pred: Callable[[Any], bool], name: str | None = None,
                 vectorized: bool = False) -> None:
        super().__init__(name)
        self.pred = Vectorized(pred, mask=True, step=name) if vectorized else pred

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        if type(self.pred) is Vectorized:
            keep = self.pred.columns(msg.payload, len(msg))
            return [] if not keep.any() else [msg] if keep.all() else [msg.take(keep)]  # type: ignore[list-item]
        mask = apply_columns(self.pred, msg)
        if isinstance(mask, np.ndarray):
            mask = truthy(mask)
            return [msg.take(mask)] if mask.any() else []  # type: ignore[list-item]  # a Columns stands for its inserts
        return super().on_columns(msg, port)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        return [msg] if self.pred(msg.payload) else []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        return [msg] if self.pred(msg.payload) else []

    def on_key_ctis(self, msg: KeyCtis, port: int) -> list[Message]:
        return [msg]  # type: ignore[list-item]  # the events keep their payloads, so their keys
