"""Count windows against the from-scratch reference on random valid physical streams.

Each case of :data:`CASES` is ``(factory, reference, query)``: the operator, the reference
(:mod:`tests.reference_count`) over the input's CHT, and the same query for the fluent builder
(run when :class:`topology.Stream` exists). Cases cover both ``by`` modes, ``n`` in {1, 2, 3}
and every kind of UDM: Aggregate, plain function, TimeSensitiveAggregate, IncrementalAggregate
(time-insensitive and time-sensitive), Operator, TimeSensitiveOperator, a plain function under
``apply`` and built-in aggregates. The test UDMs return their whole input (sorted), so any
wrong membership, clipping or delta shows up in the CHT.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Min, Sum, TimeWeightedAverage
from operators.cht import to_cht, validate
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.udm import (
    Aggregate,
    IncrementalAggregate,
    Operator,
    TimeSensitiveAggregate,
    TimeSensitiveOperator,
    Window,
)
from operators.windows import CountWindow
from operators.windows.count import CountWindowOperator
from tests import reference_count as ref
from tests.kit import (
    INF,
    ON_RAY,
    PROPERTY,
    assert_equivalent,
    final_time,
    physical_streams,
    run_operator,
)
from topology import Stream


# -- test UDMs: each returns enough of its input to expose any mistake ---------------------------
class SortedValues(Aggregate):
    def compute(self, values):
        return tuple(sorted(values))


def total(values):
    return sum(values)


def distinct(values):
    return sorted(set(values))


class ClippedEvents(TimeSensitiveAggregate):
    def compute(self, events, window):
        return (tuple(window), tuple(sorted(events)))


class Multiset(IncrementalAggregate):
    """The window's inputs as a sorted tuple, kept from deltas; refuses to remove an input
    that was never added (a wrong delta fails loudly)."""

    def initial_state(self):
        return Counter()

    def add(self, state, values):
        state.update(values)
        return state

    def remove(self, state, values):
        for v in values:
            if state[v] <= 0:
                raise AssertionError(f"removing {v!r}, which is not in the window")
            state[v] -= 1
        return state

    def result(self, state):
        return tuple(sorted(state.elements()))


class ClippedMultiset(Multiset):
    time_sensitive = True

    def window_result(self, state, window):
        return (tuple(window), self.result(state))


class EvenValues(Operator):
    def compute(self, values):
        return [v for v in sorted(set(values)) if v % 2 == 0]  # often empty: no output


class ClippedSpans(TimeSensitiveOperator):
    def compute(self, events, window):
        return [(s, e, (s - window.start, e - s, p)) for s, e, p in events]


def _case(n: int, by: str, make_udm: Any, kind: str = "aggregate") -> tuple[Any, Any, Any]:
    spec = CountWindow(n, by)

    def factory():
        return CountWindowOperator(spec, make_udm(), kind=kind)

    def reference(rows):
        return ref.count_window(rows, n, by, make_udm(), kind)

    def query(stream):
        return getattr(stream.count_window(n, by=by), kind)(make_udm())

    return factory, reference, query


CASES: dict[str, tuple[Any, Any, Any]] = {
    "start1_values": _case(1, "start", SortedValues),
    "start2_values": _case(2, "start", SortedValues),
    "start3_values": _case(3, "start", SortedValues),
    "start2_function": _case(2, "start", lambda: total),
    "start1_clipped": _case(1, "start", ClippedEvents),
    "start3_clipped": _case(3, "start", ClippedEvents),
    "start2_incremental": _case(2, "start", Multiset),
    "start3_incremental_clipped": _case(3, "start", ClippedMultiset),
    "start2_udo": _case(2, "start", EvenValues, "apply"),
    "start3_udo_clipped": _case(3, "start", ClippedSpans, "apply"),
    "start2_function_apply": _case(2, "start", lambda: distinct, "apply"),
    "start3_count": _case(3, "start", Count),
    "start3_max": _case(3, "start", Max),
    "start2_min": _case(2, "start", Min),
    "start2_twa": _case(2, "start", TimeWeightedAverage),
    "end1_values": _case(1, "end", SortedValues),
    "end2_values": _case(2, "end", SortedValues),
    "end3_values": _case(3, "end", SortedValues),
    "end3_function": _case(3, "end", lambda: total),
    "end2_clipped": _case(2, "end", ClippedEvents),
    "end3_incremental": _case(3, "end", Multiset),
    "end1_incremental_clipped": _case(1, "end", ClippedMultiset),
    "end2_incremental_clipped": _case(2, "end", ClippedMultiset),
    "end3_udo": _case(3, "end", EvenValues, "apply"),
    "end2_udo_clipped": _case(2, "end", ClippedSpans, "apply"),
    "end1_function_apply": _case(1, "end", lambda: distinct, "apply"),
    "end2_sum": _case(2, "end", Sum),
    "end3_max": _case(3, "end", Max),
    "end2_min": _case(2, "end", Min),
    "end3_twa": _case(3, "end", TimeWeightedAverage),
}

#: wide streams, and narrow ones where ties (equal starts and ends) are frequent
STREAMS = st.one_of(physical_streams(), physical_streams(span=6, max_length=6))
STREAMS_NO_EDGES = st.one_of(physical_streams(edges=False),
                             physical_streams(span=6, max_length=6, edges=False))


def _spec(case: str) -> CountWindow:
    return CASES[case][0]().spec


def _keys(rows, by):
    return sorted({s if by == "start" else e for s, e, _ in rows
                   if by == "start" or e != MAX_TIME})


def expected_cti(stream, spec: CountWindow) -> int:
    """The output CTI after the input's final CTI c: every future window ends at the n-th
    distinct time or later, so with r distinct times before c it is c + max(0, n - 1 - r)."""
    c = final_time(stream)
    r = bisect_left(_keys(to_cht(stream), spec.by), c)
    return c + max(0, spec.n - 1 - r)


def state_bound(stream, spec: CountWindow) -> int:
    """After the final CTI the operator may hold only the events at the last n distinct times
    (the windows not final yet start there) and at most one complete window."""
    rows = to_cht(stream)
    last = set(_keys(rows, spec.by)[-spec.n:])
    return sum(1 for s, e, _ in rows if (s if spec.by == "start" else e) in last) + 1


def _check_case(case: str, stream, cut: int) -> None:
    factory, reference, _ = CASES[case]
    out = run_operator(factory, stream, seed=cut, restore_at=cut)
    try:
        assert_equivalent(out, reference(to_cht(stream)))
        spec = _spec(case)
        assert final_time(out) == expected_cti(stream, spec), "output CTI"
        op = factory()
        whole = op.process(stream)  # one batch: each window refreshed once per CTI
        validate(whole)
        assert_equivalent(whole, reference(to_cht(stream)))
        assert op.state_size() <= state_bound(stream, spec), "state after the final CTI"
    except AssertionError as exc:
        raise AssertionError(f"case {case}: {exc}") from exc


#: cases grouped by UDM (the part of the name after "start2_"): one generated stream is
#: checked against every ``by`` and ``n`` of the group, which keeps generation cheap
GROUPS = {g: sorted(c for c in CASES if c.split("_", 1)[1] == g)
          for g in sorted({c.split("_", 1)[1] for c in CASES})}


@pytest.mark.parametrize("group", sorted(GROUPS))
@PROPERTY
@given(stream=STREAMS, data=st.data())
def test_count_window_matches_reference(group, stream, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    for case in GROUPS[group]:
        _check_case(case, stream, cut)


@PROPERTY
@given(stream=STREAMS_NO_EDGES, data=st.data())
def test_count_window_without_edges(stream, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    for case in ("start2_values", "start3_incremental_clipped", "start2_udo", "end2_values",
                 "end2_incremental_clipped", "end3_udo"):
        _check_case(case, stream, cut)


@pytest.mark.parametrize("case", sorted(CASES))
@ON_RAY
@given(stream=STREAMS)
def test_builder_query_matches_reference(case, stream):
    _, reference, query = CASES[case]
    out = query(Stream.from_events(stream)).collect(runtime="inline")
    assert_equivalent(out, reference(to_cht(stream)))


# -- long streams: state stays bounded ------------------------------------------------------------
def _long_stream(length: int) -> list:
    """Point and interval events, two per time, a never-closed edge event every 7 ticks, a
    retraction now and then, and a CTI every 10 ticks."""
    msgs: list = []
    live: dict[str, tuple[int, int]] = {}
    for t in range(length):
        for k in range(2):
            end = t + 1 + (t * 7 + k) % 5
            msgs.append(Insert(f"p{t}.{k}", t, end, t % 4 + k))
            live[f"p{t}.{k}"] = (t, end)
        if t % 7 == 0:
            msgs.append(Insert(f"edge{t}", t, INF, 1))
        if t % 5 == 4:
            s, e = live.pop(f"p{t}.0")
            msgs.append(Retract(f"p{t}.0", s, e, e + 3, t % 4))
        if t % 10 == 9:
            msgs.append(Cti(t - 2))
    return msgs


@pytest.mark.parametrize("case", ["start3_incremental_clipped", "start2_values",
                                  "end3_incremental", "end2_clipped"])
def test_state_stays_bounded_on_long_streams(case):
    factory, reference, _ = CASES[case]
    stream = _long_stream(600)
    op = factory()
    out: list = []
    peak = 0
    for i in range(0, len(stream), 16):
        out.extend(op.process(stream[i:i + 16]))
        op._check()
        peak = max(peak, op.state_size())
    # the held state covers ~the last 10 ticks (one CTI period) plus n, never the 600
    assert peak < 120, f"state grew to {peak}"
    assert_equivalent(out, reference(to_cht(stream)))


def test_incremental_aggregate_gets_deltas():
    # an event joins an existing distinct time inside complete windows: each window gets
    # exactly that one payload, no pass over its other events
    calls: list[tuple[str, list]] = []

    class Spy(Multiset):
        def add(self, state, values):
            calls.append(("add", list(values)))
            return super().add(state, values)

        def remove(self, state, values):
            calls.append(("remove", list(values)))
            return super().remove(state, values)

    op = CountWindowOperator(CountWindow(2), Spy())
    op.process([Insert(i, t, t + 1, t) for i, t in enumerate((1, 2, 3))])
    calls.clear()
    op.process([Insert("x", 2, 3, 9)])  # windows [1, 3) and [2, 4) both hold time 2
    assert calls == [("add", [9]), ("add", [9])]
    calls.clear()
    op.process([Insert("y", 0, 1, 7)])  # a new distinct time at 0 only adds window [0, 2)
    assert calls == [("add", [7, 1])]


def test_a_new_window_of_max_builds_no_state_until_it_changes():
    # in-order readings complete each window once: Max answers from its values, without the
    # sorted multiset it keeps for changes; a window that changes later gets its state then
    adds: list[list] = []

    class Spy(Max):
        def add(self, state, values):
            adds.append(list(values))
            return super().add(state, values)

    op = CountWindowOperator(CountWindow(30), Spy())
    out = op.process([Insert(i, t, t + 1, (t * 7) % 50) for i, t in enumerate(range(100))])
    assert not adds
    assert [m.payload for m in out] == [max((t * 7) % 50 for t in range(s, s + 30))
                                        for s in range(71)]
    out = op.process([Insert("late", 95, 96, 99)])  # joins the windows holding time 95
    assert len(adds) == 5  # windows 66..70 hold time 95: each built once, from its members
    assert {m.payload for m in out if type(m) is Insert} == {99}
    adds.clear()
    op.process([Insert("later", 95, 96, 100)])  # now from the deltas, one value each
    assert adds == [[100]] * 5


# -- errors ----------------------------------------------------------------------------------------
class Fragile(Aggregate):
    def compute(self, values):
        if 13 in values:
            raise ZeroDivisionError("unlucky")
        return sum(values)


def test_udm_error_names_operator_udm_and_window():
    op = CountWindowOperator(CountWindow(2), Fragile(), name="cw#1")
    op.process([Insert("a", 1, 2, 1), Insert("b", 4, 5, 2)])
    with pytest.raises(OperatorError, match=r"cw#1.*Fragile.*\[4, 9\).*ZeroDivisionError"):
        op.process([Insert("c", 8, 9, 13)])


def test_dead_letter_skips_the_window_and_recovers():
    #   times   1     4     8        window [4, 9) holds 13: no output, a pending failure
    #   then c is retracted and d arrives at 8: the window computes again, no dead letter
    op = CountWindowOperator(CountWindow(2), Fragile(), on_error="dead_letter")
    out = op.process([Insert("a", 1, 2, 1), Insert("b", 4, 5, 2), Insert("c", 8, 9, 13)])
    assert to_cht(out) == [(4, 5, 3)]
    assert op.dead_letters == []  # [4, 9) is not final: c could still be retracted
    checkpoint = op.snapshot()
    out += op.process([Insert("d", 8, 9, 5), Retract("c", 8, 9, 8, 13), Cti(10)])
    op._check()
    assert to_cht(out) == [(4, 5, 3), (8, 9, 7)]
    assert op.dead_letters == []
    # without the retraction the window is still failing when Cti(9) makes it final
    other = CountWindowOperator(CountWindow(2), Fragile(), on_error="dead_letter")
    other.restore(checkpoint)
    assert other.process([Cti(9)]) == [Cti(9)]
    [letter] = other.dead_letters
    assert letter.where == op.name and "Fragile" in letter.reason
    assert letter.item[0] == Window(4, 9) and sorted(letter.item[1]) == [(4, 5, 2), (8, 9, 13)]


def test_aggregate_refuses_a_udo():
    with pytest.raises(ValueError, match=r"EvenValues.*apply"):
        CountWindowOperator(CountWindow(2), EvenValues())


def test_apply_needs_an_iterable():
    op = CountWindowOperator(CountWindow(1), total, kind="apply")
    with pytest.raises(OperatorError, match=r"total.*not an iterable"):
        op.process([Insert("a", 1, 2, 5)])


def test_rejects_bad_options():
    with pytest.raises(ValueError, match="kind"):
        CountWindowOperator(CountWindow(2), total, kind="reduce")
    with pytest.raises(ValueError, match="on_error"):
        CountWindowOperator(CountWindow(2), total, on_error="ignore")
    with pytest.raises(TypeError, match="CountWindow"):
        CountWindowOperator((2, "start"), total)


def test_late_input_is_refused():
    op = CountWindowOperator(CountWindow(2), total)
    op.process([Cti(10)])
    with pytest.raises(OperatorError, match="behind the input CTI"):
        op.process([Insert("a", 5, 12, 1)])
