"""Column pruning (``topology.planning.pruning``): a source of batches reads only the columns its
query reads, and the output's CHT is exactly the unpruned plan's, inline and on Ray. A step whose
reads the planner cannot know (a UDF over the whole payload, a function the tracer cannot
follow, one with a ``try``) keeps every column."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import topology.planning.planner as planner
from operators.aggregates import Aggregates, Count, Max, Sum
from operators.cht import to_cht
from operators.expr import col
from operators.ingress import AdvanceTime
from tests.kit import PROPERTY
from topology import Stream, per_value
from topology.planning.pruning import function_reads, project_batch, source_columns


@contextmanager
def pruning(on: bool) -> Iterator[None]:
    was = planner.PRUNE_COLUMNS
    planner.PRUNE_COLUMNS = on
    try:
        yield
    finally:
        planner.PRUNE_COLUMNS = was


def key_k(p: dict[str, Any]) -> Any:
    return p["k"]


def big_v(p: dict[str, Any]) -> Any:
    return p["v"] > 3


def mix(p: dict[str, Any]) -> Any:
    return (p["k"] * 2 + p["v"], p["w"])


def note_length(p: dict[str, Any]) -> Any:  # len(): the tracer cannot follow it
    return len(p["note"]) + p["k"]


def guarded(p: dict[str, Any]) -> Any:  # reads "note" only when the division fails
    try:
        return p["k"] // p["v"]
    except ZeroDivisionError:
        return p["note"]


def note_sizes(b: dict[str, Any]) -> Any:  # a batch function: its code names what it reads
    return {"k": b["k"], "n": per_value(len, b["note"]) + (b["v"] if len(b["k"]) > 2 else 0)}


def small_w(b: dict[str, Any]) -> Any:
    return b["w"] < 1


def passes_the_batch(b: dict[str, Any]) -> Any:  # hands its argument on: reads any column
    return note_sizes(b)


def reads_by_name(b: dict[str, Any]) -> Any:  # the name is not a constant: any column
    name = "note"
    return {"n": b[name]}


def reads_in_an_inner_function(b: dict[str, Any]) -> Any:
    return {"n": per_value(lambda v: v + b["note"][0], b["k"])}


def reads_and_drops(p: dict[str, Any]) -> Any:  # reads "note" (fails without it), drops it
    p["note"]
    return p["k"]


#: name -> (query over the source, the columns the source must read; None: every column)
PIPELINES: dict[str, tuple[Callable[[Stream], Stream], frozenset[str] | None]] = {
    "group count": (lambda s: s.group_apply(key_k, lambda g: g.hopping_window(10, 2, emit="final")
                                            .aggregate(Count())).to_points(),
                    frozenset({"k", "t"})),
    "group by name": (lambda s: s.group_apply("k", lambda g: g.tumbling_window(5)
                                              .aggregate(Aggregates(n=Count(), m=Max("v")))),
                      frozenset({"k", "v", "t"})),
    "where sum": (lambda s: s.where(big_v).tumbling_window(10).aggregate(Sum("v")),
                  frozenset({"v", "t"})),
    "where count": (lambda s: s.where(lambda p: p["w"] > 0.5)
                    .group_apply(key_k, lambda g: g.tumbling_window(5).aggregate(Count())),
                    frozenset({"k", "w", "t"})),
    "where select": (lambda s: s.where(col("w") > 0.5).select(mix).shift(3),
                     frozenset({"k", "v", "w", "t"})),
    "union": (lambda s: s.where(big_v).select(key_k).union(s.select(lambda p: p["v"] * 3))
              .alter_lifetime(duration=4), frozenset({"k", "v", "t"})),
    "max of a join": (lambda s: s.select(key_k).join(s.select(lambda p: p["k"]))
                      .tumbling_window(10).aggregate(Count()), frozenset({"k", "t"})),
    "join select": (lambda s: s.where(big_v).alter_lifetime(duration=7)
                    .join(s.alter_lifetime(duration=3), on=(key_k, "k"),
                          select=lambda a, b: {"a": a["v"] * 2, "b": b["w"]}),
                    frozenset({"k", "v", "w", "t"})),
    "join, the pair": (lambda s: s.join(s.select(key_k), on=("k", lambda k: k)), None),
    "join, a side whole": (lambda s: s.join(s, on=("k", "k"), select=lambda a, b: b), None),
    "whole payload": (lambda s: s.where(big_v), None),
    "untraceable udf": (lambda s: s.select(note_length).tumbling_window(10)
                        .aggregate(Max()), None),
    "try in a udf": (lambda s: s.select(guarded).tumbling_window(10).aggregate(Count()), None),
    "read dropped": (lambda s: s.select(reads_and_drops).tumbling_window(10)
                     .aggregate(Count()), frozenset({"k", "note", "t"})),
    "vectorized": (lambda s: s.where(small_w, vectorized=True)
                   .select(note_sizes, vectorized=True).tumbling_window(10).aggregate(Sum("n")),
                   frozenset({"k", "note", "v", "w", "t"})),
    "vectorized, the batch passed on": (lambda s: s.select(passes_the_batch, vectorized=True)
                                        .tumbling_window(10).aggregate(Sum("n")), None),
    "vectorized, a name not constant": (lambda s: s.select(reads_by_name, vectorized=True)
                                        .tumbling_window(10).aggregate(Count()), None),
    "vectorized, an inner function": (lambda s: s.select(reads_in_an_inner_function,
                                                         vectorized=True)
                                      .tumbling_window(10).aggregate(Count()), None),
    "window of payloads": (lambda s: s.tumbling_window(10).aggregate(lambda ps: len(ps)),
                           None),
}


def table(rows: list[tuple[int, int, int, float, str]]) -> pa.Table:
    t = sorted(r[0] for r in rows)
    return pa.table({"t": t, "k": [r[1] for r in rows], "v": [r[2] for r in rows],
                     "w": [r[3] for r in rows], "note": [r[4] for r in rows],
                     "extra": [f"x{i}" for i in range(len(rows))]})


ROWS = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3), st.integers(0, 6),
                          st.sampled_from([0.25, 0.75, 1.5]), st.sampled_from(["a", "bb", ""])),
                min_size=1, max_size=60)


def run(name: str, data: pa.Table, prune: bool, runtime: str = "inline",
        batch_rows: int = 7) -> list[Any]:
    query, _ = PIPELINES[name]
    src = Stream.from_arrow(data, start="t", advance=AdvanceTime(every=5), name="src",
                            batch_rows=batch_rows)
    with pruning(prune):
        return to_cht(query(src).collect(runtime=runtime))


def read_columns(name: str) -> frozenset[str] | None:
    query, _ = PIPELINES[name]
    src = Stream.from_arrow(table([(0, 1, 2, 0.5, "a")]), start="t", name="src")
    p = query(src).plan()
    cols = getattr(p.stages["src"].source.rows, "columns", None)
    return None if cols is None else frozenset(cols)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_source_reads_what_the_query_reads(name: str) -> None:
    """Pruned exactly to the columns read: never fewer (a UDF's columns kept), and the
    pruneable queries do prune (else the equality tests below prove nothing)."""
    assert read_columns(name) == PIPELINES[name][1]


@given(st.sampled_from(sorted(PIPELINES)), ROWS, st.integers(1, 9))
@PROPERTY
def test_pruned_output_is_the_unpruned_output(name: str, rows: list[Any], batch: int) -> None:
    data = table(rows)
    try:
        want = run(name, data, prune=False, batch_rows=batch)
    except Exception as exc:  # noqa: BLE001 - then pruned must fail the same way
        with pytest.raises(type(exc)):
            run(name, data, prune=True, batch_rows=batch)
        return
    assert run(name, data, prune=True, batch_rows=batch) == want


def test_a_udf_that_reads_a_column_the_tracer_cannot_see_gets_it() -> None:
    """``guarded`` reads ``note`` only where ``v`` is 0; pruning ``note`` would raise there."""
    data = table([(0, 1, 0, 0.5, "zero"), (1, 2, 1, 0.5, "a"), (30, 1, 2, 0.5, "b")])
    src = Stream.from_arrow(data, start="t", name="src")
    out = to_cht(src.select(guarded).collect(runtime="inline"))
    assert sorted(p for _, _, p in out if isinstance(p, str)) == ["zero"]
    assert source_columns(src.select(guarded).tumbling_window(5).aggregate(Count())._node) \
        == {id(src._node): None}


@pytest.mark.ray
@pytest.mark.parametrize("name", ["group count", "where select", "union", "untraceable udf",
                                  "vectorized"])
def test_pruned_on_ray_is_the_unpruned_inline(name: str, ray_session: Any) -> None:
    rng = np.random.default_rng(7)
    rows = [(int(t), int(rng.integers(0, 4)), int(rng.integers(0, 7)), 0.75, "n")
            for t in rng.integers(0, 500, 400)]
    data = table(rows)
    want = run(name, data, prune=False, batch_rows=50)
    assert want
    assert run(name, data, prune=True, runtime="ray", batch_rows=50) == want


def test_function_reads() -> None:
    assert function_reads(key_k) == {"k"}
    assert function_reads(mix) == {"k", "v", "w"}
    assert function_reads(reads_and_drops) == {"k", "note"}
    assert function_reads(note_length) is None
    assert function_reads(guarded) is None
    assert function_reads(lambda p: p) is None
    assert function_reads(lambda p: (p["k"], p)) is None


def test_a_batch_or_row_missing_a_column_passes_whole() -> None:
    keep = frozenset({"a", "b"})
    assert project_batch({"a": 1, "c": 2}, keep) == {"a": 1, "c": 2}
    assert project_batch([{"a": 1, "b": 2, "c": 3}, {"a": 1}], keep) == [{"a": 1, "b": 2},
                                                                          {"a": 1}]


def test_explain_names_the_columns_read() -> None:
    src = Stream.from_arrow(table([(0, 1, 2, 0.5, "a")]), start="t", name="src")
    text = PIPELINES["group count"][0](src).plan(fuse=True).explain()
    assert "reading only k, t" in text


def test_closing_a_pruned_feed_closes_its_batches() -> None:
    """A run that stops closes its source's feed (a streaming Spark source releases its
    query then): through the pruning too."""
    from topology.planning.pruning import Projected

    closed: list[bool] = []

    def batches() -> Iterator[Any]:
        try:
            yield {"a": [1], "b": [2]}
            yield {"a": [3], "b": [4]}
        finally:
            closed.append(True)

    held: list[Any] = []  # (the reader keeps it: it is not closed by being dropped)

    class Again:
        def __iter__(self) -> Iterator[Any]:
            held.append(batches())
            return held[-1]

    feed = iter(Projected(Again(), frozenset({"a"})))
    assert next(feed) == {"a": [1]}
    feed.close()  # type: ignore[attr-defined]
    assert closed == [True]
