"""``a.not_followed_by(b, within=d, on=(ka, kb))``: absence — each event of ``a`` that no
matching event of ``b`` follows within ``d``, decided by the CTI (docs/patterns.md#absence).

An event ``x`` of input 0 (``a``) is *followed* when input 1 (``b``) holds an event ``y`` with
``kb(y) == ka(x)`` (any ``y`` without ``on``) that starts in the open interval
``(start(x), start(x) + d)``. Only starts and payloads count: a lifetime corrected later
changes nothing, a deleted event (retracted to ``new_end == start``) is no event. Each ``x``
not followed is output once, final, as the point ``[start(x) + d, start(x) + d + 1)`` with its
payload, as soon as both inputs' CTIs have reached ``start(x) + d``: from then on no ``y``
can arrive in the interval, nor can ``x`` or a ``y`` in it be deleted. So a key that goes
silent still gets its answer when time passes (the CTI moves, driven by any input)::

    a (payments)   p1@0        p2@4             p3@9
    b (confirms)          c1@2                          c3@13        d = 5
    CTIs                                   Cti(10)                        Cti(20)
    output                      p2 @ [9, 10)            (p1: c1 in (0, 5); p3: c3 in (9, 14))

    >>> from operators.events import Insert, Cti
    >>> op = NotFollowedBy(5)
    >>> op.process([Insert("p1", 0, 1, "p1"), Insert("p2", 4, 5, "p2"),
    ...             Insert("p3", 9, 10, "p3")], 0) + op.process([Insert("c1", 2, 3, "c1")], 1)
    []
    >>> op.process([Cti(10)], 0) + op.process([Cti(10)], 1)
    [Insert(id=FreshId(0, 0), start=9, end=10, payload='p2'), Cti(time=10)]
    >>> op.process([Insert("c3", 13, 14, "c3"), Cti(20)], 1) + op.process([Cti(20)], 0)
    [Cti(time=20)]

**The output CTI** is the smaller input CTI: every ``x`` with ``start(x) + d`` up to it is
decided and output before it. At the end of input every pending ``x`` is decided.

**State**: the events of ``a`` not decided yet (one heap by ``start + d``), and per key the
starts of ``b`` that an undecided or future ``x`` may still need: a ``y`` starting at or before
both the earliest pending ``x`` and ``a``'s CTI can follow no ``x`` any more, and is freed.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Callable, Hashable
from typing import Any

from .events import MAX_TIME, MIN_TIME, FreshId, Insert, Message, Retract
from .group_apply import group_key
from .processor import Processor
from .ticks import to_duration
from .udm import field_getter


def _any(payload: Any) -> int:
    """The key without ``on``: every ``b`` event may follow every ``a`` event."""
    return 0


class NotFollowedBy(Processor):
    """Input 0's events that no matching input 1 event follows within ``within`` (see the
    module docstring). ``on=(ka, kb)``: field names or functions of the payloads."""

    _state_fields = ("pending", "heap", "bs", "b_ids", "b_heap", "seq", "minted")

    def __init__(self, within: Any, on: tuple[Any, Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(name or "not_followed_by")
        self.n_inputs = 2
        self.within = to_duration(within, "not_followed_by", "within", positive=True)
        if on is not None and (not isinstance(on, (tuple, list)) or len(on) != 2):
            raise ValueError(f"not_followed_by(on={on!r}): give a pair (a_key, b_key) of field "
                             f"names or functions of the payloads, or None (any b event)")
        self.on = on
        self.ka: Callable[[Any], Any] = _any if on is None else field_getter(on[0])
        self.kb: Callable[[Any], Any] = _any if on is None else field_getter(on[1])
        #: a's undecided events: id -> (start, payload, key)
        self.pending: dict[Hashable, tuple[int, Any, Hashable]] = {}
        #: (start + within, start, n, id) of each pending event (stale entries skipped; ``n``
        #: orders equal starts: ids need not be comparable)
        self.heap: list[tuple[int, int, int, Any]] = []
        #: key -> the sorted starts of b's events that may still follow an a event
        self.bs: dict[Hashable, list[int]] = {}
        #: b's id -> (start, key) of the events in ``bs``
        self.b_ids: dict[Hashable, tuple[int, Hashable]] = {}
        #: (start, n, id) of b's events, to free them oldest first (stale entries skipped)
        self.b_heap: list[tuple[int, int, Hashable]] = []
        self.seq = 0
        self.minted = 0

    # -- input ----------------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if port == 0:
            key = group_key(self.ka(msg.payload))
            self.pending[msg.id] = (msg.start, msg.payload, key)
            heapq.heappush(self.heap, (self._due(msg.start), msg.start, self.seq, msg.id))
            self.seq += 1
        else:
            key = group_key(self.kb(msg.payload))
            self.b_ids[msg.id] = (msg.start, key)
            insort(self.bs.setdefault(key, []), msg.start)
            heapq.heappush(self.b_heap, (msg.start, self.seq, msg.id))
            self.seq += 1
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if msg.new_end != msg.start:
            return []  # a lifetime corrected: only the start counts
        if port == 0:
            self.pending.pop(msg.id, None)  # (its heap entry is skipped when it comes up)
            return []
        entry = self.b_ids.pop(msg.id, None)
        if entry is not None:
            self._drop_b(*entry)
        return []

    def _drop_b(self, start: int, key: Hashable) -> None:
        starts = self.bs[key]
        del starts[bisect_right(starts, start) - 1]
        if not starts:
            del self.bs[key]

    def on_cti(self, time: int, port: int) -> list[Message]:
        return self._decide(self.in_cti)

    def on_end_input(self, port: int) -> list[Message]:
        return self._decide(self.in_cti)

    def finish(self) -> list[Message]:
        """End of input: nothing can follow any more; every pending event is decided."""
        return self._decide(MAX_TIME, cti=self.in_cti)

    # -- deciding -------------------------------------------------------------------------------
    def _due(self, start: int) -> int:
        return min(start + self.within, MAX_TIME)

    def _decide(self, time: int, cti: int | None = None) -> list[Message]:
        """Output the pending events due by ``time`` that nothing followed, then the CTI."""
        out: list[Message] = []
        heap, pending, bs = self.heap, self.pending, self.bs
        while heap and heap[0][0] <= time:
            due, start, _, aid = heapq.heappop(heap)
            entry = pending.get(aid)
            if entry is None or entry[0] != start:
                continue  # deleted (or its id reused by a later event)
            del pending[aid]
            _, payload, key = entry
            starts = bs.get(key, ())
            i = bisect_right(starts, start)  # the first b start after x's
            if i < len(starts) and starts[i] < due:
                continue  # followed
            out.append(Insert(FreshId(self.minted, 0), due, min(due + 1, MAX_TIME), payload))
            self.minted += 1
        self._free()
        out.extend(self.emit_cti(time if cti is None else cti))
        return out

    def _free(self) -> None:
        """Forget b's events that can follow no pending or future a event: those starting at
        or before both the earliest pending a event and a's CTI (a later a event starts at
        its CTI or after)."""
        heap, pending = self.heap, self.pending
        while heap and (pending.get(heap[0][3]) or (None,))[0] != heap[0][1]:
            heapq.heappop(heap)  # (deleted, or decided through another entry)
        floor = (self.in_ctis or [MIN_TIME])[0]
        if heap:
            floor = min(floor, heap[0][1])  # (due order is start order)
        b_heap, b_ids = self.b_heap, self.b_ids
        while b_heap and b_heap[0][0] <= floor:
            start, _, bid = heapq.heappop(b_heap)
            entry = b_ids.get(bid)
            if entry is not None and entry[0] == start:
                del b_ids[bid]
                self._drop_b(start, entry[1])

    # -- what it says of itself -------------------------------------------------------------------
    def key_functions(self) -> tuple[Callable[[Any], Any], ...] | None:
        return None if self.on is None else (self.ka, self.kb)

    def state_size(self) -> int:
        """Pending a events and b events held."""
        return len(self.pending) + len(self.b_ids)

    def _check(self) -> None:
        held = sorted(s for starts in self.bs.values() for s in starts)
        assert held == sorted(s for s, _ in self.b_ids.values()), "bs and b_ids disagree"
        live = {(s, aid) for aid, (s, _, _) in self.pending.items()}
        assert live <= {(s, aid) for _, s, _, aid in self.heap}, "a pending event has no due"
        held_b = {(s, bid) for bid, (s, _) in self.b_ids.items()}
        assert held_b <= {(s, bid) for s, _, bid in self.b_heap}, "a b event cannot be freed"

