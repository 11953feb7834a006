"""The WindowIndex of :class:`~operators.windows.count.CountWindowOperator`: one record per
complete count window (its last distinct time, the rows it emitted, the UDM state), and the
refresh that brings each window a batch affected up to date from the batch's net change.

The operator (:mod:`operators.windows.count`) keeps the EventIndex (the distinct times and the
events at each), takes the messages and the CTIs; :class:`CountWindowRefresh`, which it is
built on, turns the EventIndex's changes into output: per affected window, the result again
(incrementally from the events that left and joined it when the UDM keeps a state, by a
sliding extreme for Min and Max over new windows, else one UDM call), and the correction of
the rows sent before. See the operator's module docstring for the algorithm.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable
from typing import Any

from sortedcontainers import SortedList

from ..aggregates import Max, extreme_key
from ..errors import DeadLetter
from ..events import FreshId, Insert, Message, Retract
from ..payloads import equal
from ..processor import Processor
from ..udm import UDM, Window
from .evaluate import Ids, WindowUdm, between, unchanged_dropped

__all__ = ["CountWindowRefresh", "Delta", "Record", "WindowRecord"]

Record = tuple[int, int, Any]  # (start, end, payload) of a live event
#: events that left and joined the EventIndex at one time: (removed, added), each id -> record
Delta = dict[int, tuple[dict[Hashable, Record], dict[Hashable, Record]]]


#: The state of a window whose result was computed from scratch (:attr:`lazy`): built from
#: its members when the window changes.
class _Lazy:
    def __reduce__(self) -> str:
        return "_LAZY"  # one object, also in a restored snapshot

    def __repr__(self) -> str:
        return "_LAZY"


_LAZY = _Lazy()


class WindowRecord:
    """The WindowIndex entry of a complete window: its last distinct time, the output events
    it emitted as ``(id, payload)``, and the incremental UDM state. ``ok`` is False when the
    UDM failed on its current members (with ``on_error="dead_letter"``); ``failure`` then
    holds ``(reason, the message that triggered the evaluation)``, which becomes a dead letter
    when a CTI makes the window final."""

    __slots__ = ("failure", "last", "ok", "outputs", "state")

    def __init__(self, last: int, outputs: list[tuple[FreshId, Any]], state: Any, ok: bool,
                 failure: tuple[str, Message] | None = None) -> None:
        self.last = last
        self.outputs = outputs
        self.state = state
        self.ok = ok
        self.failure = failure

    def __repr__(self) -> str:
        return f"WindowRecord(last={self.last}, outputs={self.outputs!r}, ok={self.ok})"


class CountWindowRefresh(Processor):
    """The output half of a count window operator: it refreshes the windows that the changes
    of a batch affect (:meth:`_flush`, at the end of a batch and before each CTI) and records
    the failures of final windows (:meth:`_dead_letter`). The operator builds the state named
    here and keeps the EventIndex; the methods stay on the operator, so the per-window loop
    costs no call more than before."""

    # what the operator built (CountWindowOperator.__init__)
    n: int
    call: WindowUdm
    udm: UDM
    incremental: bool
    time_sensitive: bool
    clip_needs_end: bool
    sliding: bool
    lazy: bool
    ids: Ids
    dead_letters: list[DeadLetter]
    times: SortedList
    events: dict[int, dict[Hashable, Record]]
    windows: dict[int, WindowRecord]
    _delta: Delta
    _affected: dict[int, Message]

    def _last_of(self, start: int) -> int | None:
        """The last distinct time of the window starting at ``start``; None when there is no
        such complete window."""
        times = self.times
        i = times.bisect_left(start)
        if i >= len(times) or times[i] != start:
            return None
        j = i + self.n - 1
        return times[j] if j < len(times) else None

    def _flush(self) -> list[Message]:
        """Refresh every window the batch's changes may affect, from their net change."""
        delta, affected = self._delta, self._affected
        self._delta, self._affected = {}, {}
        keys = sorted(delta)
        out: list[Message] = []
        starts = sorted(affected)
        fresh = self._sliding(starts) if self.sliding and len(starts) > 1 else {}
        for start in starts:
            out.extend(self._refresh(start, delta, keys, affected[start], fresh))
        return out

    def _sliding(self, starts: list[int]) -> dict[int, Any]:
        """The results of Min or Max over the new complete windows among ``starts`` (sorted),
        equal to the UDM's ``compute`` over each window's members: for each run of new windows
        at consecutive distinct times, the extreme key of each distinct time's events, then
        the extreme of every ``n`` consecutive ones from a monotonic deque (the first of equal
        keys wins, as ``max``/``min`` of the members pick it). ``O(run + n)`` key reads per run
        instead of ``O(run * n)``. Empty (every window takes the general path, which names
        the problem) when a value is missing or does not order."""
        times, events, windows, n = self.times, self.events, self.windows, self.n
        udm: Any = self.udm
        get, pick, better = udm._get, udm._extreme, type(udm) is Max
        size = len(times)
        runs: list[list[int]] = []  # [first index, last index] of consecutive new windows
        for start in starts:
            if start in windows:
                continue
            i = times.bisect_left(start)
            if i >= size or times[i] != start or i + n > size:
                continue  # not a complete window
            if runs and runs[-1][1] == i - 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        found: dict[int, Any] = {}
        try:
            for first, last in runs:
                span = times[first:last + n]
                buckets = []
                for t in span:
                    got = [get(r[2]) for r in events[t].values()]
                    if any(v is None for v in got):
                        return {}
                    buckets.append(pick([extreme_key(v) for v in got]))
                deque: list[int] = []  # bucket indices, their keys monotonic; front at head
                head = 0
                for j, key in enumerate(buckets):
                    while len(deque) > head and (buckets[deque[-1]] < key if better
                                                 else key < buckets[deque[-1]]):
                        deque.pop()
                    deque.append(j)
                    w = j - n + 1  # the window of span[w .. j]
                    if w < 0:
                        continue
                    if deque[head] < w:
                        head += 1
                    found[span[w]] = udm.result([buckets[deque[head]]])
        except Exception:  # noqa: BLE001 -- values that do not order: the general path
            return {}
        return found

    def _item(self, rec: Record, start: int, last: int) -> Any:
        """What the UDM sees of an event in the window ``[start, last + 1)``."""
        if not self.time_sensitive:
            return rec[2]
        s, e, p = rec
        return (max(start, s), min(last + 1, e), p)

    def _members(self, start: int, last: int) -> list[Any]:
        events, item = self.events, self._item
        return [item(rec, start, last) for t in self.times.irange(start, last)
                for rec in events[t].values()]

    def _changes(self, start: int, old_last: int, last: int, delta: Delta,
                 keys: list[int]) -> tuple[list[Any], list[Any]]:
        """The UDM inputs that left and joined the window starting at ``start`` when its last
        time moved from ``old_last`` to ``last`` and the events changed by ``delta`` (whose
        times, sorted, are ``keys``)."""
        left: list[tuple[Hashable, Any]] = []
        joined: list[tuple[Hashable, Any]] = []
        both = min(old_last, last)
        for t in between(keys, start, both):
            removed, added = delta[t]
            left.extend((i, self._item(r, start, old_last)) for i, r in removed.items())
            joined.extend((i, self._item(r, start, last)) for i, r in added.items())
        if old_last > last:  # the window shrank: the events then in (last, old_last] left
            gone = set(self.times.irange(last, old_last, inclusive=(False, True)))
            gone.update(between(keys, last + 1, old_last))
            for t in gone:
                removed, added = delta.get(t, ({}, {}))
                now = self.events.get(t, {})
                left.extend((i, self._item(r, start, old_last)) for i, r in now.items()
                            if i not in added)
                left.extend((i, self._item(r, start, old_last)) for i, r in removed.items())
        elif last > old_last:  # the window grew: the events now in (old_last, last] joined
            for t in self.times.irange(old_last, last, inclusive=(False, True)):
                joined.extend((i, self._item(r, start, last)) for i, r in self.events[t].items())
        return unchanged_dropped(left, joined)

    def _refresh(self, start: int, delta: Delta, keys: list[int],
                 trigger: Message, fresh: dict[int, Any] | None = None) -> list[Message]:
        """Bring the output of the window starting at ``start`` up to date."""
        rec = self.windows.get(start)
        last = self._last_of(start)
        if last is None:  # no complete window here any more (or yet)
            if rec is None:
                return []
            del self.windows[start]
            return self._retract(rec)
        call, udm = self.call, self.udm
        window = Window(start, last + 1)
        stay = rec is not None and rec.last == last
        left: list[Any] = []
        joined: list[Any] = []
        if stay:
            i = bisect_left(keys, start)
            if i == len(keys) or keys[i] > last:  # none of its times changed
                return []
            left, joined = self._changes(start, last, last, delta, keys)
            if not left and not joined:
                return []
        # from the deltas when the UDM keeps a state (by start, a time-sensitive state needs
        # the same window end: every clipped lifetime depends on it)
        by_delta = (self.incremental and rec is not None and rec.ok
                    and rec.state is not _LAZY and (stay or not self.clip_needs_end))
        if by_delta and not stay:
            left, joined = self._changes(start, rec.last, last, delta,  # type: ignore[union-attr]
                                         keys)
        state = None
        if rec is None and fresh and start in fresh:  # a new window, its result found
            results = [fresh[start]]  # (by _sliding: Min or Max, kind "aggregate")
            state = _LAZY
            members = None
        else:
            members = None if by_delta else self._members(start, last)
        try:
            if state is _LAZY:
                pass
            elif by_delta:
                state = rec.state  # type: ignore[union-attr]
                if left:
                    state = udm.remove(state, left)  # type: ignore[attr-defined]
                if joined:
                    state = udm.add(state, joined)  # type: ignore[attr-defined]
                results = call.result(state, window)
            elif self.lazy and rec is None:  # a new window: no state until it changes
                state = _LAZY
                results = call.compute(members, window)  # type: ignore[arg-type]
            elif self.incremental:
                state = call.initial(members)  # type: ignore[arg-type]
                results = call.result(state, window)
            else:
                results = call.compute(members, window)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 -- a UDM may raise anything
            return self._failed(start, window, rec, exc, trigger)
        payloads = [p for _, _, p in call.output.rows(start, last + 1, results, call.stamped)]
        if stay and rec is not None and rec.ok and equal([p for _, p in rec.outputs], payloads):
            rec.state = state
            return []
        out = self._retract(rec) if rec is not None else []
        outputs = []
        for payload in payloads:
            oid = self.ids.mint()
            outputs.append((oid, payload))
            out.append(Insert(oid, last, last + 1, payload))
        self.windows[start] = WindowRecord(last, outputs, state, True)
        return out

    def _failed(self, start: int, window: Window, rec: WindowRecord | None, exc: Exception,
                trigger: Message) -> list[Message]:
        reason = self.call.failed(self.name, "compute", window,
                                  f"(while processing {trigger!r})", exc)
        # a dead letter only once the window is final (see on_cti): a later evaluation of the
        # window may succeed (its bad event retracted) or fail again (then it replaces this)
        out = self._retract(rec) if rec is not None else []
        self.windows[start] = WindowRecord(window.end - 1, [], None, False, (reason, trigger))
        return out

    def _dead_letter(self, start: int, rec: WindowRecord) -> None:
        """Record the failure of the final window starting at ``start``; its input is the
        ``(start, end, payload)`` rows of its events, as the other windows record it."""
        reason, trigger = rec.failure  # type: ignore[misc]
        members = [r for t in self.times.irange(start, rec.last) for r in self.events[t].values()]
        self.dead_letters.append(
            self.call.dead_letter(self.name, reason, Window(start, rec.last + 1), members, trigger))
        rec.failure = None

    @staticmethod
    def _retract(rec: WindowRecord) -> list[Message]:
        t = rec.last
        return [Retract(oid, t, t + 1, t, payload) for oid, payload in rec.outputs]

