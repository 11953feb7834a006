"""Keys that compare equal are one group on every path, and ``Min``/``Max`` over values that
do not order fail with the same clear error on every path.

Before, partition routing hashed ``np.int64(1)`` and ``Decimal(1)`` by their pickled bytes, so
on Ray with ``partitions > 1`` the events of one group landed on different partitions (and
became several groups), while the inline run kept them together."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from operators.aggregates import Count, Max, Min
from operators.cht import to_cht
from operators.errors import OperatorError
from topology import Stream
from topology.planning.routing import stable_hash

ONE = [1, np.int64(1), 1.0, Decimal(1), np.float32(1.0), Fraction(1), True, np.uint8(1)]
HALF = [1.5, np.float32(1.5), Decimal("1.5"), Fraction(3, 2), np.float64(1.5)]


def test_equal_keys_hash_equally():
    assert len({stable_hash(k) for k in ONE}) == 1
    assert len({stable_hash(k) for k in HALF}) == 1
    assert stable_hash((1, "a")) == stable_hash((np.int16(1), "a"))
    assert stable_hash(float("nan")) == stable_hash(np.float32("nan"))


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("shape", ["point", "interval"])
def test_equal_keys_are_one_group(runtime, partitions, shape):
    # 64 events, key i % 2 written in many types: two groups, whatever the plan
    rows = [{"t": i, "e": i + 1, "i": i} for i in range(64)]
    keys = {0: ONE, 1: [2, np.int32(2), 2.0, Decimal(2)]}
    src = Stream.from_rows(rows, start="t", end=None if shape == "point" else "e", shape=shape)
    q = src.group_apply(lambda p: keys[p["i"] % 2][p["i"] // 2 % len(keys[p["i"] % 2])],
                        lambda g: g.tumbling_window(100).aggregate(Count()),
                        partitions=partitions)
    assert sorted(p for _, _, p in to_cht(q.collect(runtime))) == [(1, 32), (2, 32)]


@pytest.mark.parametrize("agg", [Min, Max])
@pytest.mark.parametrize("shape", ["point", "interval"])
@pytest.mark.parametrize("values", [[1, None, 3], [None], [None, float("nan")]])
def test_min_max_over_values_that_do_not_order(runtime, agg, shape, values):
    rows = [{"t": i, "e": i + 1, "k": 0, "v": v} for i, v in enumerate(values)]
    src = Stream.from_rows(rows, start="t", end=None if shape == "point" else "e", shape=shape)
    q = src.group_apply(lambda p: p["k"], lambda g: g.tumbling_window(10).aggregate(agg("v")))
    with pytest.raises(OperatorError, match=r"cannot order None \(a missing value\)"):
        q.collect(runtime)


# -- partitioning column batches column-wise gives the per-event partitions ---------------------
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from operators.columns import Columns  # noqa: E402
from topology.planning.routing import OutEdge, Partitioner, Router, stable_hash_column  # noqa: E402

KEY_COLUMNS = st.one_of(
    hnp.arrays(st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint64, np.bool_]),
               st.integers(0, 40)),
    hnp.arrays(np.float64, st.integers(0, 40),
               elements=st.one_of(st.integers(-2**54, 2**54).map(float), st.floats())))


@given(KEY_COLUMNS)
def test_column_hashes_are_the_per_key_hashes(keys):
    hashes = stable_hash_column(keys)
    if hashes is not None:
        assert hashes.tolist() == [stable_hash(k) for k in keys.tolist()]


@given(KEY_COLUMNS, st.integers(1, 5))
def test_a_column_batch_is_routed_as_its_events_are(keys, n):
    cols = Columns(np.arange(len(keys)), np.arange(len(keys)), None, {"k": keys})
    part = Partitioner(lambda p: p["k"], n)
    router = Router([OutEdge(f"g{i}", 0, part, i) for i in range(n)])
    by_columns = [[e for m in b for e in (m.inserts() if type(m) is Columns else [m])]
                  for b in router.route([cols])]
    by_events = router.route(cols.inserts())
    assert repr(by_columns) == repr(by_events)  # (NaN keys: equal by their repr)
