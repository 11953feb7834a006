"""``stream.import_ctis(leader, policy=)``: one stream's events with CTIs imported from another
(StreamInsight's ``AdvanceTimeImportSettings``), :class:`ImportCti`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from .advance_time import POLICIES
from .errors import LateEvent
from .events import MIN_TIME, Insert, Message, Retract, fmt_time
from .late_stream import late_markers, message_lifetime
from .processor import Processor

__all__ = ["ImportCti"]


class ImportCti(Processor):
    """``stream.import_ctis(leader, policy=)``: input 0's events with CTIs imported from input
    1 (StreamInsight's ``AdvanceTimeImportSettings``). The output CTI is the larger of the
    two inputs' CTIs; input 1's events are not output (only its CTIs are read).

    A stream that rarely changes (a reference table) sends CTIs rarely, and holds back every
    operator that waits for both inputs' CTIs (a join's output CTI is their minimum).
    Importing the CTIs of a fast stream lets it advance with that stream::

        leader   x x x Cti(10)  x x Cti(20)   x x x Cti(30)
        ref      r: [0 ──────────────────────────── ∞)
        import   r: [0 ── ∞)  Cti(10)       Cti(20)        Cti(30)

    An event of input 0 that arrives behind the imported CTI is *late* and goes through the
    late policy, as at a source: ``"drop"`` drops it, ``"adjust"`` moves its start up to the
    CTI when its end is after it (else drops it). A retraction whose sync time (the smaller
    of its two ends) is behind the CTI is dropped, or under ``"adjust"`` clipped to end no
    earlier than the CTI when the event still ends after it; one of a dropped event is
    dropped too. Lateness is a property of the message alone, so freeing the events whose
    end is behind the CTI changes nothing. Each
    is recorded in :attr:`late` (counted in the step's ``late`` stat, sent on ``.late()``).

    **An input that ends** (:meth:`~operators.processor.Processor.end_input`) changes nothing
    here: the output CTI is a maximum, which an input that stopped never holds back. When the
    leader ends, the CTI it reached stays imported (it was sent downstream: input 0's events
    behind it stay late) and the output CTI advances with input 0's own CTIs from then on;
    when input 0 ends, the leader's CTIs still advance the output.

    >>> from operators.events import Cti
    >>> imp = ImportCti()
    >>> imp.process([Insert("r", 0, 100, "ref")], 0)
    [Insert(id='r', start=0, end=100, payload='ref')]
    >>> imp.process([Insert(1, 10, 11, "x"), Cti(10)], 1)
    [Cti(time=10)]
    >>> imp.process([Insert("s", 4, 50, "late")], 0), [x.action for x in imp.late]
    ([], ['dropped'])
    """

    n_inputs = 2
    _state_fields = ("live", "dropped", "late")

    def __init__(self, policy: str = "drop", name: str | None = None) -> None:
        super().__init__(name)
        if policy not in POLICIES:
            raise ValueError(f"import_ctis(policy={policy!r}): policy must be 'drop' (late "
                             f"events are dropped) or 'adjust' (late intervals start at the "
                             f"imported CTI)")
        self.policy = policy
        #: id -> [start sent, end sent] of the input-0 events whose end may still change
        self.live: dict[Hashable, list[int]] = {}
        #: ids of input-0 events dropped as late (their retractions are dropped too)
        self.dropped: set[Hashable] = set()
        self.late: list[LateEvent] = []
        #: the planner sets this when the step has a late stream (``.late()``)
        self.late_stream = False
        self._swept = 0

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        first = len(self.late)
        out = super().process(batch, port)
        if self.late_stream and len(self.late) > first:
            out.extend(late_markers(self.late, first, message_lifetime))
        return out

    def _record(self, action: str, msg: Message, why: str, sent: Any = None) -> None:
        self.late.append(LateEvent(self.name, action, why, msg, sent))

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if port == 1:
            return []
        id, start, end, payload = msg
        cti = self.out_cti
        if start >= cti:
            self.live[id] = [start, end]
            return [msg]
        if self.policy == "adjust" and end > cti:
            sent = Insert(id, cti, end, payload)
            self.live[id] = [cti, end]
            self._record("adjusted", msg, f"start {fmt_time(start)} is behind the imported "
                         f"CTI {fmt_time(cti)}; moved to start at the CTI (policy 'adjust')",
                         sent)
            return [sent]
        self.dropped.add(id)
        why = (f"its end {fmt_time(end)} is not after the CTI either"
               if self.policy == "adjust" else "policy 'drop'")
        self._record("dropped", msg, f"start {fmt_time(start)} is behind the imported CTI "
                     f"{fmt_time(cti)}; {why}")
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if port == 1:
            return []
        id = msg.id
        cti = self.out_cti
        if id in self.dropped:
            if msg.new_end == msg.start:
                self.dropped.discard(id)
            self._record("dropped", msg, f"a retraction of {id!r}, whose insert was dropped "
                         f"as late (or which a late retraction emptied)")
            return []
        live = self.live.get(id)
        if live is not None and min(live[1], msg.new_end) >= cti:
            # (not late: the end this step sent, which a late retraction may have kept
            # short of the one the message names, and the new end are both past the CTI)
            return self._move(id, live[0], live[1], max(msg.new_end, live[0]), msg)
        if live is None:  # (freed: its end was behind the CTI, so is this change's)
            self._record("dropped", msg, f"a retraction of {id!r} behind the imported CTI "
                         f"{fmt_time(cti)}: the event's end is final (policy '{self.policy}')")
            return []
        s, e = live
        if self.policy == "adjust" and e > cti:
            sent = self._move(id, s, e, max(msg.new_end, s, cti), msg)
            if sent:
                self._record("adjusted", msg, f"a retraction of {id!r} to "
                             f"{fmt_time(msg.new_end)} is behind the imported CTI "
                             f"{fmt_time(cti)}; the event now ends at the CTI (policy "
                             f"'adjust')", sent[0])
                return sent
        self._record("dropped", msg, f"a retraction of {id!r} to {fmt_time(msg.new_end)} is "
                     f"behind the imported CTI {fmt_time(cti)}; the event keeps its end "
                     f"{fmt_time(e)} (policy '{self.policy}')")
        return []

    def on_columns(self, msg: Any, port: int) -> list[Message]:
        return [] if port == 1 else super().on_columns(msg, port)

    def _move(self, id: Hashable, s: int, e: int, target: int, msg: Retract) -> list[Message]:
        payload = msg.payload
        if target == e:
            return []
        if target == s:
            del self.live[id]
            if msg.new_end != msg.start:  # emptied by its moved start: over for good
                self.dropped.add(id)
        else:
            self.live[id][1] = target
        return [Retract(id, s, e, target, payload)]

    def on_cti(self, time: int, port: int) -> list[Message]:
        ctis = self.in_ctis or [MIN_TIME, MIN_TIME]
        out = self.emit_cti(max(ctis))
        if len(self.live) > 2 * self._swept + 64:  # free the events whose end is final
            cti = self.out_cti
            self.live = {k: v for k, v in self.live.items() if v[1] >= cti}
            self._swept = len(self.live)
        return out

    def state_size(self) -> int:
        return len(self.live) + len(self.dropped)

    def _check(self) -> None:
        for s, e in self.live.values():
            assert s < e
        assert not (set(self.live) & self.dropped)
