"""Result types do not depend on event order, and NaN group keys are one group (issue #28,
item 7), on every path: the general window operator (per event, incremental), the keyed
window aggregate (per event and column-wise), retractions, and ``group_apply``'s general
path, inline and on Ray.

Before, a window that output ``Sum = 2`` kept that row when ``-0.0`` joined it, because the
new result ``2.0`` compared equal to ``2``: ``[2, -0.0]`` gave ``2`` and ``[-0.0, 2]`` gave
``2.0``. Likewise ``Max`` of ``0`` and ``-0.0`` was whichever came first. And every NaN key
made a group of its own (NaN equals nothing): 4 events, 4 groups.

The rule (docs/operators.md, :mod:`operators.aggregates`): a Sum with a float term is a
float; Min and Max pick among equal values by a fixed rank, ``-0.0`` below an int below a
float. NaN keys are one group, as in SQL's ``GROUP BY``.
"""

from __future__ import annotations

import math
import pickle

import pyarrow as pa
import pytest

from operators.aggregates import Count, Max, Min, Sum
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.windows import tumbling_window
from operators.windows.hopping import HoppingWindowOperator
from operators.windows.keyed import KeyedWindowAggregate
from topology import AdvanceTime, Stream

# values, and what each aggregate gives over them whatever their order
CASES = {
    "2 and -0.0": ([2, -0.0], {"sum": "2.0", "max": "2", "min": "-0.0"}),
    "0 and -0.0": ([0, -0.0], {"sum": "0.0", "max": "0", "min": "-0.0"}),
    "2 and 2.0": ([2, 2.0], {"sum": "4.0", "max": "2.0", "min": "2"}),
    "0.0 and -0.0": ([0.0, -0.0], {"sum": "0.0", "max": "0.0", "min": "-0.0"}),
}
AGGS = {"sum": Sum, "max": Max, "min": Min}


def payload_reprs(out):
    """The output CHT's payloads as their reprs (``2`` and ``2.0`` differ, as do the signs
    of zero: a CHT comparison by equality would not see the difference)."""
    return sorted(repr(p) for _, _, p in to_cht(out))


def each_in_its_batch(values):
    """One event per batch, a CTI after each: the window outputs a result after the first
    event, and corrects it (or, before, kept it) when the second arrives."""
    msgs = []
    for i, v in enumerate(values):
        msgs += [Insert(i, i, i + 1, {"k": "a", "v": v}), Cti(i + 1)]
    return msgs


def query(path, values, agg):
    if path == "window":  # the general window operator: per event, incremental
        return Stream.from_events(each_in_its_batch(values)).tumbling_window(10).aggregate(agg)
    rows = [{"t": i, "k": "a", "v": v} for i, v in enumerate(values)]
    src = Stream.from_rows(rows, start="t", advance=AdvanceTime(every=1))
    if path == "keyed":  # the keyed window aggregate, all groups at once
        return src.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(10).aggregate(agg))
    # group_apply's general path (on_error="dead_letter" is not the keyed operator's)
    return src.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(10)
                           .aggregate(agg, on_error="dead_letter"))


@pytest.mark.parametrize("path", ["window", "keyed", "group_apply"])
@pytest.mark.parametrize("case", list(CASES))
def test_result_types_do_not_depend_on_event_order(runtime, path, case):
    values, expected = CASES[case]
    for name, agg in AGGS.items():
        want = expected[name] if path == "window" else f"('a', {expected[name]})"
        for order in (values, values[::-1]):
            got = payload_reprs(query(path, order, agg("v")).collect(runtime, batch_size=1))
            assert got == [want], (name, order, got)


def test_a_float_column_column_wise(runtime):
    # the keyed aggregate's column path: Max/Min of 0.0 and -0.0 in one float column
    for values in ([0.0, -0.0, 1.0], [-0.0, 0.0, 1.0]):
        table = pa.table({"t": [0, 1, 5], "k": [1, 1, 2], "v": values})
        for agg, want in ((Max("v"), ["(1, 0.0)", "(2, 1.0)"]),
                          (Min("v"), ["(1, -0.0)", "(2, 1.0)"])):
            q = Stream.from_arrow(table, start="t").group_apply(
                lambda r: r["k"], lambda g, agg=agg: g.tumbling_window(10).aggregate(agg))
            assert payload_reprs(q.collect(runtime)) == want, (agg, values)


@pytest.mark.parametrize("kept, deleted", [(2, -0.0), (-0.0, 0), (0, -0.0)])
def test_a_retraction_gives_back_the_result_of_what_is_left(runtime, kept, deleted):
    #   window [0 ---------------------------- 10)
    #   kept    [0 ------------------------ 10)
    #   deleted     [1 -------------------- 10), then deleted: the window holds kept alone
    for agg in (Sum(), Min(), Max()):
        for first in ("kept", "deleted"):
            ins = {"kept": Insert("k", 0, 10, kept), "deleted": Insert("d", 1, 10, deleted)}
            a, b = (ins["kept"], ins["deleted"]) if first == "kept" else \
                (ins["deleted"], ins["kept"])
            msgs = [a, Cti(0), b, Cti(0), Retract("d", 1, 10, 1, deleted), Cti(20)]
            out = Stream.from_events(msgs).tumbling_window(10).aggregate(agg).collect(
                runtime, batch_size=1)
            assert payload_reprs(out) == [repr(agg.compute([kept]))], (agg, first)


# -- NaN keys -------------------------------------------------------------------------------
NAN_ROWS = [{"t": i, "k": float("nan"), "v": 1} for i in range(4)]  # four NaN objects


@pytest.mark.parametrize("path", ["keyed", "group_apply"])
@pytest.mark.parametrize("partitions", [1, 3])
def test_nan_keys_are_one_group(runtime, path, partitions):
    rows = NAN_ROWS + [{"t": 4, "k": 1.5, "v": 1}]
    src = Stream.from_rows(rows, start="t")
    opts = {} if path == "keyed" else {"on_error": "dead_letter"}
    q = src.group_apply(lambda r: r["k"], lambda g: g.tumbling_window(10)
                        .aggregate(Count(), **opts), partitions=partitions)
    got = sorted(repr(p) for _, _, p in to_cht(q.collect(runtime)))
    assert got == ["(1.5, 1)", "(nan, 4)"]


def test_nan_keys_are_one_group_column_wise_and_in_tuples(runtime):
    table = pa.table({"t": list(range(6)), "k": [math.nan, 1.0, math.nan, math.nan, 1.0, 2.0]})
    src = Stream.from_arrow(table, start="t")
    for key, want in ((lambda r: r["k"], ["(1.0, 2)", "(2.0, 1)", "(nan, 3)"]),
                      (lambda r: (r["k"], "x"),
                       ["((1.0, 'x'), 2)", "((2.0, 'x'), 1)", "((nan, 'x'), 3)"])):
        q = src.group_apply(key, lambda g: g.tumbling_window(100).aggregate(Count()))
        assert sorted(repr(p) for _, _, p in to_cht(q.collect(runtime))) == want
    # a null among the keys makes the key column an object column: coded key by key
    table = pa.table({"t": list(range(4)), "k": [math.nan, None, math.nan, 1.0]})
    q = Stream.from_arrow(table, start="t").group_apply(
        lambda r: r["k"], lambda g: g.tumbling_window(100).aggregate(Count()))
    assert sorted(repr(p) for _, _, p in to_cht(q.collect(runtime))) == [
        "(1.0, 1)", "(None, 1)", "(nan, 2)"]


def _identity(p):
    return p


def _group_apply():
    return GroupApply(_identity, lambda: HoppingWindowOperator(tumbling_window(10), Count()))


def _keyed():
    return KeyedWindowAggregate(_identity, tumbling_window(10), Count())


@pytest.mark.parametrize("make", [_group_apply, _keyed], ids=["group_apply", "keyed"])
def test_nan_keys_stay_one_group_across_a_checkpoint(make):
    # a restored state holds other NaN objects than the ones it was saved with
    before = make()
    out = before.process([Insert(0, 0, 1, float("nan")), Insert(1, 1, 2, float("nan")), Cti(2)])
    after = make()
    after.restore(pickle.loads(pickle.dumps(before.snapshot())))
    out += after.process([Insert(2, 2, 3, float("nan")), Cti(20)])
    finals = [p for _, _, p in to_cht(out)]
    assert len(finals) == 1 and finals[0][1] == 3, out
