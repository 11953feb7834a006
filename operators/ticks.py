"""Ticks: cedar's time axis, and the conversion of every other notation of time to it.

A tick is one microsecond since 1970-01-01 UTC, an int in ``[MIN_TIME, MAX_TIME]``
(:mod:`operators.events`). :func:`to_ticks` converts one value (an int, a datetime, a date,
a ``numpy.datetime64``, an ISO-8601 string) for the ingress; :func:`to_duration` converts a
span of time (an int of ticks, a ``timedelta``, a string such as ``"5 min"``) for every
argument that takes one, and :func:`format_duration` writes ticks back as such a string;
:func:`from_units` and
:func:`from_units_array` convert counts of a unit (a ``datetime64`` or Arrow timestamp unit,
days of a date) one at a time or a whole column at a time, with :data:`UNITS` the one table
of ticks per unit. Pure Python and numpy: every source converts time here.

    >>> to_ticks("1970-01-01T00:00:01Z"), to_ticks(np.datetime64("1970-01-02", "D"))
    (1000000, 86400000000)
    >>> from_units(3, UNITS["ms"]), from_units(1_999, UNITS["ns"])
    (3000, 1)
    >>> ticks, fits = from_units_array(np.array([1, 10**13]), UNITS["s"])
    >>> ticks.tolist(), fits.tolist()
    ([1000000, 0], [True, False])
    >>> to_duration("1 h 30 min", "tumbling_window", "size"), format_duration(5_400_000_000)
    (5400000000, '1 h 30 min')
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import re
from fractions import Fraction
from typing import Any

import numpy as np

from .events import MAX_TIME, MIN_TIME, TICKS_PER_SECOND

__all__ = [
    "DURATION_HELP",
    "TICKS",
    "TICKS_PER_DAY",
    "TIMESTAMPS",
    "TIME_HELP",
    "UNITS",
    "Duration",
    "format_duration",
    "from_units",
    "from_units_array",
    "to_duration",
    "to_ticks",
]

#: The clock of a query whose times came from timestamps (ticks are µs since the epoch): its
#: times and durations are shown in units (topology/building/times.py).
TIMESTAMPS = "timestamps"
#: The clock of a query with plain integer time: shown as integers.
TICKS = "ticks"

#: Ticks per day, the unit of a date.
TICKS_PER_DAY = 86_400 * TICKS_PER_SECOND
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_EPOCH_AWARE = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_DATE = _dt.date(1970, 1, 1)
#: Ticks per unit of ``numpy.datetime64`` and of Arrow timestamps (whose units are a subset):
#: a positive factor multiplies, a negative one floor-divides (units finer than a tick).
UNITS = {"W": 7 * TICKS_PER_DAY, "D": TICKS_PER_DAY, "h": 3_600 * TICKS_PER_SECOND,
         "m": 60 * TICKS_PER_SECOND, "s": TICKS_PER_SECOND, "ms": 1_000, "us": 1,
         "ns": -1_000, "ps": -1_000_000, "fs": -1_000_000_000, "as": -1_000_000_000_000}
#: How to give a time: the end of every message that rejects one.
TIME_HELP = ("pass ticks (an int of microseconds since 1970-01-01 UTC), a datetime, a "
             "numpy.datetime64 or an ISO-8601 string such as '2010-08-10T00:00:00Z'")


def _range_checked(ticks: int, value: Any) -> int:
    if MIN_TIME <= ticks <= MAX_TIME:
        return ticks
    shown = f"time {ticks}" if value is ticks else f"time {value!r} is {ticks} ticks, which"
    raise ValueError(
        f"{shown} lies outside [MIN_TIME, MAX_TIME] = [{MIN_TIME}, {MAX_TIME}]; ticks are "
        f"microseconds since 1970-01-01 UTC, so check the column's unit"
    )


def to_ticks(value: Any) -> int:
    """Convert a point in time to ticks: integer microseconds since 1970-01-01 UTC.

    Accepted: an ``int`` (already ticks); a ``datetime.datetime`` (naive means UTC, aware is
    converted to UTC); a ``datetime.date`` (its midnight, UTC); a ``numpy.datetime64`` of any
    unit; a pandas ``Timestamp``; an ISO-8601 string; a float only when it is finite and
    integral. The arithmetic is exact integer arithmetic; parts finer than a microsecond are
    floored (as Spark does). Anything else (None, NaN, NaT, a bool, an unparsable string, a
    time outside ``[MIN_TIME, MAX_TIME]``) raises ``ValueError`` or ``TypeError`` with what was
    wrong and how to fix it.

    >>> to_ticks(1_500)
    1500
    >>> to_ticks(_dt.datetime(1970, 1, 1, 0, 0, 1, 250))
    1000250
    >>> to_ticks("2010-08-10T02:00:00+02:00") == to_ticks(_dt.date(2010, 8, 10))
    True
    >>> to_ticks(None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: missing time (None); pass ticks (an int of microseconds since ...
    """
    kind = type(value)
    if kind is int:
        return _range_checked(value, value)
    if value is None:
        raise ValueError(f"missing time (None); {TIME_HELP}")
    if isinstance(value, bool):
        raise TypeError(f"a bool ({value!r}) is not a time; {TIME_HELP}")
    if isinstance(value, _dt.datetime):
        if value != value:
            raise ValueError(f"missing time ({value!r}); {TIME_HELP}")
        if value.tzinfo is None or value.utcoffset() is None:
            delta = value.replace(tzinfo=None) - _EPOCH_NAIVE
        else:
            delta = value - _EPOCH_AWARE
        ticks = (delta.days * TICKS_PER_DAY + delta.seconds * TICKS_PER_SECOND
                 + delta.microseconds)
        return _range_checked(ticks, value)
    if isinstance(value, _dt.date):
        return _range_checked((value - _EPOCH_DATE).days * TICKS_PER_DAY, value)
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"cannot parse {value!r} as an ISO-8601 time; {TIME_HELP}") from None
        return to_ticks(parsed)
    if kind.__name__ == "datetime64" and hasattr(value, "dtype"):
        return _from_datetime64(value)
    if isinstance(value, numbers.Integral):  # numpy integers
        return _range_checked(int(value), value)
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isnan(f):
            raise ValueError(f"missing time (NaN); {TIME_HELP}")
        if not math.isfinite(f):
            raise ValueError(f"time {value!r} is not finite; {TIME_HELP}")
        if not f.is_integer():
            raise ValueError(
                f"time {value!r} is not a whole number of ticks; round it (int(round(t))), "
                f"or {TIME_HELP}"
            )
        return _range_checked(int(f), value)
    if isinstance(value, _dt.timedelta):
        raise TypeError(f"{value!r} is a duration, not a point in time; {TIME_HELP}")
    raise TypeError(f"cannot read a time from {value!r} ({kind.__name__}); {TIME_HELP}")


def is_timestamp(value: Any) -> bool:
    """Whether ``value`` names a time as a timestamp (a date, a datetime, a numpy datetime64,
    an ISO-8601 string) rather than as ticks (a number).

    >>> is_timestamp(_dt.date(2026, 1, 1)), is_timestamp("2026-01-01"), is_timestamp(5)
    (True, True, False)
    """
    return isinstance(value, (_dt.date, str)) or type(value).__name__ == "datetime64"


def _from_datetime64(value: Any) -> int:
    if np.isnat(value):
        raise ValueError(f"missing time ({value!r}); {TIME_HELP}")
    unit, count = np.datetime_data(value.dtype)
    if unit in ("Y", "M"):  # calendar units: let numpy find the day exactly
        value = value.astype("datetime64[D]")
        unit, count = "D", 1
    factor = UNITS.get(unit)
    if factor is None:
        raise TypeError(f"numpy.datetime64 {value!r} has no time unit; use e.g. "
                        f"numpy.datetime64('2010-08-10T00:00:00', 'us')")
    return _range_checked(from_units(int(value.astype(np.int64)) * count, factor), value)


def from_units(count: int, factor: int) -> int:
    """``count`` units of ``factor`` ticks each (a :data:`UNITS` value) as ticks, exactly:
    units finer than a tick are floored (as Spark does)."""
    return count * factor if factor > 0 else count // -factor


def from_units_array(counts: np.ndarray, factor: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`from_units` over an int64 array, vectorised: ``(ticks, fits)``, where ``fits``
    marks the counts whose ticks lie within ``±MAX_TIME`` (int64 would wrap the others round;
    their ticks are 0: convert them one by one to say what they were)."""
    if factor > 1:
        limit = MAX_TIME // factor
        fits = (counts <= limit) & (counts >= -limit)
        return np.where(fits, counts, 0) * factor, fits
    ticks = counts if factor == 1 else counts // -factor
    return ticks, np.ones(len(counts), dtype=bool)


# -- durations ------------------------------------------------------------------------------------
#: What every argument that takes a span of time accepts (:func:`to_duration`); a
#: ``numpy.timedelta64`` is read too.
Duration = int | str | _dt.timedelta
#: How to give a duration: the end of every message that rejects one.
DURATION_HELP = ('give a string such as "5 min", "30 s", "250 ms", "1 h 30 min" or "2 days", a '
                 'datetime.timedelta such as timedelta(minutes=5), or an int of ticks '
                 '(1 tick = 1 µs)')
#: Ticks per unit of a duration string, by every name it may be written with.
_DURATION_UNITS: dict[str, int] = {}
for _names, _ticks in (
        (("w", "wk", "week", "weeks"), 7 * TICKS_PER_DAY),
        (("d", "day", "days"), TICKS_PER_DAY),
        (("h", "hr", "hrs", "hour", "hours"), 3_600 * TICKS_PER_SECOND),
        (("m", "min", "mins", "minute", "minutes"), 60 * TICKS_PER_SECOND),
        (("s", "sec", "secs", "second", "seconds"), TICKS_PER_SECOND),
        (("ms", "msec", "millisecond", "milliseconds"), 1_000),
        (("us", "µs", "μs", "usec", "microsecond", "microseconds", "tick", "ticks"), 1)):
    _DURATION_UNITS.update(dict.fromkeys(_names, _ticks))
_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([^\W\d_]+)\s*,?")
#: The units :func:`format_duration` writes, largest first (each parses back exactly).
_SHOWN = ((TICKS_PER_DAY, "d"), (3_600 * TICKS_PER_SECOND, "h"), (60 * TICKS_PER_SECOND, "min"),
          (TICKS_PER_SECOND, "s"), (1_000, "ms"), (1, "µs"))


def _parse_duration(text: str) -> int | str:
    """The ticks of a duration string, or what is wrong with it."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-").strip()
    if not body:
        return "an empty string is no duration"
    total, at = Fraction(0), 0
    while at < len(body):
        part = _PART.match(body, at)
        if part is None:
            if body[at:].strip().replace(".", "", 1).isdigit():
                return f"{body[at:].strip()!r} has no unit"
            return f"cannot read {body[at:].strip()!r}"
        unit = _DURATION_UNITS.get(part.group(2).lower())
        if unit is None:
            return f"unknown unit {part.group(2)!r}"
        total += Fraction(part.group(1)) * unit
        at = part.end()
    if total.denominator != 1:
        return "it is not a whole number of microseconds"
    return sign * int(total)


def to_duration(value: Any, call: str, arg: str, *, positive: bool = False,
                optional: bool = False) -> Any:
    """A span of time as ticks (an int of microseconds): the one reading of every argument
    that takes a duration (window sizes, ``AdvanceTime``'s interval and delay,
    ``alter_lifetime``, ``shift``, ``clip_duration``).

    Accepted: an ``int`` (already ticks; a numpy integer too); a ``datetime.timedelta`` (a
    pandas ``Timedelta`` is one; parts finer than a microsecond must be zero); a
    ``numpy.timedelta64``; a string of numbers with units, ``"5 min"``, ``"30 s"``, ``"250
    ms"``, ``"1 h 30 min"``, ``"1.5 h"``, ``"2 days"``, ``"-5 min"`` (units: ``w``, ``d``/
    ``day(s)``, ``h``/``hour(s)``, ``m``/``min``/``minute(s)``, ``s``/``sec``/``second(s)``,
    ``ms``, ``us``/``µs``). ``None`` passes through when ``optional``. Anything else (a float,
    a bool, a string without a unit) raises naming ``call`` and ``arg`` and the accepted
    forms; with ``positive``, so does a duration that is not > 0.

    >>> to_duration("5 min", "tumbling_window", "size") == to_duration(
    ...     _dt.timedelta(minutes=5), "tumbling_window", "size") == 300_000_000
    True
    >>> to_duration("250 ms", "shift", "delta"), to_duration(-3, "shift", "delta")
    (250000, -3)
    >>> to_duration("5", "session_window", "gap")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: session_window(gap='5'): '5' has no unit; give a string such as "5 min", ...
    """
    if value is None and optional:
        return None
    if type(value) is int:
        ticks = value
    elif isinstance(value, bool) or value is None:
        raise TypeError(f"{call}({arg}={value!r}): not a duration; {DURATION_HELP}")
    elif isinstance(value, _dt.timedelta):
        ticks = (value.days * TICKS_PER_DAY + value.seconds * TICKS_PER_SECOND
                 + value.microseconds)
        nanos = getattr(value, "nanoseconds", 0)  # a pandas Timedelta
        if nanos:
            raise ValueError(f"{call}({arg}={value!r}): {nanos} ns is finer than a tick "
                             f"(1 µs); round it to microseconds")
    elif isinstance(value, str):
        parsed = _parse_duration(value)
        if isinstance(parsed, str):
            raise ValueError(f"{call}({arg}={value!r}): {parsed}; {DURATION_HELP}")
        ticks = parsed
    elif type(value).__name__ == "timedelta64" and hasattr(value, "dtype"):
        if np.isnat(value):
            raise ValueError(f"{call}({arg}={value!r}): NaT is no duration; {DURATION_HELP}")
        unit, count = np.datetime_data(value.dtype)
        factor = UNITS.get(unit)
        if factor is None or unit in ("Y", "M"):
            raise ValueError(f"{call}({arg}={value!r}): a duration in {unit!r} has no fixed "
                             f"length; {DURATION_HELP}")
        n = int(value.astype(np.int64)) * count
        if factor < 0 and n % -factor:
            raise ValueError(f"{call}({arg}={value!r}): it is not a whole number of "
                             f"microseconds; round it to microseconds")
        ticks = from_units(n, factor)
    elif isinstance(value, numbers.Integral):
        ticks = int(value)
    else:
        kind = type(value).__name__
        raise TypeError(f"{call}({arg}={value!r}): a {kind} is not a duration; {DURATION_HELP}")
    if positive and ticks <= 0:
        raise ValueError(f"{call}({arg}={value!r}): {arg} must be a positive duration, got "
                         f"{ticks} ticks; {DURATION_HELP}")
    return ticks


def format_duration(ticks: int) -> str:
    """Ticks as a duration people read, exactly, in the largest units that divide it:
    ``"1 min"``, ``"1 h 30 min"``, ``"250 ms"``, ``"-5 s"``, ``"0 s"``;
    :func:`to_duration` reads it back to the same ticks.

    >>> [format_duration(t) for t in (60_000_000, 5_400_000_000, 250_000, 1_500, 0)]
    ['1 min', '1 h 30 min', '250 ms', '1 ms 500 µs', '0 s']
    """
    if ticks == 0:
        return "0 s"
    rest, parts = abs(ticks), []
    for per, unit in _SHOWN:
        if rest >= per:
            parts.append(f"{rest // per} {unit}")
            rest %= per
    return ("-" if ticks < 0 else "") + " ".join(parts)
