"""Hopping, tumbling and snapshot windows against the from-scratch reference.

Every case of :data:`CASES` is an operator factory, its reference (a function of the physical
input stream returning the expected CHT) and the same query written with the fluent builder;
the runtime tests reuse the table to run the cases on Ray. The runner feeds random valid
physical streams (disorder, edges closed later, corrections, full retractions, CTIs) in random
batches, checks invariants after every batch, checkpoints and restores midway and validates the
output: nothing behind an output CTI, retractions matching what was emitted, fresh ids.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from operators.aggregates import Avg, Count, Max, TimeWeightedAverage, TopK
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
from operators.windows import (
    HoppingWindow,
    HoppingWindowOperator,
    SnapshotWindow,
    SnapshotWindowOperator,
    make_window,
)
from tests import reference_windows as ref
from tests.kit import (
    HEAVY,
    INF,
    ON_RAY,
    assert_equivalent,
    final_time,
    physical_streams,
    run_operator,
)


# -- small UDMs of every kind ---------------------------------------------------------------------
class SumCount(Aggregate):
    def compute(self, values):
        return (len(values), sum(values))


def sorted_values(values):
    return tuple(sorted(values))


def distinct_values(values):
    return sorted(set(values))


class Echo(TimeSensitiveAggregate):
    """Shows exactly what a time-sensitive UDM saw: the window and the clipped events."""

    def compute(self, events, window):
        return (tuple(window), tuple(sorted(events)))


class CountSum(IncrementalAggregate):
    def initial_state(self):
        return [0, 0]

    def add(self, state, values):
        return [state[0] + len(values), state[1] + sum(values)]

    def remove(self, state, values):
        assert state[0] >= len(values)
        return [state[0] - len(values), state[1] - sum(values)]

    def result(self, state):
        return tuple(state)


class Bag(IncrementalAggregate):
    """A time-sensitive incremental aggregate whose state is the multiset of clipped events:
    any wrong delta shows in the result."""

    time_sensitive = True

    def initial_state(self):
        return Counter()

    def add(self, state, values):
        state.update(values)
        return state

    def remove(self, state, values):
        state.subtract(values)
        assert all(v >= 0 for v in state.values()), "removed an event that was not added"
        return +state

    def result(self, state):
        raise AssertionError("a time-sensitive aggregate is asked for window_result")

    def window_result(self, state, window):
        return (tuple(window), tuple(sorted(state.elements())))


class Distinct(Operator):
    def compute(self, values):
        return sorted(set(values))


class EchoEvents(TimeSensitiveOperator):
    """Returns its (clipped) input events: time-bound, so valid under output='keep' with a
    left-clipping policy."""

    def compute(self, events, window):
        return list(events)


class Marker(TimeSensitiveOperator):
    """A marker at the window start plus every event widened by one tick (output='clip' cuts
    them back to the window). Not time-bound: the marker changes with every member."""

    def compute(self, events, window):
        out = [(window.start, window.start + 1, ("n", len(events)))]
        out += [(s - 1, e + 1 if e < MAX_TIME else e, p) for s, e, p in events]
        return out


# -- the case table -------------------------------------------------------------------------------
SPECS = {
    "tumbling10": HoppingWindow(10, 10),
    "tumbling7a3": HoppingWindow(7, 7, 3),
    "hopping10x5": HoppingWindow(10, 5),
    "hopping10x3": HoppingWindow(10, 3),
    "hopping9x3a1": HoppingWindow(9, 3, 1),
    "hopping4x6": HoppingWindow(4, 6),  # gaps between windows
    "snapshot": SnapshotWindow(),
}
HOPPING = [k for k in SPECS if k != "snapshot"]


def _query(spec: Any, clip: str, output: str) -> Callable[[Any], Any]:
    if isinstance(spec, SnapshotWindow):
        return lambda s: s.snapshot_window(clip=clip, output=output)
    if spec.size == spec.hop:
        return lambda s: s.tumbling_window(spec.size, spec.alignment, clip=clip, output=output)
    return lambda s: s.hopping_window(spec.size, spec.hop, spec.alignment, clip=clip,
                                      output=output)


def _case(spec_name: str, udm: Callable[[], Any], kind: str = "aggregate", clip: str = "full",
          output: str = "window") -> tuple[Callable[[], Any], Callable[[Any], Any],
                                           Callable[[Any], Any]]:
    spec = SPECS[spec_name]
    windowed = _query(spec, clip, output)

    def factory():
        return make_window(spec, udm(), kind=kind, clip=clip, output=output)

    def reference(stream):
        return ref.window(stream, spec, udm(), kind, clip, output)

    def query(s):
        w = windowed(s)
        return w.aggregate(udm()) if kind == "aggregate" else w.apply(udm())

    return factory, reference, query


#: name -> (operator factory, reference(stream) -> rows, query(stream builder) -> stream)
CASES: dict[str, tuple[Callable[[], Any], Callable[[Any], Any], Callable[[Any], Any]]] = {}
#: name -> (spec name, clip, output, time-sensitive and unclipped)
META: dict[str, tuple[str, str, str, bool]] = {}


def _add(udm_name: str, udm: Callable[[], Any], specs: list[str], kind: str = "aggregate",
         clips: tuple[str, ...] = ("full",), outputs: tuple[str, ...] = ("window",),
         unclipped_ok: bool = True) -> None:
    i = 0
    for clip in clips:
        for output in outputs:
            spec = specs[i % len(specs)]
            i += 1
            if output == "compressed" and spec == "snapshot":  # hopping only
                spec = "hopping10x5"
            name = f"{spec}-{udm_name}-{clip}-{output}"
            CASES[name] = _case(spec, udm, kind, clip, output)
            ts = getattr(udm(), "time_sensitive", False)
            META[name] = (spec, clip, output, ts and clip in ("none", "left"))


# time-insensitive UDMs of every kind: clipping is irrelevant, every output policy applies
for _spec in SPECS:
    _add("sumcount", SumCount, [_spec], outputs=("window", "point_end"))
    _add("fn", lambda: sorted_values, [_spec], outputs=("point_end",))
    _add("countsum", CountSum, [_spec], outputs=("window",))
    _add("distinct", Distinct, [_spec], kind="apply", outputs=("window",))
for _spec in HOPPING:
    _add("sumcount", SumCount, [_spec], outputs=("compressed",))
_add("countsum", CountSum, ["hopping10x3", "tumbling7a3", "hopping4x6"], outputs=("compressed",))
_add("fn_apply", lambda: distinct_values, ["hopping9x3a1", "snapshot"], kind="apply",
     outputs=("compressed", "point_end"))
_add("distinct", Distinct, ["hopping10x5", "hopping4x6"], kind="apply", outputs=("compressed",))
# time-sensitive aggregates: every clipping policy
_add("echo", Echo, ["snapshot", "hopping10x3", "tumbling10", "hopping4x6", "hopping9x3a1"],
     clips=("none", "left", "right", "full"), outputs=("window", "point_end"))
_add("echo", Echo, ["snapshot", "hopping10x5", "tumbling7a3", "snapshot"],
     clips=("none", "left", "right", "full"))
_add("bag", Bag, ["hopping10x5", "snapshot", "tumbling7a3", "hopping10x3", "snapshot"],
     clips=("none", "left", "right", "full"), outputs=("window", "point_end"))
# time-sensitive UDOs: clip / keep / window / point_end
_add("echoevents", EchoEvents, ["snapshot", "hopping10x3", "tumbling10", "hopping4x6"],
     kind="apply", clips=("none", "left", "right", "full"), outputs=("clip", "window"))
_add("echoevents", EchoEvents, ["hopping10x5", "snapshot", "hopping9x3a1", "snapshot"],
     kind="apply", clips=("left", "full"), outputs=("keep", "point_end"))
_add("marker", Marker, ["snapshot", "hopping10x3", "tumbling7a3", "snapshot"], kind="apply",
     clips=("none", "left", "right", "full"), outputs=("clip",))
# the built-ins
_add("count", Count, ["tumbling10", "hopping10x3", "snapshot"], outputs=("window", "point_end",
                                                                        "compressed"))
_add("avg", Avg, ["hopping10x5", "snapshot"], outputs=("window",))
_add("max", Max, ["snapshot", "hopping9x3a1"], outputs=("window", "point_end"))
_add("top2", lambda: TopK(2), ["snapshot", "hopping10x3", "tumbling7a3"],
     outputs=("window", "compressed", "point_end"))
_add("twa", TimeWeightedAverage, ["tumbling10", "hopping10x3", "hopping4x6", "tumbling7a3"],
     clips=("right", "full"), outputs=("window", "point_end"))


def expected_out_cti(name: str, c: int) -> tuple[int, bool]:
    """The output CTI the operator emits after the final input CTI ``c`` (which lies past every
    finite endpoint), and whether it is exact or only an upper bound (where it also depends on
    the windows held by the open events an unclipped time-sensitive UDM sees)."""
    spec_name, _clip, output, unclipped = META[name]
    spec = SPECS[spec_name]
    if output == "keep":
        return c, True
    if isinstance(spec, SnapshotWindow):
        return (c - 1 if output == "point_end" else c), not _time_sensitive(name)
    a, h, size = spec.alignment, spec.hop, spec.size
    n0 = (c - a - size) // h + 1  # the first window ending after c
    if output == "compressed":
        last = (c - a - 1) // h  # the last window starting before c
        return min(a + n0 * h + size - h, a + last * h + size), True
    return (a + n0 * h + size - 1 if output == "point_end" else a + n0 * h), not unclipped


def _time_sensitive(name: str) -> bool:
    return bool(getattr(CASES[name][0]().udm, "time_sensitive", False))


# 93 cases: HEAVY examples each keep the file well under a minute
@pytest.mark.parametrize("case", sorted(CASES))
@HEAVY
@given(stream=physical_streams(), data=st.data())
def test_window_matches_reference(case, stream, data):
    factory, reference, _ = CASES[case]
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    out = run_operator(factory, stream, seed=cut, restore_at=cut)
    assert_equivalent(out, reference(stream))
    c = final_time(stream)
    expected, exact = expected_out_cti(case, c)
    got = final_time(out)
    if exact:
        assert got == expected, (got, expected)
    else:
        assert got is None or got <= expected, (got, expected)


# the operator evaluates the windows a batch touches once, at the end of the batch and before
# each CTI: the whole stream as one batch must mean the same
@pytest.mark.parametrize("case", sorted(CASES))
@ON_RAY
@given(stream=physical_streams())
def test_one_batch_matches_reference(case, stream):
    factory, reference, _ = CASES[case]
    op = factory()
    out = op.process(stream)
    op._check()
    validate(out, name=f"output of {case}")
    assert_equivalent(out, reference(stream))


SPECULATIVE = [n for n in sorted(CASES) if "-echo-" in n or "-countsum-" in n
               or "-echoevents-" in n or "-top2-" in n]


@pytest.mark.parametrize("case", SPECULATIVE)
@ON_RAY
@given(stream=physical_streams(final_cti=False))
def test_speculative_output_matches_reference_after_every_message(case, stream):
    # without waiting for CTIs: after each message the output so far is the reference of the
    # input so far (every window up to the latest start time has output, corrected later)
    factory, reference, _ = CASES[case]
    op = factory()
    out = []
    for i, msg in enumerate(stream):
        out.extend(op.process([msg]))
        assert_equivalent(out, reference(stream[: i + 1]))
    validate(out)


def test_case_table_covers_every_window_udm_and_policy():
    specs = {m[0] for m in META.values()}
    clips = {m[1] for m in META.values()}
    outputs = {m[2] for m in META.values()}
    assert specs == set(SPECS) and clips == {"none", "left", "right", "full"}
    assert outputs == {"window", "point_end", "clip", "keep", "compressed"}
    kinds = {type(CASES[n][0]().udm).__name__ for n in CASES}
    assert {"SumCount", "FunctionAggregate", "_FunctionOperator", "Echo", "CountSum", "Bag",
            "Distinct", "EchoEvents", "Marker", "Count", "TimeWeightedAverage"} <= kinds


# -- open edge events: bounded work and state ------------------------------------------------------
POLICIES = [
    ("tumbling10", "full", "window", SumCount, "aggregate"),
    ("hopping10x3", "full", "point_end", CountSum, "aggregate"),
    ("hopping10x5", "full", "compressed", Count, "aggregate"),
    ("hopping10x3", "right", "window", Bag, "aggregate"),
    ("hopping10x5", "full", "keep", EchoEvents, "apply"),
    ("hopping4x6", "full", "clip", EchoEvents, "apply"),
    ("snapshot", "full", "window", SumCount, "aggregate"),
    ("snapshot", "full", "point_end", Echo, "aggregate"),
    ("snapshot", "full", "keep", EchoEvents, "apply"),
]


@pytest.mark.parametrize("spec_name,clip,output,udm,kind", POLICIES)
def test_open_edge_costs_bounded_work_and_state_per_cti(spec_name, clip, output, udm, kind):
    #   e0  [5 ─────────────────────────────────────────────── ∞)   never closed
    #   e1        [40, 47)             a point every 1000 ticks ...
    #   CTI    ↑ every 100 ticks, 400 times
    op = make_window(SPECS[spec_name], udm(), kind=kind, clip=clip, output=output)
    out = op.process([Insert("e0", 5, MAX_TIME, 1), Insert("e1", 40, 47, 2)])
    sizes = []
    began = time.perf_counter()
    for k in range(1, 401):
        batch = [Cti(100 * k)]
        if k % 10 == 0:
            batch.append(Insert(f"p{k}", 100 * k + 3, 100 * k + 4, 3))
        out += op.process(batch)
        op._check()
        sizes.append(op.state_size())
    assert time.perf_counter() - began < 120  # bounded work: an enumeration of ∞ never ends
    assert max(sizes[20:]) <= 8, max(sizes)
    validate(out)
    assert final_time(out) >= 39_900  # the output CTI keeps up
    rows = to_cht(out)
    if output == "compressed":
        assert rows[-1][1] == MAX_TIME  # one row to ∞
    else:
        assert all(e < MAX_TIME for _, e, _ in rows if spec_name != "snapshot")


def test_unclipped_time_sensitive_udm_holds_the_cti_at_an_open_edge():
    # the UDM sees the true end of e0 in every window: closing it changes them all, so the
    # output CTI cannot pass the first window holding e0 (paper V-F)
    op = make_window(HoppingWindow(10, 10), Echo(), clip="none")
    out = op.process([Insert("e0", 5, MAX_TIME, 1), Cti(100)])
    assert out[-1] == Cti(0)
    out += op.process([Retract("e0", 5, MAX_TIME, 150, 1), Cti(200)])
    validate(out)
    assert out[-1] == Cti(200) and op.state_size() == 0
    assert_equivalent(out, [(10 * n, 10 * n + 10, ((10 * n, 10 * n + 10), ((5, 150, 1),)))
                            for n in range(15)])


def test_cti_at_infinity_over_an_open_edge_is_refused_not_a_hang():
    op = make_window(HoppingWindow(10, 5), Count())
    op.process([Insert("e0", 5, MAX_TIME, 1), Cti(50)])
    with pytest.raises(OperatorError, match=r"reached ∞.*never closed.*compressed"):
        op.process([Cti(MAX_TIME)])
    comp = make_window(HoppingWindow(10, 5), Count(), output="compressed")
    assert_equivalent(comp.process([Insert("e0", 5, MAX_TIME, 1), Cti(MAX_TIME)]),
                      [(5, MAX_TIME, 1)])


@HEAVY
@given(stream=physical_streams(), spec=st.sampled_from(sorted(SPECS)),
       output=st.sampled_from(["window", "point_end", "compressed"]),
       clip=st.sampled_from(["none", "right"]))
def test_state_is_freed_after_the_final_cti(stream, spec, output, clip):
    assume(all(e < INF for _, e, _ in to_cht(stream)))
    assume(not (spec == "snapshot" and output == "compressed"))
    udm = CountSum() if output == "compressed" else Bag()
    op = make_window(SPECS[spec], udm, clip=clip, output=output)
    out = op.process(stream)
    horizon = final_time(stream) + 25  # past every window (and owned interval) of the events
    out += op.process([Cti(horizon)])
    assert op.state_size() == 0
    validate(out)


# -- errors ---------------------------------------------------------------------------------------
class Boom(Aggregate):
    def compute(self, values):
        if 3 in values:
            raise ZeroDivisionError("no threes")
        return len(values)


def test_udm_error_names_operator_udm_and_window():
    op = make_window(HoppingWindow(10, 10), Boom(), name="avg#3")
    op.process([Insert("a", 1, 2, 1)])
    with pytest.raises(OperatorError,
                       match=r"avg#3.*Boom.*\[0, 10\).*ZeroDivisionError: no threes"):
        op.process([Insert("b", 4, 5, 3)])


def test_udm_error_goes_to_dead_letters_once_the_window_is_final():
    #   [0, 10)  a 1, b 3: fails until b is deleted, then counts 1: no dead letter
    #   [10, 20) c 1, d 3: still failing when Cti(30) makes it final: one dead letter
    op = make_window(HoppingWindow(10, 10), Boom(), on_error="dead_letter", name="w")
    out = op.process([Insert("a", 1, 2, 1), Insert("b", 4, 5, 3), Insert("c", 12, 13, 1),
                      Insert("d", 14, 15, 3), Insert("d2", 15, 16, 3)])
    out += op.process([Retract("b", 4, 5, 4)])
    assert op.dead_letters == []  # nothing final yet: d could still be retracted
    out += op.process([Cti(30)])
    validate(out)
    assert_equivalent(out, [(0, 10, 1)])
    [dl] = op.dead_letters
    assert dl.where == "w" and "Boom" in dl.reason and "[10, 20) holding 3 events" in dl.reason
    window, events = dl.item
    assert window == Window(10, 20) and sorted(events) == [(12, 13, 1), (14, 15, 3), (15, 16, 3)]


class CountIncBoom(CountSum):
    def add(self, state, values):
        if 3 in values:
            raise ValueError("no threes")
        return super().add(state, values)


def test_incremental_udm_error_goes_to_dead_letters_and_recovers():
    #   a [0 ------------- 10) 1      b [4 - 6) 3, deleted: [4, 6) fails, then merges back
    #   c             [12 - 14) 3:   fails, final at Cti(20): the only dead letter
    op = make_window(SnapshotWindow(), CountIncBoom(), on_error="dead_letter")
    out = op.process([Insert("a", 0, 10, 1), Insert("b", 4, 6, 3), Retract("b", 4, 6, 4),
                      Insert("c", 12, 14, 3), Cti(20)])
    validate(out)
    assert_equivalent(out, [(0, 10, (1, 1))])
    [dl] = op.dead_letters
    assert "CountIncBoom" in dl.reason and dl.item == (Window(12, 14), [(12, 14, 3)])


def test_keep_rejects_an_event_before_the_window_start():
    op = make_window(HoppingWindow(10, 10), EchoEvents(), kind="apply", clip="none",
                     output="keep", name="udo#1")
    with pytest.raises(OperatorError, match=r"udo#1.*EchoEvents.*\[10, 20\).*before its window"):
        op.process([Insert("a", 5, 15, 1), Cti(20)])


def test_keep_with_a_udo_that_is_not_time_bound_fails_clearly():
    #   the marker sits at W.start = 0; after Cti(5) a new member changes it: behind the CTI
    op = make_window(HoppingWindow(10, 10), Marker(), kind="apply", clip="full", output="keep")
    op.process([Insert("a", 1, 2, 1), Cti(5)])
    with pytest.raises(OperatorError, match="time-bound"):
        op.process([Insert("b", 6, 7, 1)])


@pytest.mark.parametrize("kwargs,match", [
    ({"udm": Distinct(), "kind": "aggregate"}, "apply"),
    ({"udm": SumCount(), "kind": "apply"}, "aggregate"),
    ({"udm": SumCount(), "output": "keep"}, "TimeSensitiveOperator"),
    ({"udm": Echo(), "output": "compressed"}, "time-insensitive"),
    ({"udm": SumCount(), "clip": "middle"}, "clipping policy"),
    ({"udm": SumCount(), "on_error": "ignore"}, "dead_letter"),
])
def test_bad_configurations_are_refused(kwargs, match):
    udm = kwargs.pop("udm")
    with pytest.raises(ValueError, match=match):
        make_window(HoppingWindow(10, 5), udm, **kwargs)


def test_compressed_needs_a_hopping_window():
    with pytest.raises(ValueError, match="hopping"):
        make_window(SnapshotWindow(), Count(), output="compressed")


def test_make_window_builds_the_right_operator():
    assert isinstance(make_window(HoppingWindow(5, 5), Count()), HoppingWindowOperator)
    assert isinstance(make_window(SnapshotWindow(), Count()), SnapshotWindowOperator)
    assert isinstance(make_window(HoppingWindow(5, 1), Count(), output="compressed"),
                      SnapshotWindowOperator)
    from operators.windows import CountWindow
    from operators.windows.count import CountWindowOperator
    assert isinstance(make_window(CountWindow(3), Count()), CountWindowOperator)
    with pytest.raises(ValueError):
        make_window(CountWindow(3), Count(), output="window")


def test_output_ids_are_fresh_and_never_reused():
    op = make_window(SnapshotWindow(), Count())
    out = op.process([Insert("a", 0, 10, 1), Insert("b", 3, 6, 1), Retract("b", 3, 6, 3),
                      Insert("c", 3, 6, 1), Retract("a", 0, 10, 4), Cti(20)])
    validate(out)  # unique ids across the whole output stream
    inserted = [m.id for m in out if type(m) is Insert]
    assert len(inserted) == len(set(inserted))
    assert_equivalent(out, [(0, 3, 1), (3, 4, 2), (4, 6, 1)])
