"""``count_window(n, by="start"|"end")``: windows spanning ``n`` consecutive distinct times.

For the consecutive distinct start times ``t0 < t1 < ...`` of the live events, the count
windows are ``[t_i, t_{i+n-1} + 1)`` and an event belongs to a window when its start lies in it
(``by="end"``: the same over distinct end times, membership by end). Ties count once: a window
over ``n`` distinct times may hold more than ``n`` events. While fewer than ``n`` distinct times
follow ``t_i`` there is no window at ``t_i`` (yet). Clipping is always full (a time-sensitive
UDM sees ``[max(s, W.start), min(e, W.end))``), and the only output policy is ``point_end``:
each result is the point ``[W.end - 1, W.end)``, at the window's last distinct time::

    n = 2, by start        e1 [1 ------- 6)   e2 [3 ------- 8)   e3 [5 -- 7)
    windows                [1 ---- 4)         [3 ------ 6)
    clipped members        e1 [1, 4) e2 [3, 4)   e2 [3, 6) e3 [5, 6)
    output (a count)            2 @ [3, 4)          2 @ [5, 6)

    >>> from operators.events import Insert, Cti
    >>> from operators.windows import CountWindow
    >>> op = CountWindowOperator(CountWindow(2), len, name="cw")
    >>> op.process([Insert("e1", 1, 6), Insert("e2", 3, 8), Insert("e3", 5, 7), Cti(6)])
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=FreshId('cw', 0), start=3, end=4, payload=2),
     Insert(id=FreshId('cw', 1), start=5, end=6, payload=2), Cti(time=6)]

**Events open to ∞ with** ``by="end"``: an edge event has no end time yet, so it belongs to no
by-end window until a retraction closes it; the operator does not even store it (the closing
retraction carries its start and payload). An event reopened to ∞ leaves its by-end window.

**Algorithm** (the paper's section V, specialised): the distinct times live in a sorted list,
the events at each time in a dict (the EventIndex); one record per complete window (its last
time, its outputs and, for an :class:`~operators.udm.IncrementalAggregate`, its state) is the
WindowIndex. An insert or retraction changes the events at one or two times; only windows whose
span of ``n`` distinct times includes a changed time are affected (those starting at the
changed time or at one of the ``n - 1`` distinct times before it). The EventIndex changes at
once; the affected windows are refreshed once per batch (at its end and before each CTI), from
the batch's net change: for each, the operator recomputes the result — incrementally from the
events that joined and left the window when the UDM is incremental — and, if it changed, fully
retracts the window's earlier output (kept in the record, so the UDM is not called again to
find it) and emits the new output under fresh ids. A by-start retraction that only moves an
end changes nothing for a time-insensitive UDM.

**CTIs**: after ``Cti(c)`` no distinct time before ``c`` can appear or vanish and no membership
before ``c`` can change (a new event starts at or after ``c``; a retraction changes ends at or
after ``c`` only). A window whose last time lies before ``c`` is therefore final, and so are the
clipped lifetimes of its members (an end at or after ``c`` is cut to ``W.end <= c`` anyway).
Every future output or retraction sits at the last time of some window, which is the ``n``-th
distinct time or later; with ``r`` distinct times before ``c`` and every later time ``>= c``,
that is at least ``c + max(0, n - 1 - r)``: the output CTI. The state kept is the ``n - 1``
distinct times before ``c`` (the starts of windows not final yet) and everything after;
the rest is freed. Retractions of freed events (by start: only their ends can change, which no
open window sees) are ignored.

This module holds the messages, the CTIs and the EventIndex; the WindowIndex and the refresh
of the affected windows are :mod:`operators.windows.count_refresh`, which the operator is
built on.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from itertools import repeat
from typing import Any, Literal

from sortedcontainers import SortedList

from ..aggregates import Max, Min
from ..errors import DeadLetter
from ..events import MAX_TIME, MIN_TIME, Insert, Message, Retract, add_time
from .count_refresh import CountWindowRefresh, Delta, Record, WindowRecord
from .evaluate import Ids, WindowUdm, net_change, stored_event
from .spec import DEFAULT_POLICY, CountWindow, PolicyArg


class CountWindowOperator(CountWindowRefresh):
    """Applies ``udm`` to every count window of ``spec`` (docs/windows.md), one output per result.

    ``udm`` is anything :func:`operators.udm.resolve` accepts. ``kind="aggregate"`` emits one
    event per window whose payload is the result; ``kind="apply"`` emits one event per payload
    the UDM returns (a UDO; a time-sensitive UDO's ``(start, end, payload)`` timestamps are
    replaced by the window's end point; a plain function may return any iterable).
    ``on_error="dead_letter"`` skips a window on which the UDM raises instead of failing the
    query, and records it in :attr:`dead_letters` (item: the window, its ``(start, end,
    payload)`` member events and the message that triggered the last evaluation) once, when a
    CTI makes it final or the input ends (``finish()``), unless the UDM succeeds on it first.

    Cost per insert or retraction: ``O(n log T)`` index work plus, for each of the at most
    ``n + 1`` affected windows, an incremental update from the changed events, or one UDM call
    over the window's events for a non-incremental UDM.
    """

    _state_fields = ("times", "events", "windows", "ids", "floor", "dead_letters")

    def __init__(
        self,
        spec: CountWindow,
        udm: Any,
        *,
        kind: Literal["aggregate", "apply"] = "aggregate",
        policy: PolicyArg = DEFAULT_POLICY,
        name: str | None = None,
        on_error: Literal["raise", "dead_letter"] = "raise",
    ) -> None:
        if not isinstance(spec, CountWindow):
            raise TypeError(f"CountWindowOperator needs an operators.windows.CountWindow, got "
                            f"{spec!r}; build one with operators.windows.count_window(n, by)")
        super().__init__(name or f"count_window({spec.n}, by={spec.by!r})")
        #: clip "full", output "point_end" (the only ones of count windows)
        self.policy = policy.resolve(spec)
        self.call = WindowUdm(udm, kind, self.policy, on_error)
        self.udm = self.call.udm
        self.spec = spec
        self.n = spec.n
        self.by_start = spec.by == "start"
        self.time_sensitive = self.call.time_sensitive
        self.incremental = self.call.incremental
        # by start, a clipped lifetime [s, min(e, W.end)) depends on the window's end
        self.clip_needs_end = self.time_sensitive and self.by_start
        #: a new window's result from the UDM's ``compute`` (cheaper than building a state,
        #: e.g. Max's sorted multiset), its state built only when the window changes later:
        #: in-order input completes each window once and rarely changes it after
        self.lazy = (self.incremental and not self.time_sensitive
                     and getattr(self.udm, "cheap_compute", False) is True)
        #: Min or Max over new windows: their results from a sliding extreme over the
        #: extremes of each distinct time (:meth:`_sliding`), not one UDM call per window
        self.sliding = (self.lazy and self.call.kind == "aggregate"
                        and type(self.udm) in (Max, Min))
        #: windows the UDM failed on (with ``on_error="dead_letter"``)
        self.dead_letters: list[DeadLetter] = []
        #: the distinct start (or end) times of the events held, and the events at each
        self.times: SortedList = SortedList()
        self.events: dict[int, dict[Hashable, Record]] = {}
        #: start time -> record, for every complete window
        self.windows: dict[int, WindowRecord] = {}
        self.ids = Ids(self.name)
        #: times below this were freed by CTIs (their windows are final)
        self.floor = MIN_TIME
        #: within a batch: the net change of the EventIndex since the last flush (time ->
        #: (records as they were, records as they are now)), and the starts of the windows it
        #: may affect, each with the last message that affected it
        self._delta: Delta = {}
        self._affected: dict[int, Message] = {}

    # -- messages ---------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if self.by_start:
            key = msg.start
        elif msg.end == MAX_TIME:
            return []  # no end time yet: placed when a retraction closes it
        else:
            key = msg.end
        return self._update({key: ({}, {msg.id: (msg.start, msg.end, msg.payload)})}, msg)

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        full = msg.new_end == msg.start
        if self.by_start:
            key = msg.start
            if key < self.floor:
                return []  # freed: only its end can change, and no open window sees it
            old = stored_event(self.events, key, msg)
            if full:
                return self._update({key: ({msg.id: old}, {})}, msg)
            new = (old[0], msg.new_end, old[2])
            if not self.time_sensitive:
                self.events[key][msg.id] = new  # payloads do not change: nothing to emit
                return []
            return self._update({key: ({msg.id: old}, {msg.id: new})}, msg)
        delta: Delta = {}
        payload = msg.payload
        if msg.end != MAX_TIME:
            old = stored_event(self.events, msg.end, msg)
            payload = old[2]
            delta[msg.end] = ({msg.id: old}, {})
        if not full and msg.new_end != MAX_TIME:
            delta[msg.new_end] = ({}, {msg.id: (msg.start, msg.new_end, payload)})
        return self._update(delta, msg) if delta else []

    def end_batch(self) -> list[Message]:
        """Inserts and retractions only update the EventIndex; the windows they affect are
        refreshed once per batch: before each CTI (which must follow the output it covers)
        and here, at the end. A window touched by ten events of one batch calls the UDM once
        and corrects its output once."""
        return self._flush() if self._delta else []

    def on_cti(self, time: int, port: int) -> list[Message]:
        if time < self.in_cti:  # (Processor.process keeps the largest)
            raise ValueError(f"input CTI goes back from {self.in_cti} to {time}")
        out = self._flush() if self._delta else []
        times, n = self.times, self.n
        before = times.bisect_left(time)  # distinct times before the CTI: all final
        cut = before - (n - 1)  # windows starting before times[cut] end before the CTI
        if cut > 0:
            for t in times.islice(0, cut):
                rec = self.windows.pop(t, None)
                if rec is not None and rec.failure is not None:  # final and failing
                    self._dead_letter(t, rec)
                del self.events[t]
            self.floor = times[cut - 1] + 1
            del times[:cut]
            before = n - 1
        # every future window's last time is the n-th distinct time or later
        return out + self.emit_cti(add_time(time, max(0, n - 1 - before)))

    def finish(self) -> list[Message]:
        """End of input: the windows still held are as final as they will get, so the ones
        the UDM fails on go to the dead letters now (their input is in no output row)."""
        for start, rec in self.windows.items():
            if rec.failure is not None:
                self._dead_letter(start, rec)
        return []

    # -- the EventIndex ----------------------------------------------------------------------
    def _starts_around(self, key: int) -> Iterable[int]:
        """The starts of the complete windows that could hold ``key``: those among the
        ``n - 1`` distinct times before it, and ``key`` itself when it is a distinct time
        (the window at index k is complete when k + n - 1 < the number of distinct times)."""
        times = self.times
        size = len(times)
        if not size:
            return ()
        latest = times[-1]
        if key >= latest:  # in-order input: only the window ending at the latest time, if any
            return (times[size - self.n],) if key == latest and size >= self.n else ()
        i = times.bisect_left(key)
        hi = i + 1 if times[i] == key else i
        return times.islice(max(0, i - self.n + 1), max(0, min(hi, size - self.n + 1)))

    def _update(self, delta: Delta, trigger: Message) -> list[Message]:
        """Apply ``delta`` to the EventIndex and add it to the batch's net change; the windows
        it affects (those holding a changed time before or after it) are refreshed by
        :meth:`_flush`. Returns no messages."""
        affected, around = self._affected, self._starts_around
        for key in delta:
            affected.update(zip(around(key), repeat(trigger)))
        times, events, net = self.times, self.events, self._delta
        for key, (removed, added) in delta.items():
            bucket = events.get(key)
            if bucket is None:
                bucket = events[key] = {}
                times.add(key)
            if removed:
                for eid in removed:
                    if eid not in added:
                        del bucket[eid]
            bucket.update(added)
            if not bucket:
                del events[key]
                times.remove(key)
            net_change(net, key, removed, added)  # (the message's own dicts, built for it)
        for key in delta:
            affected.update(zip(around(key), repeat(trigger)))
        return []

    # -- introspection -----------------------------------------------------------------------
    def state_size(self) -> int:
        """Events held plus complete windows held."""
        return sum(len(b) for b in self.events.values()) + len(self.windows)

    def _check(self) -> None:
        assert not self._delta and not self._affected, "changes left unflushed after a batch"
        times, events = self.times, self.events
        assert list(times) == sorted(set(times)), "distinct times are not distinct and sorted"
        assert set(times) == set(events), "the time list and the EventIndex disagree"
        for t, bucket in events.items():
            assert bucket, f"no events at distinct time {t}"
            assert t >= self.floor, f"time {t} below the freed floor {self.floor}"
            for s, e, _ in bucket.values():
                assert (s if self.by_start else e) == t, f"event [{s}, {e}) filed under {t}"
                assert e != MAX_TIME or self.by_start, "an open event in a by-end window"
        complete = {times[i]: times[i + self.n - 1] for i in range(len(times) - self.n + 1)}
        assert set(self.windows) == set(complete), (
            f"window records {sorted(self.windows)} are not the complete windows "
            f"{sorted(complete)}")
        for start, rec in self.windows.items():
            assert rec.last == complete[start], f"window at {start} has a stale last time"
            assert rec.ok or not rec.outputs, "a failed window kept its output"
            assert rec.failure is None or not rec.ok, "a window holds output and a failure"
            if rec.ok and self.call.kind == "aggregate":
                assert len(rec.outputs) == 1, "an aggregate window without exactly one result"

