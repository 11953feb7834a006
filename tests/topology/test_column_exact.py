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


# -- functions whose branch depends on what the payload is (finding 1 of round four) -----------
def _as_int(x):
    try:
        return int(x)
    except TypeError:  # the stand-in field is no int: traced, this branch gave a constant 0
        return 0


def _v_or_zero(p):
    match p:
        case {"v": v}:
            return v
        case _:
            return 0


def _v_or_w(p):  # reads "w" only when "v" fails: pruning "w" made a null fail on columns only
    try:
        return p["v"] + 1
    except TypeError:
        return p["w"]


#: each gives [1, 2, 3] on the payloads {"v": 1}, {"v": 2}, {"v": 3}; traced on the stand-in
#: payload, each took the other branch and ran column-wise as the constant 0
BRANCHING = {
    "isinstance of the payload": lambda p: p["v"] if isinstance(p, dict) else 0,
    "type() of the payload": lambda p: p["v"] if type(p) is dict else 0,
    "hasattr on the payload": lambda p: p["v"] if hasattr(p, "keys") else 0,
    "__class__ of the payload": lambda p: p["v"] if p.__class__ is dict else 0,
    "a helper that catches": lambda p: _as_int(p["v"]),
    "a match statement": _v_or_zero,
}


@pytest.mark.parametrize("fn", sorted(BRANCHING))
def test_a_function_that_branches_on_the_payload_gives_the_rows_answer(runtime, fn):
    cols = {"t": np.arange(3, dtype=np.int64), "v": np.array([1, 2, 3], np.int64)}
    for src in (Stream.from_arrow(pa.table(cols), start="t"),
                Stream.from_rows([row_at(cols, i) for i in range(3)], start="t")):
        q = src.select(BRANCHING[fn])
        assert sorted(p for _, _, p in to_cht(q.collect(runtime))) == [1, 2, 3]
        assert "column-wise" not in q.explain().split("select")[-1]


def test_a_column_read_inside_a_try_is_not_pruned(runtime):
    cols = {"t": np.arange(3, dtype=np.int64), "v": np.array([1, None, 3], dtype=object),
            "w": np.array([10, 20, 30], np.int64)}
    got = Stream.from_arrow(pa.table(cols), start="t").select(lambda p: _v_or_w(p)).collect(runtime)
    assert sorted(p for _, _, p in to_cht(got)) == [2, 4, 20]
