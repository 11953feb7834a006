"""``select(fn)``: replace each payload by ``fn(payload)`` (a span operator).

Lifetimes and ids are kept; ``fn`` is applied again to a retraction's payload, so it must be
deterministic; CTIs pass unchanged. ``Select(fn, vectorized=True)`` takes a function of a
batch's payload columns instead (:mod:`operators.vectorized`).

    >>> from operators.events import Insert
    >>> Select(lambda p: p * 10).process([Insert(1, 0, 5, 2)])
    [Insert(id=1, start=0, end=5, payload=20)]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .columns import Columns, apply_columns
from .events import Insert, KeyCtis, Message, Retract
from .processor import Processor
from .vectorized import Vectorized


class Select(Processor):
    """On a :class:`~operators.columns.Columns` batch, ``fn`` runs once on the payload
    columns where that is exact (see :mod:`operators.expr`), else per event. A
    :class:`~operators.vectorized.Vectorized` ``fn`` (or ``vectorized=True``) runs once on
    every batch, and on a single event as a one-row batch."""

    def __init__(self, fn: Callable[[Any], Any], name: str | None = None,
                 vectorized: bool = False) -> None:
        super().__init__(name)
        self.fn = Vectorized(fn, step=name) if vectorized else fn

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        if type(self.fn) is Vectorized:
            return [msg.with_payload(self.fn.columns(msg.payload, len(msg)))]  # type: ignore[list-item]
        payload = apply_columns(self.fn, msg)
        if payload is not None:
            return [msg.with_payload(payload)]  # type: ignore[list-item]  # a Columns stands for its inserts
        return super().on_columns(msg, port)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        return [Insert(msg.id, msg.start, msg.end, self.fn(msg.payload))]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        return [Retract(msg.id, msg.start, msg.end, msg.new_end, self.fn(msg.payload))]

    def on_key_ctis(self, msg: KeyCtis, port: int) -> list[Message]:
        # the keys are the source's: the planner sends them here only on the way to a step
        # whose key, read through this select, is the source's (topology.planning.key_progress)
        return [msg]  # type: ignore[list-item]  # they travel beside the messages
