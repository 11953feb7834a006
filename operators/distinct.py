"""``distinct(key=None)``: each distinct payload once at a time, over the maximal intervals its
lifetimes cover.

For each distinct payload (or ``key(payload)``), the output holds the maximal intervals of the
union of that payload's lifetimes: overlapping or touching lifetimes of equal payloads come out
as one event, so the output CHT is canonical (two inputs with the same union per payload give
the same output)::

    input     x [0 ──── 4)  x [3 ──── 7)  x [7 ─ 9)    x [12 ─ 14)
              y [1 ─── 5)                 y [8 ──── 13)
    output    x [0 ──────────────────────────── 9)     x [12 ─ 14)
              y [1 ─── 5)                 y [8 ──── 13)
    then Retract x [3, 7) → [3, 5): x [0 ─────── 5)  and  x [7 ─ 9) are two events again

    >>> from operators.events import Insert, Retract, Cti
    >>> from operators.cht import to_cht
    >>> d = Distinct()
    >>> out = d.process([Insert("a", 0, 4, "x"), Insert("b", 3, 7, "x"), Insert("c", 7, 9, "x"),
    ...                  Insert("d", 1, 5, "y")])
    >>> to_cht(out)
    [(0, 9, 'x'), (1, 5, 'y')]
    >>> to_cht(out + d.process([Retract("b", 3, 7, 5, "x"), Cti(10)]))
    [(0, 5, 'x'), (1, 5, 'y'), (7, 9, 'x')]

**Equal payloads** compare as :func:`operators.payloads.freeze` compares them (dicts and
lists by value, NaN equal to NaN). **With** ``key=`` the payloads of one key value are merged,
and each output interval carries the payload of its earliest-starting event, equal starts
broken by the least ``repr`` (so the choice depends on the CHT alone, and is final once a CTI
passes the interval's start). Without ``key``, this picks among equal payloads (``1`` and
``1.0``) the same way.

**Speculation and CTIs.** Output is speculative: an insert that bridges two intervals, or a
retraction that shrinks or splits one, is corrected by retractions (an interval's end is moved;
one that no longer starts where it did, or whose representative changed, is deleted and
inserted anew). Every change lies at or after the input CTI (a retraction can only change the
axis there), so the output CTI is the input CTI. An interval that ends before the CTI can no
longer grow or shrink (a new event starts at the CTI or later, and cannot touch it): it is
final, and it and its input events are freed.

**State.** Per key, the live input events in a list sorted by start, and the current output
intervals (disjoint and not touching) in a list sorted by start. An insert apart from every
interval of its key, inside one or lengthening one costs a bisection; any other change
recomputes the union over the intervals it touches. A heap of interval ends frees the final
ones on a CTI.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Hashable
from typing import Any

from .events import MAX_TIME, FreshId, Insert, Message, Retract
from .payloads import freeze, same_payload
from .processor import Processor
from .udm import field_getter

# a key's state: [inputs sorted by (start, seq), seq -> [id, start, end, payload],
#                 output intervals [[start, end, out id, payload]] sorted by start,
#                 their starts (for bisect)]
K_BY_START, K_RECS, K_OUTS, K_OUT_STARTS = range(4)


def _component_key(payload: Any) -> tuple[str, Any]:
    """The order of the representative among events with equal starts."""
    return repr(payload), payload


class Distinct(Processor):
    """Per distinct payload (or ``key(payload)``), the maximal intervals its lifetimes cover.
    See the module docstring."""

    _state_fields = ("keys", "ids", "expiry", "seq", "next_out")

    def __init__(self, key: Callable[[Any], Any] | str | int | None = None,
                 name: str | None = None) -> None:
        super().__init__(name)
        self.key = None if key is None else field_getter(key)
        #: key -> state (see K_*)
        self.keys: dict[Hashable, list[Any]] = {}
        #: input id -> (key, seq)
        self.ids: dict[Hashable, tuple[Hashable, int]] = {}
        #: (end, n, key) of output intervals with a finite end; stale entries are harmless
        self.expiry: list[tuple[int, int, Hashable]] = []
        self.seq = 0
        self.next_out = 0

    def _key_of(self, payload: Any) -> Hashable:
        return freeze(payload if self.key is None else self.key(payload))

    # -- messages -----------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        eid, start, end, payload = msg
        key = self._key_of(payload)
        ks = self.keys.get(key)
        if ks is None:
            ks = self.keys[key] = [[], {}, [], []]
        seq = self.seq
        self.seq += 1
        ks[K_RECS][seq] = [eid, start, end, payload]
        insort(ks[K_BY_START], (start, seq))
        self.ids[eid] = (key, seq)
        # the common cases in O(log n): an event apart from every interval of its key, inside
        # one, or lengthening one; anything else goes through _recompute
        outs, out_starts = ks[K_OUTS], ks[K_OUT_STARTS]
        hi = bisect_right(out_starts, end)
        if hi == 0 or outs[hi - 1][1] < start:
            oid = FreshId(self.next_out, 0)
            self.next_out += 1
            outs.insert(hi, [start, end, oid, payload])
            out_starts.insert(hi, start)
            self._expire_at(end, key)
            return [Insert(oid, start, end, payload)]
        o = outs[hi - 1]
        if o[0] < start:  # o is the only interval it touches, and it keeps o's start
            if end <= o[1]:
                return []
            moved = Retract(o[2], o[0], o[1], end, o[3])
            o[1] = end
            self._expire_at(end, key)
            return [moved]
        return self._recompute(key, ks, start, end)

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        found = self.ids.get(msg.id)
        if found is None:
            raise ValueError(f"retraction of {msg.id!r}, which is not a live input event: the "
                             f"stream into this step is not well formed")
        key, seq = found
        ks = self.keys[key]
        rec = ks[K_RECS][seq]
        old_end, new_end = rec[2], msg.new_end
        if new_end == rec[1]:  # deleted
            del ks[K_RECS][seq]
            del self.ids[msg.id]
            ks[K_BY_START].pop(bisect_left(ks[K_BY_START], (rec[1], seq)))
        else:
            rec[2] = new_end
        return self._recompute(key, ks, min(old_end, new_end), max(old_end, new_end))

    def on_cti(self, time: int, port: int) -> list[Message]:
        expiry = self.expiry
        while expiry and expiry[0][0] < time:
            _, _, key = heapq.heappop(expiry)
            ks = self.keys.get(key)
            if ks is not None:
                self._free(key, ks, time)
        if len(expiry) > 4 * sum(len(ks[K_OUTS]) for ks in self.keys.values()) + 1024:
            self._rebuild_expiry()
        return self.emit_cti(time)

    # -- the one place outputs change ---------------------------------------------------------
    def _recompute(self, key: Hashable, ks: list[Any], a: int, b: int) -> list[Message]:
        """Recompute the output intervals of ``key`` that touch ``[a, b]`` (the part of the
        axis the change altered) from the input events, and emit the difference."""
        outs, out_starts = ks[K_OUTS], ks[K_OUT_STARTS]
        hi = bisect_right(out_starts, b)
        lo = hi
        while lo > 0 and outs[lo - 1][1] >= a:
            lo -= 1
        h0 = min(a, outs[lo][0]) if lo < hi else a
        h1 = max(b, outs[hi - 1][1]) if lo < hi else b
        by_start, recs = ks[K_BY_START], ks[K_RECS]
        i = bisect_left(by_start, (h0, -1))
        j = bisect_right(by_start, (h1, self.seq))
        new: list[list[Any]] = []  # [start, end, representative's order key]
        for start, seq in by_start[i:j]:
            _, _, end, payload = recs[seq]
            if new and start <= new[-1][1]:
                last = new[-1]
                if end > last[1]:
                    last[1] = end
                if start == last[0]:
                    rank = _component_key(payload)
                    if rank[0] < last[2][0]:
                        last[2] = rank
            else:
                new.append([start, end, _component_key(payload)])
        old = outs[lo:hi]
        by_old_start = {o[0]: o for o in old}
        out: list[Message] = []
        kept: list[list[Any]] = []
        reused: set[int] = set()
        fresh: list[list[Any]] = []
        for start, end, (_, rep) in new:
            o = by_old_start.get(start)
            if o is not None and same_payload(o[3], rep):
                reused.add(id(o))
                if o[1] != end:
                    out.append(Retract(o[2], start, o[1], end, o[3]))
                    o[1] = end
                    self._expire_at(end, key)
                kept.append(o)
            else:
                oid = FreshId(self.next_out, 0)
                self.next_out += 1
                fresh.append([start, end, oid, rep])
                kept.append(fresh[-1])
        for o in old:
            if id(o) not in reused:
                out.append(Retract(o[2], o[0], o[1], o[0], o[3]))
        for o in fresh:
            out.append(Insert(o[2], o[0], o[1], o[3]))
            self._expire_at(o[1], key)
        outs[lo:hi] = kept
        out_starts[lo:hi] = [o[0] for o in kept]
        if not recs:
            del self.keys[key]
        return out

    def _expire_at(self, end: int, key: Hashable) -> None:
        if end != MAX_TIME:
            heapq.heappush(self.expiry, (end, self.next_out, key))
            self.next_out += 1

    def _free(self, key: Hashable, ks: list[Any], time: int) -> None:
        """Free the output intervals of ``key`` that end before ``time`` (final: nothing can
        touch them any more) and their input events."""
        outs = ks[K_OUTS]
        n = 0
        while n < len(outs) and outs[n][1] < time:
            n += 1
        if not n:
            return
        last_end = outs[n - 1][1]
        del outs[:n], ks[K_OUT_STARTS][:n]
        by_start, recs = ks[K_BY_START], ks[K_RECS]
        m = bisect_left(by_start, (last_end, -1))
        for _, seq in by_start[:m]:
            del self.ids[recs.pop(seq)[0]]
        del by_start[:m]
        if not recs:
            del self.keys[key]

    def _rebuild_expiry(self) -> None:
        self.expiry = [(o[1], n, key) for n, (key, ks) in enumerate(self.keys.items())
                       for o in ks[K_OUTS] if o[1] != MAX_TIME]
        heapq.heapify(self.expiry)

    # -- introspection ------------------------------------------------------------------------
    def key_functions(self) -> tuple[Callable[[Any], Any], ...] | None:
        return None if self.key is None else (self.key,)

    def state_size(self) -> int:
        """Input events and output intervals held."""
        return len(self.ids) + sum(len(ks[K_OUTS]) for ks in self.keys.values())

    def _check(self) -> None:
        n = 0
        for key, ks in self.keys.items():
            by_start, recs, outs, starts = ks
            assert recs, f"key {key!r} is held with no input events"
            assert sorted(by_start) == by_start and len(by_start) == len(recs)
            assert starts == [o[0] for o in outs]
            union: list[list[Any]] = []
            for start, seq in by_start:
                eid, s, e, p = recs[seq]
                assert s == start and self.ids[eid] == (key, seq)
                if union and s <= union[-1][1]:
                    union[-1][1] = max(union[-1][1], e)
                    if s == union[-1][0] and repr(p) < repr(union[-1][2]):
                        union[-1][2] = p
                else:
                    union.append([s, e, p])
            assert [(s, e) for s, e, _ in union] == [(o[0], o[1]) for o in outs], (
                f"key {key!r}: outputs {outs} are not the union {union}")
            assert all(repr(u[2]) == repr(o[3]) for u, o in zip(union, outs, strict=True))
            n += len(recs)
        assert n == len(self.ids)
