"""``select(fn, vectorized=True)`` and ``where(pred, vectorized=True)``
(operators/vectorized.py): the function runs once per ``Columns`` batch and on single inserts
and retractions as a one-row batch, with the per-event path's CHT; wrong results are clear
errors; :func:`per_value` is ``[fn(v) for v in column]`` exactly, one call per distinct value.
End to end (inline and on Ray): a vectorised query over ``from_arrow`` gives what the same
query written per payload gives over ``from_rows``."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from operators.cht import to_cht
from operators.columns import Columns, expand, row_at
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.select import Select
from operators.vectorized import Vectorized, per_value
from operators.where import Where
from tests.kit import assert_equivalent
from topology import Stream

URL = re.compile(r"id=(\d+)")


def url_id(u: str) -> str | None:
    m = URL.search(u)
    return None if m is None else m.group(1)


def row_fn(p: dict) -> dict:
    return {"k": p["k"] * 2, "id": url_id(p["url"]), "n": len(p["url"])}


def batch_fn(c: dict) -> dict:
    return {"k": c["k"] * 2, "id": per_value(url_id, c["url"]), "n": per_value(len, c["url"])}


def row_pred(p: dict) -> bool:
    return url_id(p["url"]) is not None


def batch_pred(c: dict) -> np.ndarray:
    return per_value(lambda u: url_id(u) is not None, c["url"])


def columns(ks: list[int], urls: list[str], first_id: int = 0) -> Columns:
    n = len(ks)
    url = np.empty(n, dtype=object)
    url[:] = urls
    return Columns(np.arange(first_id, first_id + n), np.arange(n, dtype=np.int64) * 10, None,
                   {"k": np.array(ks, dtype=np.int64), "url": url})


BATCH = columns([1, 2, 3, 4], ["a?id=7", "b", "c?x=1&id=12", "a?id=7"])


def test_select_runs_once_per_batch_with_the_per_event_payloads():
    calls = []

    def counted(c: dict) -> dict:
        calls.append(len(c["k"]))
        return batch_fn(c)

    out = Select(counted, vectorized=True).process([BATCH, Cti(100)])
    assert calls == [4]  # once for the batch of 4, not per event
    assert isinstance(out[0], Columns)
    assert list(expand(out)) == Select(row_fn).process(BATCH.inserts() + [Cti(100)])
    assert out[0].payload_at(1) == {"k": 4, "id": None, "n": 1}


def test_select_gives_a_retraction_its_inserts_payload():
    p = BATCH.payload_at(2)
    out = Select(batch_fn, vectorized=True).process(
        [Insert(2, 20, 30, p), Retract(2, 20, 30, 23, p)])
    assert out == [Insert(2, 20, 30, {"k": 6, "id": "12", "n": 11}),
                   Retract(2, 20, 30, 23, {"k": 6, "id": "12", "n": 11})]
    assert to_cht(out) == [(20, 23, {"k": 6, "id": "12", "n": 11})]


def test_where_masks_a_batch_and_single_events_alike():
    out = Where(batch_pred, vectorized=True).process([BATCH])
    assert [m.id for m in expand(out)] == [0, 2, 3]
    assert out[0].take(np.array([0])).payload_at(0)["url"] == "a?id=7"
    ins = BATCH.inserts_at(1)  # no id: dropped, and its retraction with it
    assert Where(batch_pred, vectorized=True).process(
        [ins, Retract(ins.id, ins.start, ins.end, ins.start, ins.payload)]) == []
    keep = BATCH.inserts_at(0)
    assert Where(batch_pred, vectorized=True).process([keep]) == [keep]
    everything = Where(lambda c: np.ones(len(c["k"]), bool), vectorized=True).process([BATCH])
    assert everything == [BATCH]
    assert Where(lambda c: np.zeros(len(c["k"]), bool), vectorized=True).process([BATCH]) == []


def test_arrow_columns_become_the_columns_a_source_makes():
    def arrow(c: dict) -> tuple:
        return (pa.array(c["k"]), pa.array([url_id(u) for u in c["url"]]),
                pa.chunked_array([pa.array(c["k"] > 2)]))

    out = Select(arrow, vectorized=True).process([BATCH])[0]
    k, ids, big = out.payload
    assert k.dtype == np.int64 and big.dtype == bool
    assert ids.dtype == object and ids.tolist() == ["7", None, "12", "7"]
    masked = Where(lambda c: pa.array(c["k"] % 2 == 0), vectorized=True).process([BATCH])
    assert [m.payload["k"] for m in expand(masked)] == [2, 4]


@pytest.mark.parametrize(("fn", "error", "message"), [
    (lambda c: {"k": c["k"][:2]}, ValueError, "column 'k' of 2 values for a batch of 4"),
    (lambda c: {"k": list(c["k"])}, TypeError, "column 'k' as list"),
    (lambda c: (c["k"], np.ones((4, 2))), TypeError, "column 1 as ndarray"),
])
def test_a_select_returning_wrong_columns_says_what_was_expected(fn, error, message):
    with pytest.raises(OperatorError, match=re.escape(message)) as info:
        Select(fn, name="s1", vectorized=True).process([BATCH])
    assert f"{error.__name__}: select" in str(info.value)
    assert "select(<lambda>, vectorized=True) (step 's1')" in str(info.value)
    assert "one value per event" in str(info.value)


@pytest.mark.parametrize(("pred", "error", "message"), [
    (lambda c: c["k"], TypeError, "an array of int64: return a boolean mask"),
    (lambda c: c["k"][:3] > 1, ValueError, "a mask of 3 values for a batch of 4"),
    (lambda c: pa.array([True, None, False, True]), ValueError, "a mask with 1 nulls"),
    (lambda c: True, TypeError, "returned bool: return a boolean mask"),
])
def test_a_where_returning_no_mask_says_what_was_expected(pred, error, message):
    with pytest.raises(OperatorError, match=re.escape(message)) as info:
        Where(pred, vectorized=True).process([BATCH])
    assert f"{error.__name__}: where" in str(info.value)


def test_per_value_is_the_per_row_list_with_one_call_per_distinct_value():
    seen: list = []

    def f(v):
        seen.append(v)
        return repr(v)

    mixed = np.empty(7, dtype=object)
    mixed[:] = [1, True, 1.0, -0.0, 0.0, None, 1]
    got = per_value(f, mixed)
    assert got.tolist() == [repr(v) for v in mixed.tolist()]  # 1, True, 1.0 stay apart
    assert len(seen) == 6
    floats = np.array([0.0, -0.0, 0.0, float("nan")])
    assert per_value(repr, floats).tolist() == ["0.0", "-0.0", "0.0", "nan"]
    strings = np.empty(5, dtype=object)
    strings[:] = ["b", None, "a", "b", "ä"]
    seen.clear()
    assert per_value(f, strings).tolist() == ["'b'", "None", "'a'", "'b'", "'ä'"]
    assert sorted(map(repr, seen)) == sorted(map(repr, ["b", None, "a", "ä"]))
    assert per_value(len, np.array(["ab", "c"], dtype=object)).dtype == np.int64
    assert per_value(str, np.array([], dtype=np.int64)).tolist() == []
    unhashable = np.empty(2, dtype=object)
    unhashable[:] = [[1], [1, 2]]
    assert per_value(len, unhashable).tolist() == [1, 2]


def test_explain_says_a_vectorised_step_runs_column_wise():
    text = (Stream.from_rows([{"t": 0, "k": 1, "url": "u"}], start="t")
            .select(batch_fn, vectorized=True).where(batch_pred, vectorized=True).explain())
    assert "select(batch_fn) [column-wise]" in text
    assert "per event" not in text


def test_vectorised_query_gives_the_per_payload_querys_cht(runtime):
    rng = np.random.default_rng(3)
    n = 3_000
    urls = np.array([f"https://x/{i}?id={i}" if i % 3 else f"https://x/{i}" for i in
                     rng.integers(0, 50, n)], dtype=object)
    cols = {"t": np.arange(n, dtype=np.int64) * 5, "k": rng.integers(0, 9, n), "url": urls}
    rows = [row_at(cols, i) for i in range(n)]
    got = (Stream.from_arrow(pa.table(cols), start="t", shape="point")
           .select(batch_fn, vectorized=True)
           .where(lambda c: per_value(lambda v: v is not None, c["id"]), vectorized=True)
           .collect(runtime))
    want = (Stream.from_rows(rows, start="t", shape="point").select(row_fn)
            .where(lambda p: p["id"] is not None).collect("inline"))
    assert 1_000 < len(to_cht(want)) < n
    assert_equivalent(got, want)


def test_vectorized_wraps_only_functions():
    with pytest.raises(TypeError, match="give a function of the payload columns"):
        Vectorized(3)  # type: ignore[arg-type]


def test_per_value_strings_cross_as_arrow_taken_from_their_few_results():
    """A string result column remembers how to make its Arrow array from the distinct results
    (what the wire sends); a result that is not all strings remembers nothing usable."""
    import pyarrow as pa

    from operators.columns import portable_column, restored_column

    urls = restored_column(pa.array([f"/a/{i % 7}/x" for i in range(1000)]))
    dirs = per_value(lambda u: u.split("/")[2], urls)
    wire = portable_column(dirs)
    assert isinstance(wire, pa.StringArray) and wire.to_pylist() == dirs.tolist()
    assert dirs.tolist()[:3] == ["0", "1", "2"]
    mixed = per_value(lambda u: None if u.endswith("3/x") else u, urls)
    again = portable_column(mixed)
    assert list(again.to_pylist() if isinstance(again, pa.Array) else again) == mixed.tolist()
    odd = per_value(lambda u: b"x" if u.endswith("3/x") else u, urls)
    assert portable_column(odd) is odd  # bytes among strings: sent as the objects


def test_per_value_groups_a_changed_column_again():
    """The groups of a read-only column are reused by the next call on it; a writeable
    column, which may change between calls, is grouped every time."""
    column = np.array(["a", "b", "a"] * 100, dtype=object)
    assert per_value(str.upper, column).tolist()[:3] == ["A", "B", "A"]
    column[0] = "c"
    assert per_value(str.upper, column).tolist()[:3] == ["C", "B", "A"]


def test_rows_taken_from_a_string_column_read_from_arrow_cross_as_arrow():
    """A filter's rows of a string column read from Arrow are sent as Arrow taken from it
    while that column lives, and as their values once it is gone."""
    import gc

    from operators.columns import portable_column, restored_column

    source = restored_column(pa.array([f"u{i % 5}" for i in range(2000)]))
    batch = Columns(np.arange(2000), np.arange(2000), None, {"u": source})
    kept = batch.take(np.arange(2000) % 3 == 0).payload["u"]
    assert isinstance(portable_column(kept), pa.StringArray)
    assert portable_column(kept).to_pylist() == kept.tolist()
    later = batch.take(np.arange(2000)[::-2]).payload["u"]
    del batch, source
    gc.collect()
    assert portable_column(later).to_pylist() == later.tolist()  # made from the values
