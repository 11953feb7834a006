"""A keyed window aggregate's states kept column-wise (:mod:`operators.windows.keyed_table`)
against the general ``GroupApply`` of a window operator: counts, counts with ``where``,
int sums and means, extremes, alone and as ``Aggregates``, over batches whose columns change
kind from batch to batch (ints, floats, sums past int64, NaN and zeros: the table gives way to
the per-key states there), with a snapshot in the middle and single inserts first; and the
per-key states a table stands for are exactly the ones the per-key path makes."""

from __future__ import annotations

import copy
import math
import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Avg, Count, Max, Min, Sum
from operators.cht import to_cht
from operators.columns import expand
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime, Ingress
from operators.windows import WindowPolicy, hopping_window, make_window
from operators.windows.keyed import KeyedWindowAggregate
from operators.windows.keyed_table import KeyTable
from tests.kit import PROPERTY, assert_equivalent
from tests.operators.test_keyed_window import run_keyed
from topology import Stream


def big(p: dict[str, Any]) -> Any:
    return p["v"] > 1


UDMS = {
    "q17": lambda: Aggregates(n=Count(), big=Count(where=big), lo=Min("v"), hi=Max("v"),
                              mean=Avg("v"), total=Sum("v")),
    "count": Count, "where": lambda: Count(where=big), "sum": lambda: Sum("v"),
    "avg": lambda: Avg("v"), "min": lambda: Min("v"), "max": lambda: Max("v"),
}
KINDS = ["int", "int", "float", "huge", "special"]


@st.composite
def batches(draw: Any) -> list[dict[str, np.ndarray]]:
    """Column batches of points with key ``k`` and a value ``v`` of a kind drawn per batch."""
    n = draw(st.integers(1, 600))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n, dtype=np.int64) // draw(st.sampled_from([1, 3, 10])) \
        - rng.integers(0, draw(st.integers(1, 20)), n)
    cut = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4))))
    out = []
    for a, b in zip([0, *cut], [*cut, n]):
        m, kind = b - a, draw(st.sampled_from(KINDS))
        if kind == "int":
            v = rng.integers(-4, 5, m)
        elif kind == "float":
            v = rng.integers(1, 5, m) * 0.25
        elif kind == "huge":  # sums past int64 after a few batches
            v = rng.integers(2**59, 2**60, m)
        else:
            v = rng.choice(np.array([math.nan, 0.0, -0.0, 1.5]), m)
        out.append({"t": t[a:b], "k": rng.integers(0, 6, m), "v": v})
    return out


@PROPERTY
@given(batches=batches(), udm=st.sampled_from(sorted(UDMS)), size=st.integers(1, 12),
       hop=st.integers(1, 12), emit=st.sampled_from(["speculative", "final"]),
       restore=st.booleans(), per_event_first=st.booleans())
def test_a_table_gives_the_general_windows_results(batches, udm, size, hop, emit, restore,
                                                   per_event_first):
    spec = hopping_window(size, hop, 0)
    src = Ingress(start="t", advance=AdvanceTime(every=64, delay=3))
    pushed = [src.push(b) for b in batches]
    if per_event_first:  # per-key states first, which later column batches meet
        pushed[0] = list(expand(pushed[0]))
    stream = [m for p in pushed for m in p] + src.end()
    events = list(expand(stream))
    expected = GroupApply("k", lambda: make_window(spec, UDMS[udm]())).process(events)

    def fast():
        return KeyedWindowAggregate("k", spec, UDMS[udm](), WindowPolicy(emit=emit),
                                    name="kw")

    for step in (1, 3):
        assert_equivalent(run_keyed(fast, stream, step, restore), expected)


def _results(op: KeyedWindowAggregate) -> dict[int, dict[Any, Any]]:
    """The result of each per-key state of the operator, with its type (NaN as its repr)."""
    def typed(r: Any) -> Any:
        if isinstance(r, dict):
            return {k: typed(v) for k, v in r.items()}
        return (type(r), repr(r))
    op._plain_all()
    udm: Any = op.udm
    return {n: {k: typed(udm.result(s)) for k, s in by_key.items()}
            for n, by_key in op.open.items()}


@PROPERTY
@given(batches=batches(), udm=st.sampled_from(sorted(UDMS)))
def test_a_table_stands_for_the_per_key_states(batches, udm):
    """The states a table makes plain give exactly the results of those of the per-key column
    path (no table), batch after batch (an int sum may be an ExactSum there: a batch's groups
    all take the exact path when one window's state is one); a copy or a pickle of a table
    is those states."""
    spec = hopping_window(7, 3, 0)
    src = Ingress(start="t", advance=AdvanceTime(every=10**9))  # (no CTI: the states stay)
    stream = [m for b in batches for m in src.push(b)]
    tabled = KeyedWindowAggregate("k", spec, UDMS[udm](), name="kw")
    per_key = KeyedWindowAggregate("k", spec, UDMS[udm](), name="kw")
    per_key.table_plan = None
    for msg in stream:
        tabled.process([msg])
        per_key.process([msg])
        held = dict(tabled.open)
        assert all(type(copy.deepcopy(t)) is dict and type(pickle.loads(pickle.dumps(t)))
                   is dict for t in held.values())
        assert _results(tabled) == _results(per_key)
        tabled.open = held  # (tables again: plain_all made them per-key states)


def test_the_q17_aggregate_is_held_as_tables_and_a_snapshot_as_states():
    src = Ingress(start="t", advance=AdvanceTime(every=10**9))
    n = 1000
    batch = {"t": np.arange(n), "k": np.arange(n) % 7, "v": np.arange(n) % 5}
    op = KeyedWindowAggregate("k", hopping_window(100, 100, 0), UDMS["q17"](), name="kw")
    op.process(src.push(batch))
    assert op.open and all(type(t) is KeyTable for t in op.open.values())
    snap = op.snapshot()
    assert all(type(t) is dict for t in snap["open"].values())
    assert all(type(t) is KeyTable for t in op.open.values())  # (the live ones stay)


@pytest.mark.ray
@pytest.mark.parametrize("kinds", [("int", "int"), ("int", "float", "int"), ("huge", "int")])
def test_on_ray_as_inline(kinds, ray_session):
    """The same query on Ray (the keyed window in an actor, its tables pickled as plain states
    wherever they cross) as inline, over batches whose value kind changes."""
    rng = np.random.default_rng(11)
    parts = []
    for kind in kinds:
        m = 400
        v = {"int": rng.integers(-4, 5, m), "float": rng.integers(1, 5, m) * 0.25,
             "huge": rng.integers(2**59, 2**60, m)}[kind]
        parts.append(pa.table({"t": np.sort(rng.integers(0, 1000, m)) + 1000 * len(parts),
                               "k": rng.integers(0, 6, m), "v": v}))
    data = pa.concat_tables(parts, promote_options="permissive")

    def run(runtime):
        src = Stream.from_arrow(data, start="t", advance=AdvanceTime(every=50), batch_rows=400)
        q = src.group_apply("k", lambda g: g.hopping_window(300, 100).aggregate(UDMS["q17"]()))
        return to_cht(q.collect(runtime=runtime))

    want = run("inline")
    assert want
    assert run("ray") == want
