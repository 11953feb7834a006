"""Column pruning: a source reads only the payload columns its query reads.

Flink's and Spark's planners send on only the columns a query uses; cedar's planner does the
same for a ``from_rows`` source of batches (``from_arrow``, ``from_spark``) when every step
after it provably reads only some of its columns. What a step reads it says when:

* its function is a column name or ``col()`` expression, or a plain function of the payload
  that :func:`operators.expr.trace` follows (field reads, arithmetic, comparisons: the
  functions that run column-wise) and that handles no exception of its own (a ``try`` could
  read another field when one fails);
* its function takes whole batches (``vectorized=True``) and its code uses the batch only as
  ``b["name"]`` with constant names: never passes it on, iterates it or lets an inner
  function capture it (:func:`~topology.building.reads.batch_reads`);
* its aggregate is one of cedar's that reads a field: ``Count()`` (nothing, or its
  ``where``), ``Sum``/``Avg``/``Min``/``Max``/``CountDistinct``/``TimeWeightedAverage`` of a
  field, ``Aggregates`` of those.

Each node type states what it reads of each input (:meth:`topology.building.nodes.Node.reads`, from
:mod:`topology.building.reads`): ``where`` passes on what its consumers read and reads its
predicate's fields; ``select`` reads its function's; a window aggregate its aggregate's;
``group_apply`` its key's and its sub-query's; the lifetime steps, ``union`` and ``late()`` pass
their consumers' needs on; ``import_ctis`` reads nothing of its leader (only its CTIs). Any other
step (a join, a scan, a UDF over the whole payload, a function the tracer cannot follow) reads
every column: nothing is pruned before it. The query's output reads every column.

A source keeps the columns read, and its time and id columns. A batch that lacks one of the
columns read (or a row that does) passes whole, as it would unpruned: the step then fails or
dead-letters as it would have. Rows that the source dead-letters hold the columns kept.

    >>> from topology import Stream, Count
    >>> s = Stream.from_arrow({"t": [0, 1], "k": [1, 2], "big": ["a", "b"]}, start="t")
    >>> q = s.group_apply("k", lambda g: g.tumbling_window(10).aggregate(Count()))
    >>> sorted(source_columns(q._node)[id(s._node)])
    ['k']
    >>> source_columns(s.select(lambda p: p)._node)[id(s._node)] is None
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from topology.building import nodes as n
from topology.building.reads import Reads, function_reads, needs, udm_reads, union, walk


def source_columns(root: n.Node) -> dict[int, Reads]:
    """Per ``from_rows`` source under ``root`` (by identity), the payload columns the query
    reads of it (None: every column); the query's output is read whole."""
    read = needs(root, None)
    return {id(s): read.get(id(s)) for s in walk(root) if isinstance(s, n.FromRows)}


# -- pruned sources -------------------------------------------------------------------------------
def kept_columns(src: n.FromRows, reads: Reads) -> Reads:
    """The columns ``src`` keeps when the query reads ``reads``: those and its time and id
    columns; None (every column) when a time or id is a function it cannot follow."""
    keep = reads
    for f in (src.start, src.end, src.id):
        if f is not None:
            keep = union(keep, function_reads(f))
    return keep


def pruned_source(src: n.FromRows, reads: Reads) -> n.FromRows:
    """``src`` reading only the columns it must keep (:func:`kept_columns`), or ``src`` as it
    is: rows not given as batches, or every column read."""
    keep = kept_columns(src, reads)
    if keep is None or not src.batched:
        return src
    project = getattr(src.rows, "project", None)  # a reader that selects before it converts
    rows = project(keep) if callable(project) else None
    return dataclasses.replace(src, rows=rows if rows is not None else Projected(src.rows, keep))


class Projected:
    """Source batches with only the ``columns`` kept: of a column batch ``{name: array}`` the
    arrays named, of a list of row dicts each row's keys named. A batch missing a column, or a
    row missing a key, passes whole (the step reading it fails as it would have). Fed as its
    batches are (:data:`topology.building.nodes.Feed`)."""

    def __init__(self, batches: Iterable[Any], columns: frozenset[str]) -> None:
        self.batches, self.columns = batches, columns
        self.feed = n.who_feeds(batches)

    def __iter__(self) -> Iterator[Any]:
        keep = self.columns
        inner = iter(self.batches)
        try:
            for batch in inner:
                yield project_batch(batch, keep)
        finally:  # closed now, as a run that stops closes its feed (a Spark query's)
            close = getattr(inner, "close", None)
            if close is not None:
                close()

    def __repr__(self) -> str:
        return f"Projected({sorted(self.columns)})"


def project_batch(batch: Any, keep: frozenset[str]) -> Any:
    """One source batch with only the columns ``keep`` (see :class:`Projected`).

    >>> project_batch({"a": [1], "b": [2]}, frozenset({"a"}))
    {'a': [1]}
    >>> project_batch([{"a": 1, "b": 2}, {"b": 3}, 5], frozenset({"a"}))
    [{'a': 1}, {'b': 3}, 5]
    """
    if type(batch) is dict:
        if not keep <= batch.keys():
            return batch
        return {k: v for k, v in batch.items() if k in keep}
    if isinstance(batch, list):
        return [{k: v for k, v in r.items() if k in keep}
                if type(r) is dict and keep <= r.keys() else r for r in batch]
    return batch


def pruned_note(src: n.Node) -> str:
    """The ``explain()`` note of a pruned source: the columns it reads (empty if unpruned)."""
    cols = getattr(getattr(src, "rows", None), "columns", None)
    return f", reading only {', '.join(sorted(cols))}" if cols is not None else ""


__all__ = ["Projected", "Reads", "function_reads", "kept_columns", "project_batch",
           "pruned_note", "pruned_source", "source_columns", "udm_reads"]
