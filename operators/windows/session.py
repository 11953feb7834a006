"""``session_window(gap, max_duration=None)``: windows made by bursts of activity.

Membership is by start time, as for count windows. Over the distinct start times of the live
events, in order, a *session* is a maximal run in which each next start is less than the
previous start + ``gap``; its window is ``[first start, last start + gap)``. With
``max_duration=M`` a session is also cut at ``first start + M``: its window ends at
``min(last start + gap, first start + M)`` and an event starting at or after ``first start + M``
opens the next session (the runs are cut greedily, from the left). An event belongs to the
session whose window holds its start::

    time       0    2    4    6    8   10   12   14   16   18      gap = 5, Count
    input      a·   b·                  c·   d·                    (points)
    sessions   [0 ─────── 2 + 5 = 7)    [10 ─────── 12 + 5 = 17)
    output     2 @ [0, 7)               2 @ [10, 17)
    then e·6   6 < 2 + 5 and 10 < 6 + 5: one session  [0 ──────────────────── 17)
    corrected  [0, 7) and [10, 17) retracted;  5 @ [0, 17) inserted

    >>> from operators.aggregates import Count
    >>> from operators.cht import to_cht
    >>> from operators.events import Insert, Cti
    >>> from operators.windows import SessionWindow
    >>> op = SessionWindowOperator(SessionWindow(5), Count(), name="sw")
    >>> out = op.process([Insert(i, t, t + 1) for i, t in enumerate((0, 2, 10, 12))])
    >>> to_cht(out)
    [(0, 7, 2), (10, 17, 2)]
    >>> out += op.process([Insert("e", 6, 7), Cti(20)])
    >>> to_cht(out), out[-1]
    ([(0, 17, 5)], Cti(time=20))

A retraction of an event can shrink a session or split it in two (its start time vanishes and
leaves a hole of ``gap`` or more); a late event can grow one or bridge two. Output is
speculative: a session has output as soon as it has an event, and every change of its members
fully retracts its earlier rows (a row whose payload stays and whose end moves is lengthened
or shortened by one retraction) and inserts the new ones. Policies: ``clip`` (a member's start
is never before its window's, so ``left`` is ``none`` and ``full`` is ``right``) and ``output``
(``window``, ``point_end``, ``clip``, ``keep``) as for the other windows (docs/windows.md).

**Algorithm.** The distinct start times live in a sorted list and the events at each time in a
dict (the EventIndex); the sessions are a sorted dict from first start to a record (last start,
end, rows sent, incremental UDM state) — the WindowIndex. Inserts and retractions only change
the EventIndex; once per batch (at its end and before each CTI) the operator recuts the
sessions around the changed times: from the session holding (or preceding) a changed time it
walks the times greedily, and stops at the first session start the old index also had once no
changed time lies before it (without ``max_duration`` a change reaches at most its two
neighbours; with it, a change may shift the cuts of the run after it). Each session whose
bounds or members changed is evaluated — an :class:`~operators.udm.IncrementalAggregate` from
the events that joined and left it since its old bounds (a time-sensitive one clipped at the
end is rebuilt when the end moves) — and the output is corrected by the smallest difference
(:func:`~operators.windows.evaluate.diff`). In-order input costs ``O(log n)`` per event plus
one evaluation per touched session and batch.

**CTIs.** After ``Cti(c)`` no start time before ``c`` can appear or vanish. A session whose
window ends at or before ``c`` is therefore final (a new event starts at or after ``c``, too
late to join it) and is freed with its events — under an unclipped time-sensitive UDM only
once all its members have ended before ``c`` (an end at or after ``c`` can still change, and
the UDM sees it). The first session not freed can still grow or change, never move its start;
later ones start at ``c`` or after. The output CTI is therefore ``c``, or the start of the
first session still held when that is earlier (``point_end``: its ``W.end − 1``; ``keep``:
``c``, and a UDO's output change behind it is an error). Retractions of freed events can only
move their ends, which no open session sees: they are ignored.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Literal

from sortedcontainers import SortedDict, SortedList

from ..errors import DeadLetter
from ..events import MIN_TIME, Insert, Message, Retract, add_time, fmt_time
from ..processor import Processor
from ..udm import Window
from .evaluate import (
    Ids,
    WindowUdm,
    between,
    diff,
    net_change,
    not_behind,
    stored_event,
    unchanged_dropped,
)
from .spec import DEFAULT_POLICY, PolicyArg, SessionWindow

Record = tuple[int, int, Any]  # (start, end, payload) of a live event
#: events that left and joined the EventIndex at one start time: (removed, added), id -> record
Delta = dict[int, tuple[dict[Hashable, Record], dict[Hashable, Record]]]

__all__ = ["SessionWindowOperator", "session_bounds"]


def session_bounds(times: list[int], gap: int, max_duration: int | None = None,
                   start: int = 0) -> list[tuple[int, int]]:
    """The sessions ``(first start, last start)`` of the sorted distinct start ``times``
    (from index ``start``): the definition, cut greedily from the left.

    >>> session_bounds([0, 2, 10, 12, 30], gap=5)
    [(0, 2), (10, 12), (30, 30)]
    >>> session_bounds([0, 2, 4, 6, 8], gap=5, max_duration=5)
    [(0, 4), (6, 8)]
    """
    out = []
    i, n = start, len(times)
    while i < n:
        first = prev = times[i]
        cut = add_time(first, max_duration) if max_duration is not None else None
        i += 1
        while i < n:
            t = times[i]
            if t >= add_time(prev, gap) or (cut is not None and t >= cut):
                break
            prev = t
            i += 1
        out.append((first, prev))
    return out


class _Session:
    """The WindowIndex entry of a session: its last start and window end, the rows it sent
    as ``(id, start, end, payload)`` and the incremental UDM state. ``ok`` is False when the
    UDM failed on its members (``on_error="dead_letter"``); ``failure`` then holds ``(reason,
    the message that triggered the evaluation)`` until the session is final."""

    __slots__ = ("end", "failure", "last", "ok", "outputs", "state")

    def __init__(self, last: int, end: int, state: Any = None, ok: bool = True,
                 failure: tuple[str, Message] | None = None) -> None:
        self.last = last
        self.end = end
        self.outputs: list[tuple[Any, int, int, Any]] = []
        self.state = state
        self.ok = ok
        self.failure = failure

    def __repr__(self) -> str:
        return f"_Session(last={self.last}, end={self.end}, outputs={self.outputs!r})"


class SessionWindowOperator(Processor):
    """Applies ``udm`` to every session of ``spec`` (see the module doc).

    ``kind="aggregate"``: one row per session, payload the UDM's result; ``kind="apply"``:
    one row per payload the UDO returns. ``policy`` holds the clipping and output policies
    (:class:`~operators.windows.spec.WindowPolicy`; default: clip ``"full"``, output
    ``"window"``). ``on_error="dead_letter"`` gives a
    session the UDM fails on no output and records it in :attr:`dead_letters` once it is
    final (unless a later change lets the UDM succeed first).
    """

    _state_fields = ("times", "events", "sessions", "ids", "floor", "dead_letters")

    def __init__(self, spec: SessionWindow, udm: Any, *,
                 kind: Literal["aggregate", "apply"] = "aggregate",
                 policy: PolicyArg = DEFAULT_POLICY, name: str | None = None,
                 on_error: Literal["raise", "dead_letter"] = "raise") -> None:
        if not isinstance(spec, SessionWindow):
            raise TypeError(f"SessionWindowOperator needs an operators.windows.SessionWindow, "
                            f"got {spec!r}; build one with operators.windows.session_window(gap)")
        super().__init__(name or f"session_window({spec.gap})")
        self.spec = spec
        self.gap = spec.gap
        self.max_duration = spec.max_duration
        self.policy = policy.resolve(spec)
        self.call = WindowUdm(udm, kind, self.policy, on_error)
        self.udm = self.call.udm
        #: how results become rows
        self.output = self.policy.output
        self.ts = self.call.time_sensitive
        self.incremental = self.call.incremental
        #: a member's start is never before its session's: only the right end is ever cut
        self.clip_right = self.policy.clips_right
        #: what the UDM sees of a member depends on the session's end
        self.view_needs_end = self.ts and self.clip_right
        #: the UDM sees true member ends: a session is final only once they are
        self.unclipped = self.ts and not self.clip_right
        #: the distinct start times held, and the events at each
        self.times: SortedList = SortedList()
        self.events: dict[int, dict[Hashable, Record]] = {}
        #: first start -> session record (the WindowIndex)
        self.sessions: SortedDict = SortedDict()
        self.ids = Ids(self.name)
        #: start times below this were freed with their final sessions
        self.floor = MIN_TIME
        self.dead_letters: list[DeadLetter] = []
        #: within a batch: the net change of the EventIndex per start time, and the last
        #: message that changed each time
        self._delta: Delta = {}
        self._why: dict[int, Message] = {}

    # -- session arithmetic ------------------------------------------------------------------
    def _end(self, first: int, last: int) -> int:
        end = add_time(last, self.gap)
        if self.max_duration is not None:
            end = min(end, add_time(first, self.max_duration))
        return end

    # -- messages ----------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        self._change(msg.start, {}, {msg.id: (msg.start, msg.end, msg.payload)}, msg)
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        key = msg.start
        if key < self.floor:
            return []  # its session is final and freed: only its end changes, unseen
        old = stored_event(self.events, key, msg)
        if msg.new_end == msg.start:
            self._change(key, {msg.id: old}, {}, msg)
            return []
        new = (old[0], msg.new_end, old[2])
        if not self.ts:
            self.events[key][msg.id] = new  # a time-insensitive UDM sees no change
            return []
        self._change(key, {msg.id: old}, {msg.id: new}, msg)
        return []

    def end_batch(self) -> list[Message]:
        """The sessions a batch changed are recut and corrected once, here and before each
        CTI (which must follow the output it covers)."""
        return self._flush() if self._delta else []

    def on_cti(self, time: int, port: int) -> list[Message]:
        out = self._flush() if self._delta else []
        self._free(time)
        cti = time
        if not self.output.keep and self.sessions:
            first, rec = self.sessions.peekitem(0)
            cti = min(time, self.output.row_start(first, rec.end))
        return out + self.emit_cti(cti)

    def finish(self) -> list[Message]:
        """End of input: the sessions still held are as final as they will get, so those the
        UDM fails on go to the dead letters now."""
        for first, rec in self.sessions.items():
            if rec.failure is not None:
                self._dead_letter(first, rec)
        return []

    # -- the EventIndex ----------------------------------------------------------------------
    def _change(self, key: int, removed: dict[Hashable, Record], added: dict[Hashable, Record],
                trigger: Message) -> None:
        """Apply a change at start time ``key`` to the EventIndex and add it to the batch's
        net change (the records as they were before the batch, and as they are now)."""
        bucket = self.events.get(key)
        if bucket is None:
            bucket = self.events[key] = {}
            self.times.add(key)
        for eid in removed:
            if eid not in added:
                del bucket[eid]
        bucket.update(added)
        if not bucket:
            del self.events[key]
            self.times.remove(key)
        self._why[key] = trigger
        net_change(self._delta, key, dict(removed), dict(added))

    # -- recutting and evaluation --------------------------------------------------------------
    def _recut(self, keys: list[int]) -> tuple[list[tuple[int, int]], list[int]]:
        """The sessions the changed start times ``keys`` (sorted) may have changed, as
        ``(first, last)`` of the current times, and the first starts of the old sessions they
        replace (see the module doc: from the session before each change, greedily, to the
        first old session start with no change before it)."""
        sessions, times = self.sessions, self.times
        firsts = sessions.keys()
        bounds: list[tuple[int, int]] = []
        covered: list[int] = []
        ki, nk = 0, len(keys)
        while ki < nk:
            k = keys[ki]
            j = sessions.bisect_right(k) - 1
            region = firsts[j] if j >= 0 else k
            i = times.bisect_left(region)
            stop = None
            started = False
            while i < len(times):
                s = times[i]
                while ki < nk and keys[ki] < s:
                    ki += 1
                if started and s in sessions:
                    stop = s  # as before from here (the next change, if any, starts anew)
                    break
                started = True
                run = self._run(i)
                first, last = run[0], run[-1]
                bounds.append((first, last))
                i = times.bisect_right(last)
            if stop is None:
                ki = nk
            covered.extend(sessions.irange(region, stop, inclusive=(True, False)))
        return bounds, covered

    def _run(self, i: int) -> list[int]:
        """The times of the session starting at ``times[i]`` (a run cut as the definition
        cuts it)."""
        times, gap, limit = self.times, self.gap, self.max_duration
        first = prev = times[i]
        cut = add_time(first, limit) if limit is not None else None
        run = [first]
        for t in times.islice(i + 1):
            if t >= add_time(prev, gap) or (cut is not None and t >= cut):
                break
            run.append(t)
            prev = t
        return run

    def _flush(self) -> list[Message]:
        delta, why = self._delta, self._why
        self._delta, self._why = {}, {}
        keys = sorted(delta)
        bounds, covered = self._recut(keys)
        sessions = self.sessions
        pool: list[tuple[Any, int, int, Any, int]] = []
        new_recs: dict[int, _Session] = {}
        new_rows: list[tuple[int, tuple[int, int, Any]]] = []
        fresh = {first for first, _ in bounds}
        for first in covered:
            if first not in fresh:  # merged into another session, or gone
                rec = sessions.pop(first)
                pool.extend((*row, first) for row in rec.outputs)
        for first, last in bounds:
            old = sessions.get(first)
            if old is not None and old.last == last and old.ok and not between(
                    keys, first, last):
                continue  # the same members
            rec, results = self._evaluate(first, last, old, delta, keys, why)
            if old is not None:
                pool.extend((*row, first) for row in old.outputs)
            sessions[first] = new_recs[first] = rec
            new_rows.extend((first, row) for row in self.output.rows(
                first, rec.end, results, self.call.stamped))

        def sent(w: int, row: tuple[Any, int, int, Any]) -> None:
            new_recs[w].outputs.append(row)

        return [self._checked(msg, w) for msg, w in diff(pool, new_rows, self.ids, sent)]

    def _item(self, rec: Record, end: int) -> Any:
        """What the UDM sees of a member of a session ending at ``end``."""
        if not self.ts:
            return rec[2]
        s, e, p = rec
        return (s, min(e, end) if self.clip_right else e, p)

    def _members(self, first: int, last: int, end: int) -> list[Any]:
        events = self.events
        recs = [r for t in self.times.irange(first, last) for r in events[t].values()]
        recs.sort(key=lambda r: (r[0], r[1]))
        return [self._item(r, end) for r in recs]

    def _changes(self, first: int, old: _Session, last: int, end: int, delta: Delta,
                 keys: list[int]) -> tuple[list[Any], list[Any]]:
        """The UDM inputs that left and joined the session starting at ``first`` since it
        was ``old`` (the events changed by ``delta``, whose times are ``keys``, and those its
        new bounds take in or leave out)."""
        item = self._item
        left: list[tuple[Hashable, Any]] = []
        joined: list[tuple[Hashable, Any]] = []
        old_last, old_end = old.last, old.end
        for t in between(keys, first, min(old_last, last)):
            removed, added = delta[t]
            left.extend((i, item(r, old_end)) for i, r in removed.items())
            joined.extend((i, item(r, end)) for i, r in added.items())
        if old_last > last:  # it shrank: the events then in (last, old_last] left
            gone = set(self.times.irange(last, old_last, inclusive=(False, True)))
            gone.update(between(keys, last + 1, old_last))
            for t in gone:
                removed, added = delta.get(t, ({}, {}))
                left.extend((i, item(r, old_end)) for i, r in self.events.get(t, {}).items()
                            if i not in added)
                left.extend((i, item(r, old_end)) for i, r in removed.items())
        elif last > old_last:  # it grew: the events now in (old_last, last] joined
            for t in self.times.irange(old_last, last, inclusive=(False, True)):
                joined.extend((i, item(r, end)) for i, r in self.events[t].items())
        return unchanged_dropped(left, joined)

    def _evaluate(self, first: int, last: int, old: _Session | None, delta: Delta,
                  keys: list[int], why: dict[int, Message]) -> tuple[_Session, list[Any]]:
        """The record of the session ``[first .. last]`` and its results (none when the UDM
        failed on it)."""
        end = self._end(first, last)
        window = Window(first, end)
        call, udm = self.call, self.udm
        by_delta = (self.incremental and old is not None and old.ok
                    and (old.end == end or not self.view_needs_end))
        state = None
        try:
            if by_delta:
                left, joined = self._changes(first, old, last, end, delta,  # type: ignore[arg-type]
                                             keys)
                state = old.state  # type: ignore[union-attr]
                if left:
                    state = udm.remove(state, left)  # type: ignore[attr-defined]
                if joined:
                    state = udm.add(state, joined)  # type: ignore[attr-defined]
                results = call.result(state, window)
            elif self.incremental:
                state = call.initial(self._members(first, last, end))
                results = call.result(state, window)
            else:
                results = call.compute(self._members(first, last, end), window)
        except Exception as exc:  # noqa: BLE001 -- a UDM may raise anything
            changed = between(keys, first, last)
            trigger = why[changed[-1]] if changed else next(reversed(why.values()))
            reason = call.failed(self.name, "compute", window,
                                 f"(while processing {trigger!r})", exc)
            return _Session(last, end, None, False, (reason, trigger)), []
        return _Session(last, end, state), results

    def _checked(self, msg: Message, w: int) -> Message:
        if msg.sync_time >= self.out_cti:
            return msg
        return not_behind(msg, self.out_cti, self.output.keep,
                          f"session window {self.name!r}: UDM {self.call.name!r} changed the "
                          f"output of the session starting at {fmt_time(w)}")

    # -- CTIs ----------------------------------------------------------------------------------
    def _free(self, c: int) -> None:
        """Free the final sessions (ending at or before ``c``; under an unclipped
        time-sensitive UDM also with every member ended before ``c``), from the left."""
        sessions, times, events = self.sessions, self.times, self.events
        while sessions:
            first, rec = sessions.peekitem(0)
            if rec.end > c:
                break
            span = list(times.irange(first, rec.last))
            if self.unclipped and any(e >= c for t in span for _, e, _ in events[t].values()):
                break
            if rec.failure is not None:
                self._dead_letter(first, rec)
            for t in span:
                del events[t]
            del times[:len(span)]
            del sessions[first]
            self.floor = rec.last + 1

    def _dead_letter(self, first: int, rec: _Session) -> None:
        reason, trigger = rec.failure  # type: ignore[misc]
        members = [r for t in self.times.irange(first, rec.last) for r in self.events[t].values()]
        self.dead_letters.append(self.call.dead_letter(self.name, reason,
                                                       Window(first, rec.end), members, trigger))
        rec.failure = None

    # -- introspection -------------------------------------------------------------------------
    def state_size(self) -> int:
        """Events held plus sessions held."""
        return sum(len(b) for b in self.events.values()) + len(self.sessions)

    def _check(self) -> None:
        assert not self._delta and not self._why, "changes left unflushed after a batch"
        times, events = self.times, self.events
        assert set(times) == set(events), "the time list and the EventIndex disagree"
        assert all(events[t] for t in times), "an empty time in the EventIndex"
        assert not times or times[0] >= self.floor, "a time below the freed floor"
        expected = session_bounds(list(times), self.gap, self.max_duration)
        got = [(first, rec.last) for first, rec in self.sessions.items()]
        assert got == expected, f"sessions {got} are not the sessions {expected} of the times"
        for first, rec in self.sessions.items():
            assert rec.end == self._end(first, rec.last), f"session at {first}: stale end"
            assert rec.ok or not rec.outputs, "a failed session kept its output"
            if rec.ok and self.call.kind == "aggregate":
                assert len(rec.outputs) == 1, "an aggregate session without exactly one row"
