"""Ingress: turning plain rows into a physical stream, and deciding when time advances.

A source reads rows (dicts) and needs three decisions before the temporal algebra can run
(docs/ctis.md):

* **time**: which columns hold the start (and end) of each event, converted to integer ticks
  by :func:`operators.ticks.to_ticks` (1 tick = 1 µs since the Unix epoch, UTC);
* **shape**: ``"point"`` (``[s, s + 1)``), ``"interval"`` (``[s, e)``) or ``"edge"`` (a row
  without an end opens ``[s, ∞)``; a later row with the same id and an end closes it);
* **progress**: :class:`AdvanceTime` says when the source promises that time has moved on by
  emitting a CTI, what happens to an event that arrives behind such a promise, and how a quiet
  source still flushes its last events (the timer of the CTI article, docs/ctis.md).

:class:`AdvanceTime` lives in :mod:`operators.advance_time`, the late stream in
:mod:`operators.late_stream` and ``import_ctis`` in :mod:`operators.import_ctis`; this module
names them too.

:class:`Ingress` is the pure state machine: rows in, ``Insert``/``Retract``/``Cti`` messages
out. It never reads a clock: callers pass their wall time (``now``) to :meth:`Ingress.push`
and :meth:`Ingress.poll`. Nothing is lost silently (docs/errors.md): each row is processed, dropped
or adjusted by the declared policy (recorded in ``late``), or sent to ``dead_letters`` with a
reason.

    >>> ingest([{"t": 10, "kwh": 1.5}, {"t": 12, "kwh": 0.5}], start="t")
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=0, start=10, end=11, payload={'t': 10, 'kwh': 1.5}),
     Insert(id=1, start=12, end=13, payload={'t': 12, 'kwh': 0.5}),
     Cti(time=13)]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .advance_time import DEFAULT_ADVANCE, POLICIES, SHAPES, AdvanceTime
from .columns import payload_list, row_at
from .errors import DeadLetter, LateEvent
from .events import MAX_TIME, MIN_TIME, Cti, Insert, Message, Retract
from .import_ctis import ImportCti
from .late_stream import LateOut, LateStream, late_markers
from .processor import Stateful
from .ticks import TIME_HELP, is_timestamp, to_ticks

__all__ = ["POLICIES", "SHAPES", "AdvanceTime", "ImportCti", "Ingress", "LateOut", "LateStream",
           "ingest", "late_markers", "to_ticks"]

def _missing(value: Any) -> bool:
    """None, NaN or NaT: how DataFrames spell an empty cell."""
    return value is None or (value != value)


class _Reject(Exception):
    """A row goes to the dead letters; the argument is the reason."""


def _getter(spec: Any, what: str) -> Callable[[Any], Any]:
    if callable(spec):
        return spec
    if isinstance(spec, str):
        def get(row: Any, _key: str = spec) -> Any:
            return row.get(_key)
        return get
    raise TypeError(
        f"Ingress({what}={spec!r}): give a column name (str) or a function row -> value"
    )


_STATS = ("received", "processed", "dropped", "adjusted", "dead_lettered", "ctis")
#: Below every time: "no event yet" for the latest start and the horizon.
_NONE = MIN_TIME - 1
#: A column batch with a few rows of bad start times stays column-wise when its runs of good
#: rows average at least this many rows (:meth:`Ingress._push_mixed`); else it goes row-wise.
_MIXED_RUN = 64


class Ingress(Stateful):
    """Turns rows (dicts) into physical messages: events of one shape plus generated CTIs.

    ``start``, ``end`` and ``id`` are column names or functions ``row -> value``; ``id=None``
    mints ids 0, 1, 2, ... (edges need an id column, so that an end edge can find its start
    edge). The payload of every event is the row itself.

    * ``"point"``: ``Insert(id, s, s + 1, row)``;
    * ``"interval"``: ``Insert(id, s, e, row)``;
    * ``"edge"``: a row with no end (missing, None, NaN) opens ``Insert(id, s, ∞, row)``; a
      row with an end closes the open edge with the same id:
      ``Retract(id, s, ∞, e, row_of_the_start_edge)``. The end edge's start column is not
      used (the open edge knows its start).

    Rows that cannot become events (a missing or unparsable time, ``end <= start``, a row
    that is not a dict, an id that was already used, an end edge for an id with no open edge)
    go to :attr:`dead_letters` with a reason; events behind the latest CTI are dropped or
    adjusted by ``advance.policy`` and recorded in :attr:`late`. :attr:`stats` counts every
    row: ``received == processed + dropped + adjusted + dead_lettered``.

    Memory: the open edges, plus the set of user ids already used (ids are unique within a
    stream, docs/model.md); minted ids cost nothing.

    >>> src = Ingress(start="t", end="until", shape="edge", id="k",
    ...               advance=AdvanceTime(every=1))
    >>> src.push([{"k": "a", "t": 5}, {"k": "a", "until": 9}])
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id='a', start=5, end=9223372036854775807, payload={'k': 'a', 't': 5}),
     Cti(time=5),
     Retract(id='a', start=5, end=9223372036854775807, new_end=9, payload={'k': 'a', 't': 5})]
    >>> src.end()
    [Cti(time=9)]
    """

    def __init__(
        self,
        start: str | Callable[[Any], Any],
        end: str | Callable[[Any], Any] | None = None,
        shape: str = "point",
        id: str | Callable[[Any], Any] | None = None,
        advance: AdvanceTime = DEFAULT_ADVANCE,
        name: str = "source",
    ) -> None:
        if shape not in SHAPES:
            raise ValueError(f"Ingress(shape={shape!r}): shape must be one of {SHAPES}")
        if shape == "interval" and end is None:
            raise ValueError(
                "Ingress(shape='interval') needs end=: the column (or function) that holds "
                "each event's end; use shape='point' for events without an end"
            )
        if shape == "edge" and id is None:
            raise ValueError(
                "Ingress(shape='edge') needs id=: the column (or function) that ties an end "
                "edge to its start edge"
            )
        if not isinstance(advance, AdvanceTime):
            raise TypeError(f"Ingress(advance={advance!r}): pass an AdvanceTime(...)")
        self.name = name
        self.shape = shape
        self._start_spec, self._end_spec = start, end
        self.advance = advance
        self._get_start = _getter(start, "start")
        self._get_end = _getter(end, "end") if end is not None else None
        self._get_id = _getter(id, "id") if id is not None else None
        #: With a column name anywhere, rows must be dicts.
        self._need_dict = any(isinstance(c, str) for c in (start, end, id))
        self._reset()

    def _reset(self) -> None:
        #: The latest CTI emitted (MIN_TIME: none yet).
        self.cti = MIN_TIME
        #: Records of late events (dropped or adjusted), oldest first.
        self.late: list[LateEvent] = []
        #: Records of rows that could not become events, oldest first.
        self.dead_letters: list[DeadLetter] = []
        #: Row and CTI counters.
        self.stats: dict[str, int] = dict.fromkeys(_STATS, 0)
        self._latest = _NONE  # largest start read from an accepted row
        self._top = _NONE  # largest start sent (adjusted starts included)
        self._horizon = _NONE  # largest finite end sent (start + 1 for ends at ∞)
        self._count = 0  # accepted events since the last count-based CTI
        self._mark: int | None = None  # latest start at the last interval-based CTI
        self._next_id = 0
        self._open: dict[Hashable, tuple[int, Any]] = {}  # edge id -> (start sent, row)
        self._used: set[Hashable] = set()  # user ids already sent
        self._dropped_edges: set[Hashable] = set()  # start edges dropped as late
        self._last_wall: float | None = None
        self._ended = False

    # -- the entry points ---------------------------------------------------------------------
    def push(self, rows: Iterable[Any], now: float | None = None) -> list[Message]:
        """Process ``rows`` in order; return the events and the CTIs they generate.

        ``now`` is the caller's wall clock in seconds (e.g. ``time.monotonic()``), used only
        to time :attr:`AdvanceTime.idle_timeout`; a push that carries rows restarts the idle
        timer.

        >>> Ingress(start="t", advance=AdvanceTime(every=2)).push([{"t": 3}, {"t": 1}])
        ... # doctest: +NORMALIZE_WHITESPACE
        [Insert(id=0, start=3, end=4, payload={'t': 3}),
         Insert(id=1, start=1, end=2, payload={'t': 1}), Cti(time=3)]
        """
        if self._ended:
            raise RuntimeError(
                f"source {self.name!r}: push() after end(); the final CTI has been emitted, "
                f"so no event may follow (create a new Ingress for a new stream)"
            )
        if type(rows) is dict:
            return self.push_columns(rows, now)
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
        return out

    def push_columns(self, columns: dict[str, Any], now: float | None = None) -> list[Message]:
        """Process a batch of rows stored column-wise (``{name: numpy array}``, equal lengths;
        what ``push`` also accepts): the same events, CTIs, late records and counts as
        ``push`` of the rows, in order, with the accepted events sent as
        :class:`~operators.columns.Columns` batches.

        The vectorised path takes point and interval sources whose time columns are int64
        ticks inside the time axis, with minted ids and count-based CTIs
        (``AdvanceTime(every=N)``, N >= 256, or none); anything else (an id column, interval
        CTIs, a bad time in an int64 column) is processed row by row. A start column of
        Python objects that holds ticks except at a few rows (a null time, as the Arrow
        readers leave it) stays vectorised around those rows (:meth:`_push_mixed`).

        >>> import numpy as np
        >>> src = Ingress(start="t", advance=AdvanceTime(every=256))
        >>> out = src.push({"t": np.arange(300, dtype=np.int64), "v": np.ones(300)})
        >>> out  # doctest: +NORMALIZE_WHITESPACE
        [Columns(256 inserts), Cti(time=255), Columns(44 inserts)]
        >>> out[0].inserts()[1]
        Insert(id=1, start=1, end=2, payload={'t': 1, 'v': 1.0})
        """
        import numpy as np

        n = len(next(iter(columns.values()))) if columns else 0
        spec = self._start_spec
        mixed = columns.get(spec) if isinstance(spec, str) else None
        if n and getattr(getattr(mixed, "dtype", None), "kind", "") == "O" and self._vectorisable():
            return self._push_mixed(columns, spec, now)  # type: ignore[arg-type]
        times = self._column_times(columns, n)
        if times is None:
            return self.push(payload_list(columns), now)
        starts, ends = times
        out: list[Message] = []
        self.stats["received"] += n
        every = self.advance.every
        i = 0
        while i < n:
            cti = self.cti
            late = starts[i:] < cti
            accepted = None
            if late.any():
                movable = late & (ends[i:] > cti) if self.advance.policy == "adjust" else None
                accepted = ~late if movable is None else ~late | movable
            stop = n - i
            if every is not None:
                need = every - self._count
                if accepted is None:
                    stop = min(stop, need)
                else:
                    cum = np.cumsum(accepted)
                    if cum[-1] >= need:
                        stop = int(np.searchsorted(cum, need)) + 1
            part = None if accepted is None else accepted[:stop]
            self._columns_segment(columns, starts, ends, i, i + stop, part, out)
            i += stop
        if n:
            self._last_wall = now
        return out

    def _vectorisable(self) -> bool:
        """Whether this source's settings allow the vectorised path (see push_columns)."""
        adv = self.advance
        return not (self.shape == "edge" or self._get_id is not None
                    or adv.interval is not None or (adv.every is not None and adv.every < 256))

    def _push_mixed(self, columns: dict[str, Any], start: str,
                    now: float | None) -> list[Message]:
        """A column batch whose start column holds ticks (Python ints) except at a few rows
        whose time the row path must judge (a null, a time off the axis: what
        :func:`topology.arrow_reader.arrow_batches` leaves there): the runs of good rows go
        the vectorised way, each other row alone the row way (to the dead letters, with its
        reason), in the batch's order, so the result is ``push`` of the rows. A batch with
        many such rows goes row by row: short runs would cost more than rows."""
        import numpy as np

        starts = columns[start]
        n = len(starts)
        good = np.fromiter((type(v) is int and MIN_TIME <= v < MAX_TIME for v in starts),
                           dtype=bool, count=n)
        bad = np.flatnonzero(~good).tolist()
        if len(bad) * _MIXED_RUN > n:
            return self.push(payload_list(columns), now)
        out: list[Message] = []
        lo = 0
        for b in [*bad, n]:
            if b > lo:
                run = {k: c[lo:b] for k, c in columns.items()}
                run[start] = starts[lo:b].astype(np.int64)
                out.extend(self.push_columns(run, now))
            if b < n:
                out.extend(self.push([row_at(columns, b)], now))
            lo = b + 1
        return out

    def _column_times(self, columns: dict[str, Any],
                      n: int) -> tuple[Any, Any] | None:
        """The start and end arrays when the vectorised path applies (see push_columns)."""
        if not self._vectorisable() or n == 0:
            return None
        starts = _int_column(columns, self._start_spec)
        if starts is None or starts.min() < MIN_TIME or starts.max() >= MAX_TIME:
            return None
        if self.shape == "point":
            return starts, starts + 1
        ends = _int_column(columns, self._end_spec)
        if ends is None or ends.max() > MAX_TIME or (ends <= starts).any():
            return None
        return starts, ends

    def _columns_segment(self, columns: dict[str, Any], starts: Any, ends: Any, lo: int,
                         hi: int, accepted: Any, out: list[Message]) -> None:
        """Rows ``lo:hi`` under one CTI: ``accepted`` (None: all) are sent, the others are
        late; a count-based CTI fires when the segment completes ``every`` events."""
        import numpy as np

        from .columns import Columns

        cti, stats = self.cti, self.stats
        late: list[tuple[int, LateEvent]] = []  # (row, record): records go oldest first
        if accepted is None:
            index: Any = slice(lo, hi)
            k = hi - lo
        else:
            index = np.flatnonzero(accepted) + lo
            k = len(index)
            late = self._late_rows(columns, starts, ends, np.flatnonzero(~accepted) + lo, cti)
        if k:
            raw, end = starts[index], ends[index]
            sent = np.maximum(raw, cti) if accepted is not None else raw
            ids = np.arange(self._next_id, self._next_id + k, dtype=np.int64)
            self._next_id += k
            batch = Columns(ids, sent, None if self.shape == "point" else end,
                            {name: c[index] for name, c in columns.items()})
            out.append(batch)  # type: ignore[arg-type]  # a Columns stands for its inserts
            moved = np.flatnonzero(sent != raw).tolist() if accepted is not None else []
            for j in moved:
                msg = batch.inserts_at(j)
                late.append((int(index[j]), LateEvent(
                    self.name, "adjusted",
                    f"start {int(raw[j])} is behind the CTI {cti}; moved to start at the CTI "
                    f"(policy 'adjust')", msg.payload, msg)))
            stats["adjusted"] += len(moved)
            stats["processed"] += k - len(moved)
            self._latest = max(self._latest, int(raw.max()))
            self._top = max(self._top, int(sent.max()))
            self._horizon = max(self._horizon,
                                int(np.where(end == MAX_TIME, sent + 1, end).max()))
        self.late.extend(record for _, record in sorted(late, key=lambda x: x[0]))
        if k and self.advance.every is not None:
            self._count += k
            if self._count >= self.advance.every:
                self._count = 0
                t = self._latest - self.advance.delay
                self._emit(out, min(max(t, MIN_TIME), MAX_TIME))

    def _late_rows(self, columns: dict[str, Any], starts: Any, ends: Any, rows: Any,
                   cti: int) -> list[tuple[int, LateEvent]]:
        """The rows dropped as late, as (row, record)."""
        late = []
        for r in rows.tolist():
            row = row_at(columns, r)
            late.append((r, self._late_start(int(starts[r]), int(ends[r]), cti, row)))
        return late

    def _late_start(self, start: int, end: int, cti: int, row: Any) -> LateEvent:
        """The record of a row dropped because its event starts behind the CTI (counted)."""
        why = ("a point cannot be moved, so it is dropped" if self.shape == "point"
               else f"its end {end} is not after the CTI either"
               if self.advance.policy == "adjust" else "policy 'drop'")
        self.stats["dropped"] += 1
        return LateEvent(self.name, "dropped",
                         f"start {start} is behind the CTI {cti}; {why} (a larger AdvanceTime "
                         f"delay tolerates more disorder)", row, None)

    def _dropped(self, row: Any, reason: str) -> None:
        """``row`` is dropped as late, for ``reason`` (counted, recorded in ``late``)."""
        self.stats["dropped"] += 1
        self.late.append(LateEvent(self.name, "dropped", reason, row, None))

    def _accepted(self, msg: Message, row: Any, out: list[Message],
                  adjusted: str | None) -> None:
        """``msg``, made of ``row``, goes out: processed, or ``adjusted`` (why; recorded in
        ``late`` with the message sent)."""
        out.append(msg)
        if adjusted is None:
            self.stats["processed"] += 1
        else:
            self.stats["adjusted"] += 1
            self.late.append(LateEvent(self.name, "adjusted", adjusted, row, msg))

    def poll(self, now: float) -> list[Message]:
        """The idle timer: when ``advance.idle_timeout`` is set, no rows arrived for at least
        that many seconds (of the caller's clock ``now``) and some event is not yet covered by
        a CTI, emit ``Cti(latest event start + 1)``, which flushes every event sent so far.
        Repeated polls while the source stays quiet emit nothing more.

        >>> src = Ingress(start="t", advance=AdvanceTime(every=1, idle_timeout=0.2))
        >>> src.push([{"t": 7}], now=10.0)
        [Insert(id=0, start=7, end=8, payload={'t': 7}), Cti(time=7)]
        >>> src.poll(10.1), src.poll(10.25), src.poll(11.0)
        ([], [Cti(time=8)], [])
        """
        timeout = self.advance.idle_timeout
        if timeout is None or self._ended or self._top + 1 <= self.cti:
            return []
        if self._last_wall is None:  # rows arrived without a clock: start timing now
            self._last_wall = now
            return []
        if now - self._last_wall < timeout:
            return []
        return self._emit([], self._top + 1)

    def next_poll(self, now: float) -> float | None:
        """When :meth:`poll` may next emit, asked at ``now``: when the idle timeout of the
        last rows runs out; None while every event is covered by a CTI (nothing to flush
        before more rows come) or without an idle timeout.

        >>> src = Ingress(start="t", advance=AdvanceTime(every=1, idle_timeout=0.2))
        >>> src.next_poll(9.0) is None        # no event yet
        True
        >>> _ = src.push([{"t": 7}], now=10.0)
        >>> src.next_poll(10.0), src.poll(10.25), src.next_poll(10.25)
        (10.2, [Cti(time=8)], None)
        """
        timeout = self.advance.idle_timeout
        if timeout is None or self._ended or self._top + 1 <= self.cti:
            return None
        if self._last_wall is None:  # rows arrived without a clock: poll starts timing
            return now
        return self._last_wall + timeout

    def end(self) -> list[Message]:
        """End of input: ``Cti(max over events of (end if finite else start + 1))``, past
        every finite endpoint, if that moves time forward. Later pushes raise; a second
        ``end()`` returns nothing.

        >>> src = Ingress(start="s", end="e", shape="interval")
        >>> src.push([{"s": 1, "e": 9}, {"s": 4, "e": 6}])[-1]
        Insert(id=1, start=4, end=6, payload={'s': 4, 'e': 6})
        >>> src.end()
        [Cti(time=9)]
        """
        if self._ended:
            return []
        self._ended = True
        return self._emit([], self._horizon)

    # -- one row --------------------------------------------------------------------------------
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
            # could not tell when the rows came from a generator: topology.times.running_clock)
            self.stats["timestamp_rows"] = self.stats.get("timestamp_rows", 0) + 1
        return ticks

    def _read_id(self, row: Any) -> Hashable:
        try:
            eid = self._get_id(row)  # type: ignore[misc]
            hash(eid)
        except Exception as exc:  # noqa: BLE001 (a user function's error dead-letters the row)
            raise _Reject(f"reading the id failed: {type(exc).__name__}: {exc}; ids must be "
                          f"hashable values (check the id= column or function)") from None
        if _missing(eid):
            raise _Reject("the id is missing; give every row an id (or use id=None to let "
                          "the source mint ids, for point and interval events)")
        return eid

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
        cti = self.cti
        sent = start
        if start < cti:
            if self.advance.policy == "adjust" and end > cti:
                sent = cti
            else:
                self.late.append(self._late_start(start, end, cti, row))
                if shape == "edge":
                    self._dropped_edges.add(eid)
                return
        if eid is None:
            eid = self._next_id
            self._next_id += 1
        else:
            self._used.add(eid)
        self._accepted(Insert(eid, sent, end, row), row, out, None if sent == start else (
            f"start {start} is behind the CTI {cti}; moved to start at the CTI (policy "
            f"'adjust')"))
        if shape == "edge":
            self._open[eid] = (sent, row)
            if self._dropped_edges:
                self._dropped_edges.discard(eid)
        self._latest = max(self._latest, start)
        self._top = max(self._top, sent)
        self._horizon = max(self._horizon, end if end != MAX_TIME else sent + 1)
        self._generate(out)

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
        if end >= MAX_TIME:
            raise _Reject(f"end edge of {eid!r} ends at MAX_TIME, where the edge already "
                          f"ends; leave the end empty to keep the edge open")
        if end <= start:
            raise _Reject(f"end edge of {eid!r}: end {end} is not after the edge's start "
                          f"{start}; an edge [start, end) needs end > start")
        cti = self.cti
        new_end = end
        if end < cti:
            if self.advance.policy == "adjust" and cti < MAX_TIME:
                new_end = cti
            else:
                self._dropped(row, f"end edge of {eid!r}: end {end} is behind the CTI {cti}; "
                                   f"the edge stays open (policy 'drop'; a larger AdvanceTime "
                                   f"delay tolerates more disorder)")
                return
        del self._open[eid]
        self._accepted(Retract(eid, start, MAX_TIME, new_end, payload), row, out,
                       None if new_end == end else (
                           f"end edge of {eid!r}: end {end} is behind the CTI {cti}; the edge "
                           f"now ends at the CTI (policy 'adjust')"))
        self._horizon = max(self._horizon, new_end)
        self._generate(out)

    def _generate(self, out: list[Message]) -> None:
        """After an accepted event: the count- and time-based CTIs of AdvanceTime."""
        adv = self.advance
        fire = False
        if adv.every is not None:
            self._count += 1
            if self._count >= adv.every:
                self._count = 0
                fire = True
        if adv.interval is not None:
            if self._mark is None:
                self._mark = self._latest
            elif self._latest - self._mark >= adv.interval:
                self._mark = self._latest
                fire = True
        if fire:
            t = self._latest - adv.delay
            self._emit(out, min(max(t, MIN_TIME), MAX_TIME))

    def _emit(self, out: list[Message], time: int) -> list[Message]:
        if time > self.cti:
            self.cti = time
            self.stats["ctis"] += 1
            out.append(Cti(time))
        return out

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

    # -- checkpoints and checks -----------------------------------------------------------------
    # (snapshot() and restore() by the convention of operators.processor.Stateful: restore() on an
    # Ingress with the same configuration resumes exactly where the snapshot's stood)
    _state_fields = ("cti", "late", "dead_letters", "stats", "_latest", "_top", "_horizon",
                     "_count", "_mark", "_next_id", "_open", "_used", "_dropped_edges",
                     "_last_wall", "_ended")

    def state_size(self) -> int:
        """Number of open edges held in state."""
        return len(self._open)

    def _check(self) -> None:
        """Assert the internal invariants (tests call this after every step)."""
        s = self.stats
        assert all(s[k] >= 0 for k in _STATS), s
        assert s["received"] == (s["processed"] + s["dropped"] + s["adjusted"]
                                 + s["dead_lettered"]), s
        assert s["processed"] + s["adjusted"] == 0 or self._top > _NONE, "events but no start"
        assert self._top <= self._horizon or self._top == _NONE
        for eid, (start, _) in self._open.items():
            assert MIN_TIME <= start < MAX_TIME, (eid, start)
            assert start <= self._top, (eid, start, self._top)
            assert eid in self._used and eid not in self._dropped_edges, eid
        if self.advance.every is not None:
            assert 0 <= self._count < self.advance.every
        assert MIN_TIME <= self.cti <= MAX_TIME

    def __repr__(self) -> str:
        return f"<Ingress {self.name} shape={self.shape} cti={self.cti}>"


def _int_column(columns: dict[str, Any], spec: Any) -> Any:
    """The integer column ``spec`` names, as int64 (None: not a name, or not integers)."""
    column = columns.get(spec) if isinstance(spec, str) else None
    kind = getattr(getattr(column, "dtype", None), "kind", "")
    if column is None or not kind or kind not in "iu":
        return None
    return column.astype("int64", copy=False)


def ingest(
    rows: Iterable[Any],
    start: str | Callable[[Any], Any],
    end: str | Callable[[Any], Any] | None = None,
    shape: str = "point",
    id: str | Callable[[Any], Any] | None = None,
    advance: AdvanceTime = DEFAULT_ADVANCE,
    name: str = "source",
) -> list[Message]:
    """Ingest a whole finite table: one :class:`Ingress`, ``push(rows)``, then ``end()``.

    Late and dead-lettered rows are not returned; use :class:`Ingress` to read them.

    >>> ingest([{"s": 2, "e": 5}, {"s": 1, "e": 3}], start="s", end="e", shape="interval")
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=0, start=2, end=5, payload={'s': 2, 'e': 5}),
     Insert(id=1, start=1, end=3, payload={'s': 1, 'e': 3}), Cti(time=5)]
    """
    source = Ingress(start, end=end, shape=shape, id=id, advance=advance, name=name)
    return source.push(rows) + source.end()
