"""The column-wise path gives the row path's CHT end to end, inline and on Ray, on the narrow
Arrow types Spark delivers (IntegerType → int32, ByteType → int8, FloatType → float32): the
findings of the exactness review, each a query over ``from_arrow`` (columns) compared with the
same query over ``from_rows`` (payload dicts, every function per event)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from operators.aggregates import Count, Sum
from operators.cht import to_cht
from operators.columns import row_at
from tests.kit import assert_equivalent
from topology import Stream

N = 2_000
RNG = np.random.default_rng(7)
COLS = {"t": np.arange(N, dtype=np.int64) * 10,
        "a": RNG.integers(-40_000, 40_000, N).astype(np.int32),
        "b": RNG.integers(0, 3, N).astype(np.int32),
        "u": RNG.integers(0, 4, N).astype(np.uint8),
        "f": RNG.random(N).astype(np.float32) * 0.2}
TABLE = pa.table(COLS)
ROWS = [row_at(COLS, i) for i in range(N)]

QUERIES = {
    "int32 overflow": lambda s: s.where(lambda p: p["a"] * 100_000 > 0),
    "uint8 underflow": lambda s: s.where(lambda p: p["u"] - 1 < 0),
    "float32 compare": lambda s: s.where(lambda p: p["f"] > 0.1),
    "int32 key, keyed window": lambda s: s.group_apply(
        lambda p: p["a"] * 100_000 + p["b"], lambda g: g.tumbling_window(1_000)
        .aggregate(Count())),
    "int32 field of Sum": lambda s: s.group_apply(
        lambda p: p["b"], lambda g: g.tumbling_window(1_000)
        .aggregate(Sum(lambda p: p["a"] * 100_000 * 0.5))),
}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_columns_and_rows_give_one_cht(runtime, query):
    q = QUERIES[query]
    columns = q(Stream.from_arrow(TABLE, start="t")).collect(runtime)
    rows = q(Stream.from_rows(ROWS, start="t")).collect("inline")
    assert to_cht(rows), "the query keeps nothing: it proves nothing"
    assert_equivalent(columns, rows)


def test_a_zero_divisor_fails_the_query_as_the_rows_do(runtime):
    cols = {"t": np.arange(4, dtype=np.int64), "a": np.array([4, 5, 6, 7], np.int32),
            "b": np.array([2, 1, 0, 1], np.int32)}
    for src in (Stream.from_arrow(pa.table(cols), start="t"),
                Stream.from_rows([row_at(cols, i) for i in range(4)], start="t")):
        with pytest.raises(Exception, match="ZeroDivisionError"):
            src.select(lambda p: p["a"] // p["b"]).collect(runtime)


def test_explain_says_how_each_step_runs():
    q = (Stream.from_arrow(TABLE, start="t").where(lambda p: p["a"] > 0)
         .select(lambda p: p["a"] if p["b"] else 0))
    text = q.explain()
    assert "column-wise" in text
    assert "per event" in text and "truth of a whole column" in text
