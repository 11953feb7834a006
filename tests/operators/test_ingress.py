"""Ingress: time conversion, shapes, CTI generation, late and bad rows, checkpoints.

The unit tests pin each rule of docs/ctis.md and docs/errors.md on a tiny input; the
property tests feed random
rows (disordered starts, edges closed later, bad rows, idle polls) and compare the output with
a from-scratch reference that applies the rules literally, row by row.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import cht_diff, to_cht, validate
from operators.errors import DeadLetter, LateEvent
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from operators.ingress import AdvanceTime, Ingress, ingest, to_ticks
from tests.kit import PROPERTY

INF = MAX_TIME
US = 1_000_000  # ticks per second


def checked(src: Ingress) -> Ingress:
    """Assert the invariants and the accounting equation of a source."""
    src._check()
    s = src.stats
    assert s["received"] == s["processed"] + s["dropped"] + s["adjusted"] + s["dead_lettered"]
    assert s["dropped"] + s["adjusted"] == len(src.late)
    assert s["dead_lettered"] == len(src.dead_letters)
    return src


def ctis(messages: list[Any]) -> list[int]:
    return [m.time for m in messages if type(m) is Cti]


# -- to_ticks ---------------------------------------------------------------------------------
def test_to_ticks_ints_pass_through_and_bools_are_refused():
    assert to_ticks(0) == 0
    assert to_ticks(-5) == -5
    assert to_ticks(MAX_TIME) == MAX_TIME
    assert to_ticks(np.int64(42)) == 42
    with pytest.raises(TypeError, match="bool"):
        to_ticks(True)


def test_to_ticks_datetimes_naive_is_utc_and_aware_is_converted():
    assert to_ticks(dt.datetime(1970, 1, 1)) == 0
    assert to_ticks(dt.datetime(1970, 1, 1, 0, 0, 1, 7)) == US + 7
    assert to_ticks(dt.datetime(1969, 12, 31, 23, 59, 59, 999_999)) == -1
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert to_ticks(dt.datetime(2010, 8, 10, 2, 0, tzinfo=plus2)) == to_ticks(
        dt.datetime(2010, 8, 10, 0, 0))
    assert to_ticks(dt.datetime(2010, 8, 10, tzinfo=dt.UTC)) == 1_281_398_400 * US


def test_to_ticks_is_exact_far_from_the_epoch():
    # float seconds would lose the last microsecond here
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999)
    assert to_ticks(last) == 253_402_300_799 * US + 999_999
    assert to_ticks(dt.datetime(1, 1, 1)) == -62_135_596_800 * US


def test_to_ticks_dates_numpy_and_iso_strings():
    assert to_ticks(dt.date(1970, 1, 2)) == 86_400 * US
    assert to_ticks(np.datetime64("1970-01-01T00:00:01", "s")) == US
    assert to_ticks(np.datetime64("1970-01-01T00:00:00.000001500", "ns")) == 1
    assert to_ticks(np.datetime64("1969-12-31T23:59:59.999999500", "ns")) == -1  # floored
    assert to_ticks(np.datetime64("1970-01-02", "D")) == 86_400 * US
    assert to_ticks(np.datetime64("1970-02", "M")) == 31 * 86_400 * US
    assert to_ticks(np.datetime64("1971", "Y")) == 365 * 86_400 * US
    assert to_ticks(np.datetime64(3, "10ms")) == 30_000
    assert to_ticks("2010-08-10T00:00:00Z") == to_ticks(dt.datetime(2010, 8, 10))
    assert to_ticks("2010-08-10T02:00:00+02:00") == to_ticks("2010-08-10")
    assert to_ticks(" 1970-01-01T00:00:00.000003 ") == 3
    assert to_ticks(12.0) == 12


@pytest.mark.parametrize("value, error, words", [
    (None, ValueError, "missing"),
    (math.nan, ValueError, "missing"),
    (np.datetime64("NaT"), ValueError, "missing"),
    (math.inf, ValueError, "not finite"),
    (1.5, ValueError, "whole number"),
    ("yesterday", ValueError, "ISO-8601"),
    ("", ValueError, "ISO-8601"),
    (2**64, ValueError, "outside"),
    (MIN_TIME - 1, ValueError, "outside"),
    (dt.timedelta(seconds=1), TypeError, "duration"),
    (object(), TypeError, "cannot read a time"),
    ([1], TypeError, "cannot read a time"),
])
def test_to_ticks_rejects_bad_values_and_says_how_to_fix(value, error, words):
    with pytest.raises(error, match=words) as info:
        to_ticks(value)
    assert "microseconds since 1970-01-01 UTC" in str(info.value)


# -- AdvanceTime and Ingress configuration ----------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"every": 0}, "every must be an int >= 1"),
    ({"every": True}, "every must be"),
    ({"every": 1.0}, "every must be"),
    ({"interval": 0}, "interval must be an int >= 1"),
    ({"delay": 1.5}, "delay must be an int"),
    ({"policy": "keep"}, "policy must be 'drop'"),
    ({"idle_timeout": 0}, "idle_timeout must be a positive"),
    ({"idle_timeout": -1.0}, "idle_timeout must be a positive"),
    ({"idle_timeout": math.inf}, "idle_timeout must be a positive"),
])
def test_advance_time_validates(kwargs, words):
    with pytest.raises((ValueError, TypeError), match=words):
        AdvanceTime(**kwargs)


def test_advance_time_is_a_frozen_value():
    a = AdvanceTime(every=1, delay=-1)
    assert a == AdvanceTime(every=1, delay=-1)
    with pytest.raises(AttributeError):
        a.every = 2  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, words", [
    ({"start": "t", "shape": "interval"}, "needs end="),
    ({"start": "t", "end": "e", "shape": "edge"}, "needs id="),
    ({"start": "t", "shape": "box"}, "shape must be one of"),
    ({"start": 3}, "column name"),
    ({"start": "t", "advance": {"every": 1}}, "AdvanceTime"),
])
def test_ingress_validates_its_configuration(kwargs, words):
    with pytest.raises((ValueError, TypeError), match=words):
        Ingress(**kwargs)


# -- shapes -----------------------------------------------------------------------------------
def test_points_mint_ids_and_carry_the_row_itself():
    rows = [{"t": 5, "v": "a"}, {"t": 3, "v": "b"}]
    src = Ingress(start="t")
    out = src.push(rows)
    assert out == [Insert(0, 5, 6, rows[0]), Insert(1, 3, 4, rows[1])]
    assert out[0].payload is rows[0]
    assert src.end() == [Cti(6)]
    checked(src)


def test_intervals_with_user_ids_and_callable_columns():
    rows = [("a", 1, 4), ("b", 2, 9)]
    src = Ingress(start=lambda r: r[1], end=lambda r: r[2], shape="interval",
                  id=lambda r: r[0])
    assert src.push(rows) == [Insert("a", 1, 4, rows[0]), Insert("b", 2, 9, rows[1])]
    assert src.end() == [Cti(9)]
    checked(src)


def test_datetime_columns_are_converted():
    t0 = dt.datetime(2010, 8, 10)
    rows = [{"t": t0}, {"t": "2010-08-10T00:00:01Z"}, {"t": np.datetime64("2010-08-10", "D")}]
    out = ingest(rows, start="t")
    base = to_ticks(t0)
    assert [m.start for m in out if type(m) is Insert] == [base, base + US, base]


def test_edges_open_then_close_with_the_start_row_as_payload():
    opened, closed = {"k": "a", "s": 5, "e": None}, {"k": "a", "e": 12}
    src = Ingress(start="s", end="e", shape="edge", id="k")
    out = src.push([opened, {"k": "b", "s": 7, "e": math.nan}, closed])
    assert out == [Insert("a", 5, INF, opened), Insert("b", 7, INF, out[1].payload),
                   Retract("a", 5, INF, 12, opened)]
    assert out[2].payload is opened
    assert src.state_size() == 1  # b is still open
    # the final CTI is past every finite end, and one tick past the start of an open edge
    assert src.end() == [Cti(12)]
    assert to_cht(out) == [(5, 12, opened), (7, INF, out[1].payload)]
    checked(src)


# -- CTI generation ---------------------------------------------------------------------------
def test_every_n_events_emits_latest_start_minus_delay():
    src = Ingress(start="t", advance=AdvanceTime(every=2, delay=3))
    out = src.push([{"t": t} for t in (10, 14, 12, 20, 21)])
    #  events 10 14 | 12 20 | 21     CTI after each 2nd event: latest start − 3
    assert [type(m).__name__ for m in out] == ["Insert"] * 2 + ["Cti"] + ["Insert"] * 2 + [
        "Cti", "Insert"]
    assert ctis(out) == [11, 17]
    checked(src)


def test_interval_emits_when_the_latest_start_moved_far_enough():
    src = Ingress(start="t", advance=AdvanceTime(interval=10))
    out = src.push([{"t": t} for t in (0, 5, 9, 10, 12, 19, 25, 31)])
    # mark 0 → 10 (CTI 10) → 25 (moved 15 ≥ 10, CTI 25); 31 moved only 6 since 25
    assert ctis(out) == [10, 25]
    checked(src)


def test_every_and_interval_together_and_ctis_never_go_back():
    src = Ingress(start="t", advance=AdvanceTime(every=3, interval=100, delay=1))
    out = src.push([{"t": t} for t in (1, 2, 3, 200, 4, 5, 6)])
    # every: after the 3rd event (latest 3 → CTI 2); interval: the mark is the first start 1,
    # and 200 moved ≥ 100 past it (CTI 199); 4, 5 and 6 are then behind the CTI: dropped
    assert ctis(out) == [2, 199]
    assert src.stats["dropped"] == 3
    checked(src)


def test_without_every_or_interval_only_the_final_cti():
    src = Ingress(start="t")
    out = src.push([{"t": 1}, {"t": 0}])
    assert ctis(out) == []
    assert src.end() == [Cti(2)]


def test_delay_is_clamped_to_the_time_axis():
    src = Ingress(start="t", advance=AdvanceTime(every=1, delay=-10))
    assert src.push([{"t": MAX_TIME - 5}])[-1] == Cti(MAX_TIME)
    assert src.end() == []


# -- late events ------------------------------------------------------------------------------
def test_drop_policy_drops_late_points_and_records_them():
    src = Ingress(start="t", advance=AdvanceTime(every=1))
    row = {"t": 3}
    out = src.push([{"t": 5}, row, {"t": 5}])
    assert out == [Insert(0, 5, 6, {"t": 5}), Cti(5), Insert(1, 5, 6, {"t": 5})]
    assert src.late == [LateEvent("source", "dropped", src.late[0].reason, row, None)]
    assert "behind the CTI 5" in src.late[0].reason and "delay" in src.late[0].reason
    assert src.stats["dropped"] == 1
    checked(src)


def test_adjust_policy_moves_intervals_but_never_points():
    adv = AdvanceTime(every=1, policy="adjust")
    src = Ingress(start="s", end="e", shape="interval", advance=adv)
    early, late_long, late_short = {"s": 10, "e": 11}, {"s": 4, "e": 15}, {"s": 4, "e": 10}
    out = src.push([early, late_long, late_short])
    adjusted = Insert(1, 10, 15, late_long)
    assert out == [Insert(0, 10, 11, early), Cti(10), adjusted]
    assert [(x.action, x.item, x.event) for x in src.late] == [
        ("adjusted", late_long, adjusted), ("dropped", late_short, None)]
    checked(src)
    points = Ingress(start="s", advance=adv)
    assert points.push([{"s": 10}, {"s": 4}]) == [Insert(0, 10, 11, {"s": 10}), Cti(10)]
    assert "a point cannot be moved" in points.late[0].reason
    checked(points)


def test_late_edges_adjust_and_drop():
    adv = AdvanceTime(every=1, policy="adjust")
    src = Ingress(start="s", end="e", shape="edge", id="k", advance=adv)
    a, b = {"k": "a", "s": 20}, {"k": "b", "s": 5}
    out = src.push([a, b, {"k": "b", "e": 8}, {"k": "a", "e": 30}])
    # b starts behind the CTI 20: moved to [20, ∞); its end 8 is not after the start the
    # edge now has (20), so that end edge is a dead letter and b stays open
    assert out == [Insert("a", 20, INF, a), Cti(20), Insert("b", 20, INF, b),
                   Retract("a", 20, INF, 30, a)]
    assert src.dead_letters[0].item == {"k": "b", "e": 8}
    assert "not after the edge's start 20" in src.dead_letters[0].reason
    checked(src)

    drop = Ingress(start="s", end="e", shape="edge", id="k", advance=AdvanceTime(every=1))
    out = drop.push([{"k": "a", "s": 1}, {"k": "b", "s": 9}, {"k": "a", "e": 5},
                     {"k": "c", "s": 2}, {"k": "c", "e": 12}])
    # a opens at 1 (CTI 1), b at 9 (CTI 9); a's end 5 is behind 9: dropped, a stays open;
    # c starts behind 9: dropped, and so is its end edge (nothing to close)
    assert out == [Insert("a", 1, INF, {"k": "a", "s": 1}), Cti(1),
                   Insert("b", 9, INF, {"k": "b", "s": 9}), Cti(9)]
    assert [x.action for x in drop.late] == ["dropped"] * 3
    assert "start edge was dropped" in drop.late[2].reason
    assert drop.state_size() == 2
    checked(drop)


def test_adjusted_end_edge_ends_at_the_cti():
    src = Ingress(start="s", end="e", shape="edge", id="k",
                  advance=AdvanceTime(every=1, policy="adjust"))
    a = {"k": "a", "s": 1}
    out = src.push([a, {"k": "b", "s": 9}, {"k": "a", "e": 5}])
    assert out[-1] == Retract("a", 1, INF, 9, a)
    assert src.late[-1].action == "adjusted" and src.late[-1].event == out[-1]
    assert src.end() == [Cti(10)]
    validate(out + [Cti(10)])
    checked(src)


# -- dead letters -----------------------------------------------------------------------------
@pytest.mark.parametrize("shape, row, words", [
    ("point", {"v": 1}, "start time is missing"),
    ("point", {"t": None}, "start time is missing"),
    ("point", {"t": math.nan}, "missing time (NaN)"),
    ("point", {"t": "noon"}, "cannot parse 'noon'"),
    ("point", {"t": 2**64}, "outside [MIN_TIME, MAX_TIME]"),
    ("point", {"t": MAX_TIME}, "a point [start, start + 1) needs start < MAX_TIME"),
    ("point", [1, 2], "a row must be a dict"),
    ("interval", {"t": 5, "e": 5}, "end 5 is not after start 5"),
    ("interval", {"t": 5, "e": None}, "end time is missing"),
    ("interval", {"t": 5, "e": 3}, "needs end > start"),
    ("edge", {"k": "zz", "e": 9}, "no edge with that id is open"),
    ("edge", {"k": None, "t": 9}, "the id is missing"),
    ("edge", {"k": ["unhashable"], "t": 9}, "ids must be hashable"),
    ("edge", {"k": "a", "e": 1}, "end 1 is not after the edge's start 1"),
    ("edge", {"k": "a", "e": MAX_TIME}, "leave the end empty"),
    ("edge", {"k": "a", "t": 4}, "already open"),
])
def test_bad_rows_go_to_dead_letters_and_processing_continues(shape, row, words):
    kw = {"start": "t", "end": "e", "shape": shape, "id": "k", "name": "meters"}
    src = Ingress(**kw)  # type: ignore[arg-type]
    first = {"k": "a", "t": 1, "e": None if shape == "edge" else 2}
    out = src.push([first, row, {"k": "b", "t": 3, "e": None if shape == "edge" else 4}])
    assert len([m for m in out if type(m) is Insert]) == 2
    assert src.dead_letters == [DeadLetter("meters", src.dead_letters[0].reason, row)]
    assert words in src.dead_letters[0].reason
    checked(src)


def test_duplicate_and_reused_ids_are_dead_letters():
    src = Ingress(start="t", id="k")
    src.push([{"k": 1, "t": 1}, {"k": 1, "t": 2}])
    assert "duplicate id 1" in src.dead_letters[0].reason
    edges = Ingress(start="t", end="e", shape="edge", id="k")
    edges.push([{"k": 1, "t": 1}, {"k": 1, "e": 3}, {"k": 1, "t": 4}])
    assert "used by an earlier event" in edges.dead_letters[0].reason
    checked(src), checked(edges)


def test_a_failing_column_function_is_a_dead_letter():
    src = Ingress(start=lambda r: r["when"])
    assert src.push([{"x": 1}, {"when": 2}]) == [Insert(0, 2, 3, {"when": 2})]
    assert "KeyError" in src.dead_letters[0].reason
    checked(src)


# -- end of input -----------------------------------------------------------------------------
def test_final_cti_is_past_every_finite_endpoint_and_never_backwards():
    src = Ingress(start="s", end="e", shape="interval", advance=AdvanceTime(every=1, delay=-50))
    src.push([{"s": 1, "e": 20}])
    assert src.cti == 51
    assert src.end() == []  # the end 20 is behind the CTI 51 already
    assert src.end() == []
    with pytest.raises(RuntimeError, match="after end"):
        src.push([{"s": 60, "e": 61}])
    assert Ingress(start="t").end() == []  # no events, nothing to promise
    # an interval to ∞ counts like an open edge: one tick past its start
    assert ingest([{"s": 3, "e": INF}, {"s": 1, "e": 2}], start="s", end="e",
                  shape="interval")[-1] == Cti(4)


# -- idle timeout -----------------------------------------------------------------------------
def test_idle_timeout_flushes_once_per_quiet_period():
    src = Ingress(start="t", advance=AdvanceTime(every=1, idle_timeout=0.5))
    assert ctis(src.push([{"t": 4}, {"t": 4}], now=100.0)) == [4]
    assert src.poll(100.4) == []
    assert src.poll(100.5) == [Cti(5)]
    assert src.poll(101.0) == [] and src.poll(200.0) == []
    src.push([{"t": 9}], now=200.0)
    assert src.poll(200.2) == []  # the push restarted the timer
    assert src.poll(200.6) == [Cti(10)]
    assert src.push([], now=300.0) == [] and src.poll(300.1) == []
    assert src.stats["ctis"] == 4
    checked(src)


def test_idle_timeout_without_a_clock_starts_timing_at_the_first_poll():
    src = Ingress(start="t", advance=AdvanceTime(idle_timeout=1.0))
    src.push([{"t": 4}])
    assert src.poll(10.0) == []
    assert src.poll(11.0) == [Cti(5)]
    assert Ingress(start="t").poll(1e9) == []  # no idle_timeout, no idle CTI


# -- checkpoints ------------------------------------------------------------------------------
def test_snapshot_restore_mid_stream_gives_identical_output():
    cfg = {"start": "s", "end": "e", "shape": "edge", "id": "k",
           "advance": AdvanceTime(every=2, delay=1, policy="adjust", idle_timeout=1.0)}
    rows = [{"k": i % 5, "s": 3 * i - (i % 3)} if i % 2 == 0 else
            {"k": (i - 1) % 5, "e": 3 * i + 4} for i in range(20)]
    whole = Ingress(**cfg)  # type: ignore[arg-type]
    expected = whole.push(rows[:9], now=1.0) + whole.poll(5.0) + whole.push(rows[9:], now=6.0)
    expected += whole.end()
    first = Ingress(**cfg)  # type: ignore[arg-type]
    out = first.push(rows[:9], now=1.0)
    state = first.snapshot()
    first.push([{"k": 99, "s": 0}])  # later changes to the original do not leak into it
    second = Ingress(**cfg)  # type: ignore[arg-type]
    second.restore(state)
    out += second.poll(5.0) + second.push(rows[9:], now=6.0) + second.end()
    assert out == expected
    assert second.stats == whole.stats and second.late == whole.late
    assert second.dead_letters == whole.dead_letters
    checked(second)
    with pytest.raises(ValueError, match="not a snapshot of Ingress"):
        second.restore({"cti": 3})


# -- property tests against a from-scratch reference ------------------------------------------
BAD_ROWS = [
    lambda n: {"v": n},                           # no start
    lambda n: {"s": None, "v": n},
    lambda n: {"s": "garbage", "v": n},
    lambda n: {"s": math.nan, "v": n},
    lambda n: {"s": 2**64, "v": n},
    lambda n: ["not", "a", "dict", n],
]


@st.composite
def scenarios(draw: Any) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """A source configuration and a list of steps: ``("push", rows, now)`` / ``("poll", now)``.
    Starts move forward with disorder; edges are closed later (sometimes before their start,
    sometimes twice); some rows are bad."""
    shape = draw(st.sampled_from(["point", "interval", "edge"]))
    with_ids = shape == "edge" or draw(st.booleans())
    advance = AdvanceTime(
        every=draw(st.sampled_from([None, 1, 2, 3])),
        interval=draw(st.sampled_from([None, 1, 4, 10])),
        delay=draw(st.integers(-2, 4)),
        policy=draw(st.sampled_from(["drop", "adjust"])),
        idle_timeout=draw(st.sampled_from([None, 0.5])),
    )
    config = {"start": "s", "end": "e" if shape != "point" else None, "shape": shape,
              "id": "k" if with_ids else None, "advance": advance}
    base, clock = 0, 0.0
    opened: list[tuple[str, int]] = []
    steps: list[tuple[Any, ...]] = []
    batch: list[Any] = []
    for n in range(1, draw(st.integers(0, 40)) + 1):
        kind = draw(st.sampled_from(["row"] * 6 + ["bad", "push", "poll"]
                                    + (["close"] * 3 if shape == "edge" else [])))
        if kind in ("push", "poll"):
            clock += draw(st.sampled_from([0.1, 0.3, 0.6]))
            steps.append(("push", batch, clock))
            batch = []
            if kind == "poll":
                clock += draw(st.sampled_from([0.1, 0.5, 1.0]))
                steps.append(("poll", clock))
        elif kind == "bad":
            if draw(st.booleans()) and with_ids and opened:  # a reused id
                batch.append({"k": draw(st.sampled_from(opened))[0], "s": base, "v": n})
            else:
                batch.append(draw(st.sampled_from(BAD_ROWS))(n))
        elif kind == "close":
            if opened and draw(st.integers(0, 4)):
                key, s = draw(st.sampled_from(opened))
            else:
                key, s = "unknown", base
            batch.append({"k": key, "e": s + draw(st.integers(-1, 8)), "v": n})
        else:
            base += draw(st.integers(0, 3))
            start = base + draw(st.integers(-5, 1))
            row: dict[str, Any] = {"s": start, "v": n}
            if with_ids:
                row["k"] = f"k{n}"
                opened.append((row["k"], start))
            if shape == "interval":
                row["e"] = start + draw(st.integers(0, 8))  # 0: end == start, a dead letter
            elif shape == "edge" and draw(st.booleans()):
                row["e"] = None
            batch.append(row)
    steps.append(("push", batch, clock + 0.1))
    return config, steps


def reference(config: dict[str, Any], steps: list[tuple[Any, ...]]) -> dict[str, Any]:
    """docs/ctis.md applied literally, row by row: the CHT, the CTI times, and which rows were
    processed, adjusted, dropped or dead-lettered (by identity)."""
    adv, shape = config["advance"], config["shape"]
    cti = MIN_TIME
    times: list[int] = []
    events: dict[Any, list[Any]] = {}  # id -> [start, end, row]
    used: set[Any] = set()
    dropped_starts: set[Any] = set()
    fate: dict[int, str] = {}
    starts: list[int] = []  # original starts of accepted events
    sent: list[int] = []  # starts as sent
    reach: list[int] = []  # finite ends (start + 1 for ∞)
    since_every = 0
    mark = None
    last_push = None
    minted = 0

    def good(v: Any) -> bool:
        return type(v) is int and MIN_TIME <= v <= MAX_TIME

    def move_to(t: int) -> None:
        nonlocal cti
        if t > cti:
            cti = t
            times.append(t)

    def generated() -> None:
        nonlocal since_every, mark
        fire = False
        if adv.every:
            since_every += 1
            if since_every == adv.every:
                since_every, fire = 0, True
        if adv.interval:
            if mark is None:
                mark = max(starts)
            elif max(starts) - mark >= adv.interval:
                mark, fire = max(starts), True
        if fire:
            move_to(min(max(max(starts) - adv.delay, MIN_TIME), MAX_TIME))

    for step in steps:
        if step[0] == "poll":
            if (adv.idle_timeout and sent and max(sent) + 1 > cti
                    and step[1] - last_push >= adv.idle_timeout):
                move_to(max(sent) + 1)
            continue
        _, rows, now = step
        if rows:
            last_push = now
        for row in rows:
            key = id(row)
            if not isinstance(row, dict):
                fate[key] = "dead"
                continue
            k = row.get("k")
            if shape == "edge" and row.get("e") is not None:  # an end edge
                e = row["e"]
                if k not in events or events[k][1] != INF:
                    if k in dropped_starts and k not in events:
                        dropped_starts.discard(k)
                        fate[key] = "dropped"
                    else:
                        fate[key] = "dead"
                elif e <= events[k][0]:
                    fate[key] = "dead"
                elif e >= cti:
                    events[k][1] = e
                    fate[key] = "processed"
                elif adv.policy == "adjust":
                    events[k][1] = cti
                    fate[key] = "adjusted"
                else:
                    fate[key] = "dropped"
                if fate[key] in ("processed", "adjusted"):
                    reach.append(events[k][1])
                    generated()
                continue
            s = row.get("s")
            if not good(s) or s >= MAX_TIME:
                fate[key] = "dead"
                continue
            e = s + 1 if shape == "point" else INF if shape == "edge" else row.get("e")
            if not good(e) or e <= s or (
                    config["id"] and (k is None or k in used)):
                fate[key] = "dead"
                continue
            start = s
            if s < cti:
                if adv.policy == "adjust" and e > cti:
                    start = cti
                else:
                    fate[key] = "dropped"
                    if shape == "edge":
                        dropped_starts.add(k)
                    continue
            if k is None:
                k, minted = minted, minted + 1
            used.add(k)
            events[k] = [start, e, row]
            fate[key] = "processed" if start == s else "adjusted"
            starts.append(s)
            sent.append(start)
            reach.append(e if e != INF else start + 1)
            generated()
    if reach:
        move_to(max(reach))
    return {"cht": [tuple(v) for v in events.values()], "ctis": times, "fate": fate}


def run_steps(config: dict[str, Any], steps: list[tuple[Any, ...]],
              cut: int | None = None) -> tuple[list[Any], Ingress]:
    """Run the steps, checking invariants after each; with ``cut``, checkpoint before step
    ``cut`` and continue on a fresh source restored from the snapshot."""
    src = Ingress(**config)
    out: list[Any] = []
    for i, step in enumerate(steps):
        if i == cut:
            state = src.snapshot()
            src = Ingress(**config)
            src.restore(state)
        out += src.push(step[1], now=step[2]) if step[0] == "push" else src.poll(step[1])
        checked(src)
    out += src.end()
    checked(src)
    return out, src


@PROPERTY
@given(scenario=scenarios(), data=st.data())
def test_ingress_matches_the_reference(scenario, data):
    config, steps = scenario
    out, src = run_steps(config, steps)
    validate(out, name="ingress output")
    expected = reference(config, steps)
    assert cht_diff(out, expected["cht"], digits=None) is None, cht_diff(out, expected["cht"])
    assert ctis(out) == expected["ctis"]

    fate = {id(x.item): x.action for x in src.late}
    fate.update({id(x.item): "dead" for x in src.dead_letters})
    rows = [r for step in steps if step[0] == "push" for r in step[1]]
    fate.update({id(r): "processed" for r in rows if id(r) not in fate})
    assert fate == expected["fate"]
    s = src.stats
    assert s["received"] == len(rows)
    assert s["received"] == s["processed"] + s["dropped"] + s["adjusted"] + s["dead_lettered"]

    # every row not late and not dead-lettered is in the CHT with its own lifetime
    cht = to_cht(out)
    by_row = {id(p): (b, e) for b, e, p in cht}
    for r in rows:
        if fate[id(r)] == "processed" and (config["shape"] != "edge" or "s" in r):
            assert id(r) in by_row and by_row[id(r)][0] == r["s"]
            if config["shape"] == "interval":
                assert by_row[id(r)][1] == r["e"]
    for x in src.late:
        if x.action == "adjusted" and type(x.event) is Insert:
            assert x.event in out and x.event.start >= x.item["s"]

    # a checkpoint anywhere gives the same physical output
    cut = data.draw(st.integers(0, len(steps)), label="cut")
    again, _ = run_steps(config, steps, cut)
    assert again == out


@PROPERTY
@given(starts=st.lists(st.integers(-50, 50), max_size=30), seed=st.integers(0, 2**16))
def test_batching_does_not_change_the_output(starts, seed):
    rows = [{"s": s} for s in starts]
    adv = AdvanceTime(every=2, interval=5, delay=2, policy="adjust")
    whole = ingest(rows, start="s", advance=adv)
    rng = random.Random(seed)
    src, out, i = Ingress(start="s", advance=adv), [], 0
    while i < len(rows):
        k = rng.randint(1, 4)
        out += src.push(rows[i:i + k])
        checked(src)
        i += k
    assert out + src.end() == whole
