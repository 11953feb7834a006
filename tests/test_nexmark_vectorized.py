"""Nexmark's row-at-a-time queries (Q10, Q14, Q21, Q22: strings, a regular expression, time
formats) run column-wise (``select``/``where`` with ``vectorized=True``, operators/vectorized.py),
and give the same rows one event at a time (``from_rows``: every payload a one-row batch) as
on the generator's column batches (``from_arrow``), on generated bids and on hand-made edge
cases. Inline only (tests/operators/test_vectorized.py runs a vectorised query on Ray)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from benchmarks.nexmark import generator as gen
from benchmarks.nexmark import queries as nq
from operators.cht import to_cht
from tests.test_nexmark import H, S, bid_rows, rows_of
from topology import Stream

QUERIES = {"Q10": nq.q10, "Q14": nq.q14, "Q21": nq.q21, "Q22": nq.q22}

EDGES = bid_rows([
    {"t": 1, "price": 1_101_322, "extra": "cac", "channel": "Apple", "url": "a?channel_id=9"},
    {"t": 7 * H, "price": 2_000_000, "extra": "", "channel": "BAIDU", "url": "a//b"},
    {"t": 8 * H, "price": 2_000_000, "extra": "CcC", "channel": "channel-8",
     "url": "channel_id=8&x=1"},
    {"t": 19 * H + 59 * 60 * S + 59 * S, "price": 2_000_000, "extra": "ccc",
     "channel": "channel-5", "url": "https://x/?a=1&channel_id=&b=2"},
    {"t": 24 * H, "price": 55_066_079, "channel": "other", "url": "https://x/y/z/w?q=1"},
    {"t": 24 * H + 1, "price": 55_066_079, "channel": "İ", "url": "https://x/ä/ß/w"}])


@pytest.fixture(scope="module")
def bids() -> pa.Table:
    return gen.generate(8_000, seed=11, inter_event_delay=1_000)["bid"]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_row_at_a_time_queries_run_column_wise(name: str, bids: pa.Table) -> None:
    source = Stream.from_arrow(bids, start="date_time", shape="point")
    text = QUERIES[name](source).explain(stages=False)
    assert "[column-wise]" in text
    assert "per event" not in text, text


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("table", ["generated", "edges"])
def test_one_event_at_a_time_gives_the_batches_rows(name: str, table: str,
                                                    bids: pa.Table) -> None:
    data = bids if table == "generated" else EDGES
    query: Any = QUERIES[name]
    columns = to_cht(query(Stream.from_arrow(data, start="date_time", shape="point"))
                     .collect(runtime="inline"))
    rows = to_cht(query(Stream.from_rows(rows_of(data), start="date_time", shape="point"))
                  .collect(runtime="inline"))
    assert columns, "the query keeps nothing: it proves nothing"
    assert rows == columns


def test_q21_ids_are_the_per_bid_function_s() -> None:
    got = [(p["channel"], p["channel_id"]) for _, _, p in to_cht(nq.q21(
        Stream.from_arrow(EDGES, start="date_time", shape="point")).collect(runtime="inline"))]
    expected = [(r["channel"], nq.channel_id(r)) for r in rows_of(EDGES)
                if nq.channel_id(r) is not None]
    assert got == expected == [("Apple", "0"), ("BAIDU", "3"), ("channel-8", "8"),
                               ("channel-5", "")]


def test_q3s_people_are_kept_column_wise() -> None:
    tables = gen.generate(2_000, seed=3)
    src = nq.sources(tables)
    text = nq.q3(src["person"], src["auction"]).explain(stages=False)
    assert "where(q3_person) [column-wise]" in text
