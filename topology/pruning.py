"""Column pruning: a source reads only the payload columns its query reads.

Flink's and Spark's planners send on only the columns a query uses; cedar's planner does the
same for a ``from_rows`` source of batches (``from_arrow``, ``from_spark``) when every step
after it provably reads only some of its columns. What a step reads it says when:

* its function is a column name or ``col()`` expression, or a plain function of the payload
  that :func:`operators.expr.trace` follows (field reads, arithmetic, comparisons: the
  functions that run column-wise) and that handles no exception of its own (a ``try`` could
  read another field when one fails);
* its aggregate is one of cedar's that reads a field: ``Count()`` (nothing, or its
  ``where``), ``Sum``/``Avg``/``Min``/``Max``/``CountDistinct``/``TimeWeightedAverage`` of a
  field, ``Aggregates`` of those.

``where`` passes on what its consumers read and reads its predicate's fields; ``select`` reads
its function's; a window aggregate its aggregate's; ``group_apply`` its key's and its
sub-query's; the lifetime steps and ``union`` pass their consumers' needs on. Any other step
(a join, a scan, a UDF over the whole payload, a function the tracer cannot follow) reads
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

from operators import aggregates as agg
from operators.expr import Const, Expr, Field, Op, trace, tracing

from . import nodes as n

#: The columns a step reads: a set of names, or None for every column.
Reads = frozenset[str] | None

_NOTHING: frozenset[str] = frozenset()


# -- what a function reads ------------------------------------------------------------------------
class _Recorder(Field):
    """The tracer's stand-in payload that remembers every field read (a read whose result
    the function drops still fails where the field is missing)."""

    def __init__(self) -> None:
        super().__init__(None)
        self.seen: list[Any] = []

    def __getitem__(self, key: Any) -> Expr:
        self.seen.append(key)
        return Field(key)


def _expr_keys(e: Any) -> list[Any] | None:
    """The field names an expression (or tuple/dict of them) reads; None when it reads the
    whole payload."""
    if isinstance(e, tuple):
        parts: list[Any] = list(e)
    elif isinstance(e, dict):
        parts = list(e.values())
    else:
        parts = [e]
    out: list[Any] = []
    while parts:
        x = parts.pop()
        if isinstance(x, Field):
            if x.key is None:
                return None
            out.append(x.key)
        elif isinstance(x, Op):
            parts.extend(x.args)
        elif not isinstance(x, Const):
            return None
    return out


def _names(keys: Iterable[Any] | None) -> Reads:
    if keys is None:
        return None
    keys = list(keys)
    return frozenset(keys) if all(isinstance(k, str) for k in keys) else None


def function_reads(fn: Any) -> Reads:
    """The payload columns ``fn`` reads (a column name, a ``col()`` expression or a function
    of the payload), or None when it may read any: the payload itself, a function the tracer
    cannot follow, one that handles exceptions.

    >>> from operators.expr import col
    >>> sorted(function_reads(lambda p: p["a"] * 2 > p["b"])), sorted(function_reads("a"))
    (['a', 'b'], ['a'])
    >>> sorted(function_reads(col("x") + 1)), function_reads(lambda p: str(p["a"]))
    (['x'], None)
    >>> function_reads(lambda p: p) is None, function_reads(None) is None
    (True, True)
    """
    if fn is None:
        return None  # the payload itself
    if isinstance(fn, str):
        return frozenset((fn,))
    if isinstance(fn, Expr):
        return _names(_expr_keys(fn))
    field = getattr(fn, "field", None)  # operators.udm.field_getter of a name
    if isinstance(field, str):
        return frozenset((field,))
    if not callable(fn) or getattr(fn, "batchwise", False):
        return None
    if getattr(fn, "__code__", None) is None:
        return None  # not plain Python: what it reads is not to be seen
    traced = trace(fn)  # (None for a try anywhere in the call: it may read what tracing never saw)
    if traced is None:
        return None
    keys = _expr_keys(traced)
    if keys is None:
        return None
    recorder = _Recorder()
    try:
        with tracing():
            fn(recorder)
    except Exception:  # noqa: BLE001 - traced once already: any surprise reads everything
        return None
    return _names([*keys, *recorder.seen])


def _field_reads(field: Any) -> Reads:
    return None if isinstance(field, int) else function_reads(field)


def udm_reads(udm: Any) -> Reads:
    """The payload columns an aggregate reads (cedar's own, by exact type), or None (any
    other UDM, which gets the payloads themselves)."""
    t = type(udm)
    if t is agg.Count:
        return _NOTHING if udm.where is None else function_reads(udm.where)
    if t in (agg.Sum, agg.Avg, agg.Min, agg.Max, agg.TimeWeightedAverage):
        return _field_reads(udm.field)
    if t is agg.CountDistinct:
        return _union(_field_reads(udm.field),
                      _NOTHING if udm.where is None else function_reads(udm.where))
    if t is agg.Aggregates:
        out: Reads = _NOTHING
        for part in udm.parts.values():
            out = _union(out, udm_reads(part))
        return out
    return None


def _union(a: Reads, b: Reads) -> Reads:
    return None if a is None or b is None else a | b


# -- what each step needs of its inputs ----------------------------------------------------------
_PASS = (n.Shift, n.ToPoints, n.ClipDuration, n.Union)


def _input_needs(node: n.Node, out: Reads, port: int) -> Reads:
    """The columns ``node`` needs of its input ``port`` when its consumers need ``out`` of
    its output."""
    if isinstance(node, _PASS):
        return out
    if isinstance(node, n.Where):
        return _union(out, function_reads(node.pred))
    if isinstance(node, n.Select):
        return function_reads(node.fn)
    if isinstance(node, n.AlterLifetime):
        need = out
        for f in (node.start, node.duration):
            if callable(f):
                need = _union(need, function_reads(f))
        return need
    if isinstance(node, n.Window):
        return udm_reads(node.udm) if node.kind == "aggregate" else None
    if isinstance(node, n.GroupApply):
        group = [g for g in _walk(node.sub) if isinstance(g, n.GroupInput)]
        needs = _needs(node.sub, None)
        sub: Reads = _NOTHING
        for g in group:
            sub = _union(sub, needs.get(id(g)))
        return _union(function_reads(node.key), sub if group else None)
    return None


def _walk(root: n.Node) -> list[n.Node]:
    """The nodes under ``root``, every node after its inputs (shared ones once)."""
    out: list[n.Node] = []
    seen: set[int] = set()
    stack: list[tuple[n.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            out.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((i, False) for i in reversed(node.inputs))
    return out


def _needs(root: n.Node, top: Reads) -> dict[int, Reads]:
    """Per node (by identity) the columns its consumers read of its output, ``top`` of the
    root's."""
    order = _walk(root)
    needs: dict[int, Reads] = {id(root): top}
    for node in reversed(order):  # every node before its inputs
        out = needs.get(id(node), _NOTHING)
        for port, i in enumerate(node.inputs):
            need = _input_needs(node, out, port)
            needs[id(i)] = _union(needs[id(i)], need) if id(i) in needs else need
    return needs


def source_columns(root: n.Node) -> dict[int, Reads]:
    """Per ``from_rows`` source under ``root`` (by identity), the payload columns the query
    reads of it (None: every column); the query's output is read whole."""
    needs = _needs(root, None)
    return {id(s): needs.get(id(s)) for s in _walk(root) if isinstance(s, n.FromRows)}


# -- pruned sources -------------------------------------------------------------------------------
def kept_columns(src: n.FromRows, reads: Reads) -> Reads:
    """The columns ``src`` keeps when the query reads ``reads``: those and its time and id
    columns; None (every column) when a time or id is a function it cannot follow."""
    keep = reads
    for f in (src.start, src.end, src.id):
        if f is not None:
            keep = _union(keep, function_reads(f))
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
    batches are (:data:`topology.nodes.Feed`)."""

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
