"""The late stream (``Stream.late()``): the events a producer dropped or adjusted because they
arrived behind its CTI, as events of their own (:class:`LateOut` markers in the producer's
output, :func:`late_markers` to make them, :class:`LateStream` the step that passes them on).
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import LateEvent
from .events import MAX_TIME, MIN_TIME, Insert, Message, Retract
from .processor import Processor

__all__ = ["LateOut", "LateStream", "late_markers", "message_lifetime"]


class LateOut(tuple):
    """A late event on its way to the late stream (``Stream.late()``): a marker in a producer's
    output that :class:`topology.planning.routing.Router` sends, as the ``Insert`` it holds, only on
    the out-edges of the late stream (and never on the others). Only a producer whose step has a
    late stream (``late_stream = True``, set by the planner) emits them."""

    __slots__ = ()

    def __new__(cls, event: Insert) -> LateOut:
        return tuple.__new__(cls, (event,))

    @property
    def event(self) -> Insert:
        return self[0]


def late_markers(records: list[LateEvent], first: int,
                 lifetime: Callable[[LateEvent], tuple[int, int]]) -> list[Message]:
    """The late stream's events for ``records[first:]``: ``Insert(n, start, end, payload)``
    where ``n`` is the record's position among its producer's late records (so ids are
    unique, and the same after a restore), ``[start, end)`` the original lifetime and the
    payload ``{"source", "policy", "reason", "payload"}`` (``policy``: ``"dropped"`` or
    ``"adjusted"``; ``payload``: the row, or the event's payload)."""
    out: list[Message] = []
    for n in range(first, len(records)):
        rec = records[n]
        start, end = lifetime(rec)
        item = rec.item
        payload = item.payload if isinstance(item, (Insert, Retract)) else item
        out.append(LateOut(Insert(n, start, end, {  # type: ignore[arg-type]
            "source": rec.where, "policy": rec.action, "reason": rec.reason,
            "payload": payload})))
    return out


class LateStream(Processor):
    """The step of ``Stream.late()``: the late events its producer sends on this edge alone,
    passed on unchanged. Late events lie behind their producer's CTI, anywhere in time, so
    the late stream promises nothing until its producer ends: its only CTI is at the end of
    input, past every late event's end (its start + 1 for one that ends at ∞)::

        source    a: [5 ─ 6)   Cti(8)   b: [2 ─ 3) (late: dropped)   c: [9 ─ 10)   end
        late()                          0: [2 ─ 3) {policy: dropped, ...}          Cti(3)
    """

    _state_fields = ("horizon",)

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.horizon = MIN_TIME

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        end = msg.end if msg.end < MAX_TIME else msg.start + 1
        self.horizon = max(self.horizon, end)
        return [msg]

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        raise ValueError("a late stream holds inserts only")

    def on_cti(self, time: int, port: int) -> list[Message]:
        return []  # (none come: the router sends only late events on this edge)

    def finish(self) -> list[Message]:
        return self.emit_cti(self.horizon) if self.horizon > MIN_TIME else []


def message_lifetime(rec: LateEvent) -> tuple[int, int]:
    """The lifetime of a late record whose item is a message (an operator's late event)."""
    msg = rec.item
    return msg.start, msg.end
