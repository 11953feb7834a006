"""Durations (issue 41, item 10): every argument that takes a span of time takes it as an int of
ticks, a ``datetime.timedelta`` or a string such as ``"5 min"``, and all three build the same
query; a bad one fails at the builder call, naming the method called and the argument, and
saying which forms are accepted; ``explain()`` shows durations in units where times are
timestamps, as ticks where they are plain integers (:mod:`operators.ticks`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.ticks import format_duration, to_duration
from tests.kit import PROPERTY
from topology import AdvanceTime, Count, Stream

#: unit -> (its ticks, its name in a string, its timedelta keyword)
UNITS = {"ms": (1_000, "ms", "milliseconds"), "s": (1_000_000, "s", "seconds"),
         "min": (60_000_000, "min", "minutes"), "h": (3_600_000_000, "h", "hours"),
         "day": (86_400_000_000, "days", "days")}


def forms(k: int, unit: str) -> tuple[str, dt.timedelta, int]:
    """``k`` units written the three ways: ``"5 min"``, ``timedelta(minutes=5)``, ticks."""
    ticks, name, keyword = UNITS[unit]
    return f"{k} {name}", dt.timedelta(**{keyword: k}), k * ticks


#: method -> a query over rows {"t", "k"} taking one duration d (and its multiples)
Query = Callable[[Stream, Callable[[int], Any]], Stream]
QUERIES: dict[str, Query] = {
    "tumbling_window": lambda s, d: s.tumbling_window(d(1)).aggregate(Count()),
    "tumbling_window alignment": lambda s, d: s.tumbling_window(d(2), d(1)).aggregate(Count()),
    "hopping_window": lambda s, d: s.hopping_window(d(3), d(1), d(1)).aggregate(Count()),
    "session_window": lambda s, d: s.session_window(d(1), d(3)).aggregate(Count()),
    "shift": lambda s, d: s.shift(d(1)),
    "shift back": lambda s, d: s.shift(d(-2)),
    "clip_duration": lambda s, d: s.alter_lifetime(duration=d(4)).clip_duration(d(1)),
    "alter_lifetime": lambda s, d: s.alter_lifetime(duration=d(2)),
    "group_apply window": lambda s, d: s.group_apply(
        "k", lambda g: g.hopping_window(d(2), d(1)).aggregate(Count())),
}


def _rows(starts: list[int], ticks: int) -> list[dict[str, int]]:
    return [{"t": t * ticks // 4, "k": i % 2} for i, t in enumerate(starts)]


@pytest.mark.parametrize("method", sorted(QUERIES))
@PROPERTY
@given(k=st.integers(1, 5), unit=st.sampled_from(sorted(UNITS)),
       starts=st.lists(st.integers(0, 60), min_size=1, max_size=12))
def test_a_string_a_timedelta_and_ticks_build_the_same_query(method: str, k: int, unit: str,
                                                             starts: list[int]) -> None:
    rows = _rows(starts, UNITS[unit][0])
    results = []
    for form in range(3):
        def d(m: int, form: int = form) -> Any:
            value = forms(k * abs(m), unit)[form]
            return value if m > 0 else "-" + value if isinstance(value, str) else -value

        q = QUERIES[method](Stream.from_rows(rows, start="t"), d)
        results.append((q.explain(stages=False), to_cht(q.collect(runtime="inline"))))
    assert results[0] == results[1] == results[2]


@PROPERTY
@given(k=st.integers(1, 5), unit=st.sampled_from(sorted(UNITS)),
       starts=st.lists(st.integers(0, 60), min_size=1, max_size=12))
def test_advance_time_takes_durations(k: int, unit: str, starts: list[int]) -> None:
    rows = _rows(starts, UNITS[unit][0])
    out = []
    for form in forms(k, unit):
        advance = AdvanceTime(interval=form, delay=form)
        assert (advance.interval, advance.delay) == (forms(k, unit)[2],) * 2
        out.append(Stream.from_rows(rows, start="t", advance=advance)
                   .tumbling_window(forms(k, unit)[2]).aggregate(Count())
                   .collect(runtime="inline"))
    assert out[0] == out[1] == out[2]


def test_idle_timeout_is_wall_clock_seconds_in_every_form() -> None:
    # a plain number stays seconds; a timedelta or a string is a span of time like any other
    assert AdvanceTime(idle_timeout="250 ms").idle_timeout == 0.25
    assert AdvanceTime(idle_timeout=dt.timedelta(seconds=2)).idle_timeout == 2.0
    assert AdvanceTime(idle_timeout=3).idle_timeout == 3


@PROPERTY
@given(st.integers(-10**15, 10**15))
def test_format_duration_reads_back_exactly(ticks: int) -> None:
    assert to_duration(format_duration(ticks), "f", "x") == ticks


# -- bad durations fail at the call, naming it -------------------------------------------------
S = Stream.from_rows([{"t": 0}], start="t")
#: (the call, with a bad duration, the method and argument its message must name)
BAD: list[tuple[str, Callable[[Any], Any], str]] = [
    ("tumbling_window", lambda v: S.tumbling_window(v), "tumbling_window(size="),
    ("tumbling_window alignment", lambda v: S.tumbling_window(10, v),
     "tumbling_window(alignment="),
    ("hopping_window size", lambda v: S.hopping_window(v, 10), "hopping_window(size="),
    ("hopping_window hop", lambda v: S.hopping_window(10, v), "hopping_window(hop="),
    ("session_window gap", lambda v: S.session_window(v), "session_window(gap="),
    ("session_window max_duration", lambda v: S.session_window(1, v),
     "session_window(max_duration="),
    ("shift", lambda v: S.shift(v), "shift(delta="),
    ("clip_duration", lambda v: S.clip_duration(v), "clip_duration(limit="),
    ("alter_lifetime", lambda v: S.alter_lifetime(duration=v), "alter_lifetime(duration="),
    ("AdvanceTime interval", lambda v: AdvanceTime(interval=v), "AdvanceTime(interval="),
    ("AdvanceTime delay", lambda v: AdvanceTime(delay=v), "AdvanceTime(delay="),
]
#: positive durations: also zero and negative ones are refused
POSITIVE = {"tumbling_window", "hopping_window size", "hopping_window hop", "session_window gap",
            "session_window max_duration", "clip_duration", "alter_lifetime",
            "AdvanceTime interval"}
VALUES = ["5", "5 parsecs", "soon", 1.5, "0.5 us", True]
CASES = [(name, call, names, v) for name, call, names in BAD
         for v in VALUES + ([dt.timedelta(0), "-5 min"] if name in POSITIVE else [])]


@pytest.mark.parametrize("name,call,names,value", CASES,
                         ids=[f"{c[0]}-{c[3]!r}" for c in CASES])
def test_a_bad_duration_fails_at_the_call_naming_it(name: str, call: Callable[[Any], Any],
                                                    names: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        call(value)
    text = str(info.value)
    assert text.startswith(names), text
    assert '"5 min"' in text and "timedelta(minutes=5)" in text and "1 tick = 1 µs" in text


def test_tumbling_window_of_a_timedelta_works_and_errors_name_it() -> None:
    # it used to fail with a message naming hopping_window
    spec = S.tumbling_window(dt.timedelta(minutes=1)).spec
    assert (spec.size, spec.hop) == (60_000_000, 60_000_000)
    with pytest.raises(ValueError, match=r"^tumbling_window\(size=") as info:
        S.tumbling_window(dt.timedelta(0))
    assert "hopping" not in str(info.value)


# -- explain() shows durations -----------------------------------------------------------------
def test_explain_shows_durations_in_units_where_times_are_timestamps() -> None:
    rows = [{"t": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "k": 1}]
    q = (Stream.from_rows(rows, start="t").shift("-250 ms").clip_duration("1 h 30 min")
         .group_apply("k", lambda g: g.hopping_window("5 min", "30 s").aggregate(Count()))
         .session_window(dt.timedelta(minutes=1), "2 days").aggregate(Count()))
    text = q.explain()
    for shown in ("shift(-250 ms)", "clip_duration(1 h 30 min)", "size=5 min, hop=30 s",
                  "gap=1 min, max_duration=2 d"):
        assert shown in text, (shown, text)
    assert "60000000" not in text and "HoppingWindow" not in text


def test_explain_shows_ticks_where_times_are_plain_integers() -> None:
    q = S.tumbling_window("1 min").aggregate(Count()).shift(5)
    text = q.explain(stages=False)
    assert "tumbling.aggregate(Count(), size=60000000)" in text and "shift(5)" in text
