"""The row path of an :class:`~operators.ingress.Ingress`: one row (a dict, or anything its
functions read) at a time, its times read and checked, its event made by the source's shape
(a point, an interval, or a start or end edge matched by id), or the row sent to the dead
letters with the reason, or recorded as late.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .errors import DeadLetter, LateEvent
from .events import MAX_TIME, MIN_TIME, Insert, Message, Retract
from .ingress_keys import IngressKeys
from .ticks import TIME_HELP, is_timestamp, to_ticks

__all__ = ["IngressRows"]


def _missing(value: Any) -> bool:
    """None, NaN or NaT: how DataFrames spell an empty cell."""
    return value is None or (value != value)


class _Reject(Exception):
    """A row goes to the dead letters; the argument is the reason."""


class IngressRows(IngressKeys):
    """How an ingress takes rows (see the module docstring)."""

    def _push_rows(self, rows: Iterable[Any], now: float | None) -> list[Message]:
        """:meth:`~operators.ingress.Ingress.push` of rows (not columns): each row becomes an
        event, is late or goes to the dead letters with its reason."""
        out: list[Message] = []
        stats = self.stats
        one = self._one
        n = 0
        for row in rows:
            n += 1
            stats["received"] += 1
            try:
                one(row, out)
            except _Reject as bad:
                stats["dead_lettered"] += 1
                self.dead_letters.append(DeadLetter(self.name, str(bad.args[0]), row))
        if n:
            self._last_wall = now
        if self._key_of is not None:
            self._key_ctis(out)
        return out

    def _time(self, row: Any, get: Callable[[Any], Any], what: str) -> int:
        try:
            value = get(row)
        except Exception as exc:  # noqa: BLE001 (a user function's error dead-letters the row)
            raise _Reject(f"reading the {what} time failed: {type(exc).__name__}: {exc}; "
                          f"check the {what}= column or function") from None
        if type(value) is int and MIN_TIME <= value <= MAX_TIME:
            return value
        try:
            ticks = to_ticks(value)
        except (TypeError, ValueError) as exc:
            spec = self._start_spec if what == "start" else self._end_spec
            col = f" (column {spec!r})" if isinstance(spec, str) else ""
            if value is None:
                raise _Reject(f"the {what} time is missing{col}; give every row a {what} time "
                              f"({TIME_HELP})") from None
            raise _Reject(f"bad {what} time{col}: {exc}") from None
        if what == "start" and is_timestamp(value):
            # a timestamp: the readers of a running query show its times as times (its plan
            # could not tell when the rows came from a generator:
            # topology.building.times.running_clock)
            self.stats["timestamp_rows"] = self.stats.get("timestamp_rows", 0) + 1
        return ticks

    @staticmethod
    def _hashable(row: Any, get: Callable[[Any], Any], failed: str, fix: str) -> Hashable:
        """``get(row)``, a hashable value; else the row is rejected: ``failed``, why, ``fix``."""
        try:
            value = get(row)
            hash(value)
        except Exception as exc:  # noqa: BLE001 (a user function's error dead-letters the row)
            raise _Reject(f"{failed}: {type(exc).__name__}: {exc}; {fix}") from None
        return value

    def _read_id(self, row: Any) -> Hashable:
        eid = self._hashable(row, self._get_id, "reading the id failed",  # type: ignore[arg-type]
                             "ids must be hashable values (check the id= column or function)")
        if _missing(eid):
            raise _Reject("the id is missing; give every row an id (or use id=None to let "
                          "the source mint ids, for point and interval events)")
        return eid

    def _row_key(self, row: Any) -> Hashable:
        """The key of ``row`` by ``AdvanceTime(per_key=...)``."""
        return self._hashable(row, self._key_of,  # type: ignore[arg-type]
                              "reading the key failed (AdvanceTime per_key=)",
                              "every row needs a hashable key (check the per_key= column or "
                              "function)")

    def _one(self, row: Any, out: list[Message]) -> None:
        if self._need_dict and not isinstance(row, dict):
            raise _Reject(f"a row must be a dict (column names were given), got "
                          f"{type(row).__name__}; convert rows with dict(...) or pass "
                          f"functions as start=/end=/id=")
        shape = self.shape
        if shape == "edge":
            eid = self._read_id(row)
            try:
                raw_end = self._get_end(row) if self._get_end is not None else None
            except Exception as exc:  # noqa: BLE001 (a user function's error dead-letters)
                raise _Reject(f"reading the end time failed: {type(exc).__name__}: {exc}; "
                              f"check the end= column or function") from None
            if not _missing(raw_end):
                self._end_edge(eid, row, out)
                return
            start = self._time(row, self._get_start, "start")
            if start >= MAX_TIME:
                raise _Reject(f"start {start} is MAX_TIME, the end of time; no event fits")
            end = MAX_TIME
            if eid in self._open:
                raise _Reject(f"duplicate start edge: an edge with id {eid!r} is already "
                              f"open; close it (a row with an end) before reopening the id")
            if eid in self._used:
                raise _Reject(f"duplicate id {eid!r}: it was used by an earlier event; ids "
                              f"must be unique within a stream")
        else:
            start = self._time(row, self._get_start, "start")
            if shape == "point":
                if start >= MAX_TIME:
                    raise _Reject(f"start {start} is MAX_TIME, the end of time; a point "
                                  f"[start, start + 1) needs start < MAX_TIME")
                end = start + 1
            else:
                end = self._time(row, self._get_end, "end")  # type: ignore[arg-type]
                if end <= start:
                    raise _Reject(f"end {end} is not after start {start}; an interval "
                                  f"[start, end) needs end > start (use shape='point' for "
                                  f"instants)")
            if self._get_id is None:
                eid = None
            else:
                eid = self._read_id(row)
                if eid in self._used:
                    raise _Reject(f"duplicate id {eid!r}: it was used by an earlier event; "
                                  f"ids must be unique within a stream")
        if self._key_of is None:
            key = None
            cti = self.cti
        else:
            key = self._row_key(row)
            cti = self._key_cti(key)
        sent = start
        if start < cti:
            if key is not None:
                self._late_keys[key] = self._late_keys.get(key, 0) + 1
            if self.advance.policy == "adjust" and end > cti:
                sent = cti
            else:
                self.late.append(self._late_start(start, end, cti, row, key))
                if shape == "edge":
                    self._dropped_edges.add(eid)
                return
        if eid is None:
            eid = self._next_id
            self._next_id += 1
        else:
            self._used.add(eid)
        self._accepted(Insert(eid, sent, end, row), row, out, None if sent == start else (
            f"start {start} is behind the CTI {cti}{self._of_key(key, cti)}; moved to start "
            f"at the CTI (policy 'adjust')"))
        if shape == "edge":
            self._open[eid] = (sent, row)
            if self._dropped_edges:
                self._dropped_edges.discard(eid)
        self._latest = max(self._latest, start)
        self._top = max(self._top, sent)
        self._horizon = max(self._horizon, end if end != MAX_TIME else sent + 1)
        if key is None:
            self._generate(out)
        else:
            self._generate_key(key, start, out)

    def _end_edge(self, eid: Hashable, row: Any, out: list[Message]) -> None:
        end = self._time(row, self._get_end, "end")  # type: ignore[arg-type]
        live = self._open.get(eid)
        if live is None:
            if eid in self._dropped_edges:
                self._dropped_edges.discard(eid)
                self._dropped(row, f"end edge of {eid!r}: its start edge was dropped as late, "
                                   f"so there is nothing to close")
                return
            raise _Reject(f"end edge for id {eid!r}, but no edge with that id is open; send "
                          f"the start edge (a row with the id and no end) first")
        start, payload = live
        key = None if self._key_of is None else self._row_key(payload)
        if end >= MAX_TIME:
            raise _Reject(f"end edge of {eid!r} ends at MAX_TIME, where the edge already "
                          f"ends; leave the end empty to keep the edge open")
        if end <= start:
            raise _Reject(f"end edge of {eid!r}: end {end} is not after the edge's start "
                          f"{start}; an edge [start, end) needs end > start")
        cti = self.cti if key is None else self._key_cti(key)
        new_end = end
        if end < cti:
            if self.advance.policy == "adjust" and cti < MAX_TIME:
                new_end = cti
            else:
                self._dropped(row, f"end edge of {eid!r}: end {end} is behind the CTI "
                                   f"{cti}{self._of_key(key, cti)}; "
                                   f"the edge stays open (policy 'drop'; a larger AdvanceTime "
                                   f"delay tolerates more disorder)")
                return
        del self._open[eid]
        self._accepted(Retract(eid, start, MAX_TIME, new_end, payload), row, out,
                       None if new_end == end else (
                           f"end edge of {eid!r}: end {end} is behind the CTI {cti}; the edge "
                           f"now ends at the CTI (policy 'adjust')"))
        self._horizon = max(self._horizon, new_end)
        if key is None:
            self._generate(out)
        else:
            self._generate_key(key, start, out)

    def late_lifetime(self, record: LateEvent) -> tuple[int, int]:
        """The lifetime a late row stated (for the late stream, :meth:`Stream.late`): a point
        ``[s, s + 1)``, an interval ``[s, e)``, a start edge ``[s, ∞)``; an end edge is the
        point at its end time (the edge's start is on its start edge's row)."""
        row = record.item
        if self.shape == "edge":
            try:
                raw_end = self._get_end(row) if self._get_end is not None else None
            except Exception:  # noqa: BLE001 - read once already, when it was found late
                raw_end = None
            if not _missing(raw_end):
                end = self._time(row, self._get_end, "end")  # type: ignore[arg-type]
                return end, end + 1
            return self._time(row, self._get_start, "start"), MAX_TIME
        start = self._time(row, self._get_start, "start")
        if self.shape == "point":
            return start, start + 1
        return start, self._time(row, self._get_end, "end")  # type: ignore[arg-type]

