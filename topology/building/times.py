"""Time as people read it: which kind of time a query carries, and one way to show it.

A query's **clock** is ``"timestamps"`` when its sources' times came from timestamps (a
datetime, date, ``numpy.datetime64`` or ISO-8601 string in a row given to ``from_rows``; a
timestamp or date column of ``from_arrow`` / ``from_spark``): its ticks are microseconds since
1970-01-01 UTC, and everything a person reads (the web view, ``cedar inspect``, ``cedar
debug``, the demo's report, the timeline pictures) shows them as ISO-8601 times (UTC, or a
time zone given with ``--tz``) and their differences as durations (``2.4 s``, ``5 min``). It
is ``"ticks"`` otherwise: plain integer time, shown as the integer it is.

:func:`source_clock` reads a source node's clock (the node records it when its builder knew,
e.g. from an Arrow or Spark schema; else the first row of a list of rows tells), the plan's
:attr:`~topology.planning.plan.Plan.clock` is ``"timestamps"`` when any source's is; a source that
nothing declared (a generator) tells as its first row arrives, by its stats
(:data:`TIMESTAMP_ROWS`), and :func:`running_clock` is what the readers of a running query
(the web view, ``why``) go by; :func:`show_time`,
:func:`show_span` (an event's lifetime: ``at T`` for a point) and :func:`show_duration` are
the one formatting of times, lifetimes and durations.

    >>> show_time(1_767_225_600_000_000, "timestamps")
    '2026-01-01T00:00:00Z'
    >>> show_time(1_767_225_600_250_000, "timestamps", "+01:00")
    '2026-01-01T01:00:00.250+01:00'
    >>> show_time(42, "ticks"), show_duration(42, "ticks")
    ('42', '42')
    >>> show_duration(2_400_000, "timestamps"), show_duration(300_000_000, "timestamps")
    ('2.4 s', '5 min')
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from operators.events import MAX_TIME, MIN_TIME
from operators.ticks import TICKS, TIMESTAMPS

__all__ = ["TICKS", "TIMESTAMPS", "TIMESTAMP_ROWS", "parse_time", "parse_tz", "running_clock",
           "show_duration", "show_reason", "show_row", "show_span", "show_time", "show_times_in",
           "source_clock", "time_fields"]


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def parse_time(value: Any) -> int:
    """A time a person typed (``--from 2026-01-01T00:05:00Z``, or ``--from 500``: an integer
    is ticks) or gave (a datetime, ticks) as ticks; a naive ISO time is UTC.

    >>> parse_time("2026-01-01T00:00:01Z") - parse_time("2026-01-01T00:00:00"), parse_time("500")
    (1000000, 500)
    """
    from operators.ticks import to_ticks

    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    return to_ticks(value)


def parse_tz(tz: str | _dt.tzinfo | None) -> _dt.tzinfo:
    """A time zone from ``--tz``: ``None``/``"UTC"``/``"Z"``, an IANA name
    (``"Europe/Paris"``) or an offset (``"+02:00"``); a clear ``ValueError`` otherwise."""
    if tz is None or isinstance(tz, _dt.tzinfo):
        return tz or _dt.UTC
    text = tz.strip()
    if text.upper() in ("UTC", "Z", ""):
        return _dt.UTC
    if text[:1] in "+-":
        try:
            offset = _dt.datetime.strptime(text.replace(":", ""), "%z").utcoffset()
        except ValueError:
            offset = None
        if offset is not None:
            return _dt.timezone(offset)
    else:
        from zoneinfo import ZoneInfo

        try:
            return ZoneInfo(text)
        except (ValueError, KeyError, OSError):
            pass
    raise ValueError(f"unknown time zone {tz!r}: give UTC, an IANA name such as "
                     f"'Europe/Paris', or an offset such as '+02:00'")


def show_time(t: int | None, clock: str | None, tz: str | _dt.tzinfo | None = None) -> str:
    """A time for people: ``""`` for None, ``∞``/``-∞`` for ``MAX_TIME``/``MIN_TIME``, an
    ISO-8601 time (``Z`` for UTC, else ``tz``'s offset; fractions of a second only when
    there are some, in ms or µs) when ``clock`` is ``"timestamps"``, else the tick."""
    if t is None:
        return ""
    if t >= MAX_TIME:
        return "∞"
    if t <= MIN_TIME:
        return "-∞"
    if clock == TIMESTAMPS:
        try:
            when = (_EPOCH + _dt.timedelta(microseconds=int(t))).astimezone(parse_tz(tz))
        except OverflowError:  # before year 1 or after 9999: the tick
            return str(t)
        spec = "seconds" if not when.microsecond else \
            "milliseconds" if when.microsecond % 1000 == 0 else "microseconds"
        return when.isoformat(timespec=spec).replace("+00:00", "Z")
    return str(t)


def show_span(start: int, end: int, clock: str | None,
              tz: str | _dt.tzinfo | None = None) -> str:
    """An event's lifetime for people: ``at T`` for a point (it lasts one tick), else
    ``[start, end)``, each time as :func:`show_time` shows it.

    >>> show_span(1_767_225_600_000_000, 1_767_225_600_000_001, "timestamps")
    'at 2026-01-01T00:00:00Z'
    >>> show_span(5, 6, "ticks"), show_span(0, 50, "ticks"), show_span(7, MAX_TIME, "ticks")
    ('at 5', '[0, 50)', '[7, ∞)')
    """
    if end == start + 1:
        return f"at {show_time(start, clock, tz)}"
    return f"[{show_time(start, clock, tz)}, {show_time(end, clock, tz)})"


def show_row(start: int, end: int, payload: str, clock: str | None,
             tz: str | _dt.tzinfo | None = None) -> str:
    """An output row for people: its lifetime (:func:`show_span`) and its payload's text
    (a repr) with the fields that hold times of the row shown as times (:func:`show_times_in`).

    >>> show_row(1_767_225_600_000_000, 1_767_225_600_000_001,
    ...          "{'ts': 1767225600000000, 'kwh': 0.5}", "timestamps")
    "at 2026-01-01T00:00:00Z {'ts': 2026-01-01T00:00:00Z, 'kwh': 0.5}"
    """
    return f"{show_span(start, end, clock, tz)} {show_times_in(payload, start, end, clock, tz)}"


#: a tick in a late event's or dead letter's reason, after the word that says what it is
_TICK_IN_REASON = re.compile(r"\b(start|end|CTI|time) (-?\d+)\b")


def show_reason(reason: str, clock: str | None, tz: str | _dt.tzinfo | None = None) -> str:
    """A late event's or dead letter's reason (written by the engine, in ticks) with its
    times shown as times where ``clock`` is ``"timestamps"``.

    >>> show_reason("start 1767225603000000 is behind the CTI 1767225629000000; policy "
    ...             "'drop'", "timestamps")
    "start 2026-01-01T00:00:03Z is behind the CTI 2026-01-01T00:00:29Z; policy 'drop'"
    """
    if clock != TIMESTAMPS:
        return reason
    return _TICK_IN_REASON.sub(
        lambda m: f"{m.group(1)} {show_time(int(m.group(2)), clock, tz)}", reason)


#: an integer of 13 digits or more (a tick after 1970-01-12 when it is a time), standing alone
_TICKS_IN_TEXT = re.compile(r"(?<![\w.])-?\d{13,}(?![\w.])")


def show_times_in(text: str, start: int, end: int, clock: str | None,
                  tz: str | _dt.tzinfo | None = None) -> str:
    """A payload's text (its repr) with the payload fields that hold times shown as times:
    where ``clock`` is ``"timestamps"``, each integer of the text inside its event's lifetime
    ``[start, end]`` (the ``ts`` of a reading, the time of a window's spike) is a time of
    that event, and shows as one. Other integers, and every integer under plain ticks, stay.

    >>> show_times_in("{'ts': 1767225600000000, 'n': 1767225600000000000}",
    ...               1_767_225_600_000_000, 1_767_225_600_000_001, "timestamps")
    "{'ts': 2026-01-01T00:00:00Z, 'n': 1767225600000000000}"
    """
    if clock != TIMESTAMPS:
        return text

    def one(m: re.Match[str]) -> str:
        value = int(m.group(0))
        return show_time(value, clock, tz) if start <= value <= end else m.group(0)

    return _TICKS_IN_TEXT.sub(one, text)


_UNITS = ((86_400_000_000, "d"), (3_600_000_000, "h"), (60_000_000, "min"), (1_000_000, "s"),
          (1_000, "ms"), (1, "µs"))


def show_duration(ticks: int | float | None, clock: str | None) -> str:
    """A span of time for people: ``2.4 s``, ``5 min``, ``1.5 h``, ``300 ms`` (three
    significant digits at most) when ``clock`` is ``"timestamps"``, else the ticks."""
    if ticks is None:
        return ""
    if ticks >= MAX_TIME:
        return "∞"
    if clock != TIMESTAMPS:
        return str(int(ticks)) if float(ticks).is_integer() else f"{ticks:g}"
    if ticks == 0:
        return "0 s"
    size = abs(ticks)
    for per, unit in _UNITS:
        if size >= per or per == 1:
            return f"{ticks / per:.3g} {unit}"
    raise AssertionError("unreachable")


def _is_timestamp(value: Any) -> bool:
    import numpy as np

    if isinstance(value, (_dt.date, np.datetime64)):
        return True
    if isinstance(value, str):
        try:
            _dt.datetime.fromisoformat(value.strip())
        except ValueError:
            return False
        return True
    return False


def source_clock(node: Any) -> str | None:
    """The clock of a source node: the one it records (``clock``, set by ``from_arrow`` and
    ``from_spark`` from the schema), else, for rows given as a list, what the first row's time
    is (a timestamp: ``"timestamps"``; anything else: ``"ticks"``); None when nothing tells
    (a generator of rows, a published query, messages)."""
    from topology.building.nodes import FromRows

    recorded = getattr(node, "clock", None)
    if recorded is not None:
        return str(recorded)
    if not isinstance(node, FromRows) or node.batched:
        return None
    rows = node.rows
    if not isinstance(rows, Sequence) or not rows:
        return None
    first = rows[0]
    try:
        value = node.start(first) if callable(node.start) else \
            first.get(node.start) if isinstance(first, dict) else None
    except Exception:  # noqa: BLE001 - the ingress says what is wrong with the row
        return None
    return TIMESTAMPS if _is_timestamp(value) else TICKS


#: The counter a rows source keeps among its stats (beside ``received``: the ingress's
#: ``stats``, which a step's ``stats()`` carries as ``"source"``) of the rows whose start time
#: was a timestamp (a datetime, date, ``numpy.datetime64`` or ISO-8601 string, or a timestamp
#: or date column): how a source whose clock nothing declared (a generator of rows) tells,
#: from its first row on, that its times are times (:func:`running_clock`).
TIMESTAMP_ROWS = "timestamp_rows"


def running_clock(declared: str | None, stats: Iterable[Mapping[str, Any]]) -> str:
    """The clock of a running (or finished) query: ``"timestamps"`` when its plan declared
    it (:attr:`~topology.planning.plan.Plan.clock`: a schema, or the first row of a list), or when
    one of its sources has since taken a row whose start time was a timestamp; else ``"ticks"``.
    ``stats``: its steps' ``stats()`` (a source's counters under ``"source"``) or sources'
    counters themselves (:data:`TIMESTAMP_ROWS`).

    >>> running_clock("ticks", [{"step": "src", "source": {"received": 3,
    ...                                                    "timestamp_rows": 3}}])
    'timestamps'
    >>> running_clock(None, [{"received": 3}]), running_clock("timestamps", [])
    ('ticks', 'timestamps')
    """
    if declared == TIMESTAMPS:
        return TIMESTAMPS
    for s in stats:
        counts = s.get("source") if isinstance(s.get("source"), Mapping) else s
        if (counts or {}).get(TIMESTAMP_ROWS):
            return TIMESTAMPS
    return TICKS


def time_fields(root: Any) -> frozenset[str]:
    """The payload fields of the query under ``root`` (a logical node, a Stream's) that hold
    times: the ``start`` and ``end`` columns, by name, of its sources whose times came from
    timestamps (:func:`source_clock`). Read there as ticks, they stay ticks in the payloads;
    a sink writes them as timestamps (``topology.spark.sink.write(..., times=...)``).

    >>> import datetime as dt
    >>> from topology import Stream
    >>> when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    >>> sorted(time_fields(Stream.from_rows([{"ts": when, "until": when}], start="ts",
    ...                                     end="until", shape="interval")._node))
    ['ts', 'until']
    >>> time_fields(Stream.from_rows([{"t": 5}], start="t")._node)
    frozenset()
    """
    from topology.building.nodes import FromRows
    from topology.building.reads import walk

    return frozenset(c for node in walk(root)
                     if isinstance(node, FromRows) and source_clock(node) == TIMESTAMPS
                     for c in (node.start, node.end) if isinstance(c, str))


def known_schema(data: Any) -> Any:
    """The Arrow schema of ``from_arrow``'s data when it is known without reading a batch: a
    Table's, a RecordBatch's, a ``RecordBatchReader``'s, or the first of a list or tuple of
    them; None for a generator (its batches are read only when the query runs)."""
    if isinstance(data, (list, tuple)):
        data = data[0] if data else None
    schema = getattr(data, "schema", None)
    return None if callable(schema) else schema


def arrow_clock(schema: Any, start: Any) -> str | None:
    """``"timestamps"`` when the column ``start`` of an Arrow ``schema`` is a timestamp or a
    date, ``"ticks"`` when it is another type, None when it is not a column name (or there is
    no schema)."""
    import pyarrow as pa

    if schema is None or not isinstance(start, str) or schema.get_field_index(start) < 0:
        return None
    kind = schema.field(start).type
    return TIMESTAMPS if pa.types.is_timestamp(kind) or pa.types.is_date(kind) else TICKS


def spark_clock(df: Any, start: Any) -> str | None:
    """``"timestamps"`` when the column ``start`` of a Spark DataFrame is a timestamp or a
    date, ``"ticks"`` when it is another type, None when it is not a column name."""
    if not isinstance(start, str):
        return None
    try:
        kind = df.schema[start].dataType.typeName()
    except Exception:  # noqa: BLE001 - not a column: the source's own check says so
        return None
    return TIMESTAMPS if kind in ("timestamp", "timestamp_ntz", "date") else TICKS
