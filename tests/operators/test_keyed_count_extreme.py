"""The keyed count window extreme (the planner's fast path for ``group_apply(key,
count_window(n) → aggregate(Min or Max))`` over inserts: the demo's ``peaks``) against the
general ``GroupApply`` of a ``CountWindowOperator`` per key.

Random point streams with disorder within the CTI bounds and ties (several events of a key
at one time), several keys (ints or strings), CTIs, column batches and single inserts mixed,
values of one kind per batch (ints, floats with ties, NaN with signed zeros, bools: the
numeric column-wise path and the per-key Python path, and keys switching between them), fed
in random batch sizes with a pickled snapshot restored half-way: after every batch the fast
operator's output so far has the general path's CHT (nothing delayed), its output CTI is never
later, and the whole output is a valid stream. Through the planner, inline and on Ray, a
disordered smart-meter stream gives the general path's CHT.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Min
from operators.cht import to_cht, validate
from operators.columns import Columns, expand
from operators.events import Cti, Insert
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import CountWindow, WindowPolicy
from operators.windows.count import CountWindowOperator
from operators.windows.keyed_count_start import KeyedCountExtreme, _sliding_extreme, supports
from operators.windows.spec import DEFAULT_POLICY
from tests.kit import PROPERTY, assert_equivalent
from topology import Stream
from topology.planning import rules

KINDS = ["int", "float", "special", "bool", "mixed"]


def _column(rng, kind, n):
    if kind == "int":
        return rng.integers(-4, 4, n)
    if kind == "float":
        return rng.integers(1, 5, n) * 0.25
    if kind == "bool":
        return rng.random(n) < 0.5
    if kind == "mixed":  # Python ints and floats that tie (2 and 2.0), in an object column
        out = np.empty(n, dtype=object)
        out[:] = [int(x) if x % 2 else float(x) for x in rng.integers(0, 4, n).tolist()]
        return out
    return rng.choice(np.array([math.nan, 0.0, -0.0, 1.5, -2.0]), n)


@st.composite
def streams(draw):
    """Physical streams of point (or interval) inserts: column batches (each of one value
    kind) from an ingress with CTIs, some expanded into single inserts. Intervals: the
    planner sends any insert-only stream here, and membership is by start."""
    n = draw(st.integers(1, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 2, 5])) \
        - rng.integers(0, draw(st.integers(1, 25)), n)
    keys = rng.integers(0, draw(st.integers(1, 6)), n)
    if draw(st.booleans()):
        keys = np.array([f"m{k}" for k in keys.tolist()], dtype=object)
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4))))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=len(cut) + 1,
                          max_size=len(cut) + 1))
    intervals = draw(st.booleans())
    ends = t + rng.integers(1, 30, n)
    src = Ingress(start="t", end="e" if intervals else None,
                  shape="interval" if intervals else "point",
                  advance=AdvanceTime(every=draw(st.sampled_from([16, 64, 256])),
                                      delay=draw(st.integers(0, 20))))
    msgs = []
    for (a, b), kind in zip(zip([0, *cut], [*cut, n]), kinds):
        batch = {"t": t[a:b], "k": keys[a:b], "v": _column(rng, kind, b - a)}
        if intervals:
            batch["e"] = ends[a:b]
        for m in src.push_columns(batch):
            if type(m) is not Columns:
                msgs.append(m)
                continue
            cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(m) - 1)), max_size=3))))
            for lo, hi in zip([0, *cuts], [*cuts, len(m)]):  # smaller column batches
                part = m.take(slice(lo, hi))
                if len(part):
                    msgs.append(part)
    msgs += src.end()
    # more CTIs, each at the least start still to come; some column batches as inserts
    later = [0] * (len(msgs) + 1)
    later[-1] = 2**62
    for j in range(len(msgs) - 1, -1, -1):
        m = msgs[j]
        least = int(m.starts.min()) if type(m) is Columns else m.start if type(m) is Insert \
            else later[j + 1]
        later[j] = min(later[j + 1], least)
    out, cti = [], -(2**62)
    for j, m in enumerate(msgs):
        if type(m) is Cti:
            if m.time <= cti:
                continue
            cti = m.time
        if type(m) is Columns and draw(st.integers(0, 3)) == 0:
            out.extend(m.inserts())  # row batches beside column batches
        else:
            out.append(m)
        if cti < later[j + 1] < 2**62 and draw(st.integers(0, 2)) == 0:
            cti = later[j + 1]
            out.append(Cti(cti))
    return out


def _general(n, udm):
    return GroupApply("k", lambda: CountWindowOperator(CountWindow(n), udm))


def _fast(n, udm):
    return KeyedCountExtreme("k", CountWindow(n), udm, name="kx")


def _ctis(msgs):
    return [m.time for m in msgs if type(m) is Cti]


@pytest.mark.slow  # (the default tier keeps its 10 minutes)
@PROPERTY
@given(stream=streams(), n=st.integers(1, 7), which=st.sampled_from([Max, Min]),
       sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4), restore=st.integers(0, 8))
def test_equals_the_general_path_after_every_batch(stream, n, which, sizes, restore):
    general, fast = _general(n, which("v")), _fast(n, which("v"))
    got: list = []
    want: list = []
    i = b = 0
    while i < len(stream):
        if b == restore:  # a checkpoint: the state pickled and restored in a fresh operator
            state = pickle.loads(pickle.dumps(fast.snapshot()))
            fast = _fast(n, which("v"))
            fast.restore(state)
        batch = stream[i:i + sizes[b % len(sizes)]]
        got += fast.process(batch)
        fast._check()
        want += general.process(list(expand(batch)))
        # nothing delayed: the same CHT at the end of every batch; no later CTI
        assert_equivalent(list(expand(got)), list(expand(want)))
        assert max(_ctis(got), default=-1) <= max(_ctis(want), default=-1)
        i += len(batch)
        b += 1
    got += fast.finish()
    want += general.finish()
    validate(list(expand(got)), name="keyed count window extreme")
    assert_equivalent(list(expand(got)), list(expand(want)))
    assert _ctis(got) and _ctis(got)[-1] == _ctis(want)[-1]


@PROPERTY
@given(x=st.lists(st.integers(-5, 5), min_size=1, max_size=60), n=st.integers(1, 12),
       largest=st.booleans())
def test_sliding_extreme_is_the_extreme_of_each_window(x, n, largest):
    arr = np.array(x, dtype=np.int64)
    want = [(max if largest else min)(x[i:i + n]) for i in range(len(x) - n + 1)]
    assert _sliding_extreme(arr, n, largest).tolist() == want


def test_state_is_bounded_by_ctis():
    """A long in-order stream of 3 keys: each keeps the n - 1 times before the CTI and the
    later ones."""
    op = _fast(4, Max("v"))
    for j in range(50):
        op.process([Columns(np.arange(30) + 30 * j, np.arange(10 * j, 10 * j + 10).repeat(3),
                            None, {"k": np.tile([0, 1, 2], 10), "v": np.arange(30.0)}),
                    Cti(10 * j + 10)])
        op._check()
    assert all(len(r.times) == 3 for r in op.keys.values())


def test_output_cti_is_the_least_of_the_keys():
    op = _fast(3, Max("v"))
    out = op.process([Insert(1, 5, 6, {"k": "a", "v": 1}), Cti(6)])
    assert _ctis(out) == [6 + 1]  # key a holds 1 time before 6: its next window ends >= 7
    out = op.process([Insert(2, 6, 7, {"k": "a", "v": 1}), Insert(3, 7, 8, {"k": "b", "v": 1}),
                      Cti(8)])
    assert _ctis(out) == [8]


def test_a_retraction_fails_loudly_and_none_is_named():
    from operators.errors import OperatorError
    from operators.events import Retract

    with pytest.raises(OperatorError, match="planner bug"):
        _fast(2, Max("v")).process([Retract(1, 0, 1, 0, {"k": 0, "v": 1})])
    with pytest.raises(OperatorError, match="cannot order None"):
        _fast(2, Max("v")).process([Insert(1, 0, 1, {"k": 0, "v": 1}),
                                    Insert(2, 0, 1, {"k": 0, "v": None})])


def test_supports_min_and_max_by_start_only():
    FINAL = WindowPolicy(emit="final")
    assert supports(CountWindow(30), Max("v"), "aggregate", DEFAULT_POLICY, "raise")
    assert not supports(CountWindow(30, "end"), Max("v"), "aggregate", DEFAULT_POLICY, "raise")
    assert not supports(CountWindow(30), Count(), "aggregate", DEFAULT_POLICY, "raise")
    assert not supports(CountWindow(30), Max("v"), "aggregate", DEFAULT_POLICY, "dead_letter")
    assert not supports(CountWindow(30), Max("v"), "aggregate", FINAL, "raise")
    assert not supports(CountWindow(30), Max("v"), "apply", DEFAULT_POLICY, "raise")


def test_the_planner_chooses_it_for_speculative_rows_over_inserts_only():
    rows = [{"k": 1, "t": 1, "v": 2.0}]
    points = Stream.from_rows(rows, start="t")
    chosen = "keyed count window extreme"
    assert chosen in points.group_apply(
        "k", lambda g: g.count_window(3).aggregate(Min("v"))).explain()
    # emit="final": the general path's rows are never retracted (the planner counts on it)
    assert chosen not in points.group_apply(
        "k", lambda g: g.count_window(3, emit="final").aggregate(Min("v"))).explain()
    # a stream that may retract (edges that rows can close), by end, or another aggregate:
    # the general path (edges without an end column never close: inserts only)
    assert chosen in Stream.from_rows(rows, start="t", shape="edge", id="k").group_apply(
        "k", lambda g: g.count_window(3).aggregate(Min("v"))).explain()
    edges = Stream.from_rows([{**rows[0], "e": None}], start="t", end="e", shape="edge", id="k")
    assert chosen not in edges.group_apply(
        "k", lambda g: g.count_window(3).aggregate(Min("v"))).explain()
    assert chosen not in points.group_apply(
        "k", lambda g: g.count_window(3, by="end").aggregate(Min("v"))).explain()
    assert chosen not in points.group_apply(
        "k", lambda g: g.count_window(3).aggregate(Count())).explain()


def _meters(seed=3, meters=7, per_meter=300):
    """Readings of a few meters every 10 ticks, arriving with light disorder (a reading
    overtakes a few others), ties and repeated values."""
    rng = np.random.default_rng(seed)
    rows = [{"meter": f"m{m}", "ts": 10 * i + int(rng.integers(0, 3)) * 10 * (m % 2),
             "kwh": float(rng.integers(0, 40)) / 4}
            for i in range(per_meter) for m in range(meters)]
    order = np.argsort(np.array([r["ts"] for r in rows]) + rng.integers(0, 60, len(rows)),
                       kind="stable")
    return [rows[i] for i in order.tolist()]


def _peaks(rows, udm):
    return Stream.from_rows(rows, start="ts", advance=AdvanceTime(every=500, delay=100)) \
        .group_apply(lambda r: r["meter"], lambda g: g.count_window(9).aggregate(udm))


@pytest.mark.parametrize("which", [Max, Min])
def test_planner_path_equals_the_general_path(which, runtime, monkeypatch):
    """Through the planner (the fast operator in an actor on Ray), against the same query
    inline with the fast path turned off."""
    rows = _meters()
    q = _peaks(rows, which("kwh"))
    assert "keyed count window extreme" in q.explain()
    got = list(expand(q.collect(runtime=runtime)))
    with monkeypatch.context() as m:
        m.setattr(rules, "supports_count_extremes", lambda *a: False)
        general = _peaks(rows, which("kwh"))
        assert "keyed count window extreme" not in general.explain()
        want = list(expand(general.collect(runtime="inline")))
    assert len(to_cht(got)) > 1000
    assert_equivalent(got, want)
    assert _ctis(got)[-1] == _ctis(want)[-1]
