"""What a step reads of its input: the payload columns a function, an aggregate or a whole
sub-tree of steps reads (the facts behind column pruning, :mod:`topology.planning.pruning`).

A node states what it needs of each input (:meth:`topology.building.nodes.Node.reads`) from what its
consumers need of its output; :func:`needs` walks a tree with those statements, from the
output to the sources. This module knows functions and aggregates, not node types.
"""

from __future__ import annotations

import dis
from collections.abc import Iterable
from typing import Any, Protocol

from operators import aggregates as agg
from operators.expr import Const, Expr, Field, Op, trace, trace_pair, tracing

#: The columns a step reads: a set of names, or None for every column.
Reads = frozenset[str] | None

NOTHING: frozenset[str] = frozenset()


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
    if getattr(fn, "batchwise", False):
        return batch_reads(getattr(fn, "fn", None))
    if not callable(fn):
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


#: Names with which a function could reach its argument other than by name (a read of its
#: frame's variables).
_FRAME_READS = frozenset({"locals", "vars", "eval", "exec", "_getframe", "currentframe"})


def batch_reads(fn: Any) -> Reads:
    """The payload columns a function of a whole batch (``select``/``where`` with
    ``vectorized=True``) reads, or None when it may read any. Such a function is not traced
    (it gets arrays, not a stand-in payload), so its code says it: when its argument is used
    only as ``b["name"]`` with constant names -- never passed on, iterated, stored, or
    captured by an inner function -- those names are all it can read, on every branch.

    >>> sorted(batch_reads(lambda b: {"k": b["k"], "n": b["v"] * 2 if b["f"] else 0}))
    ['f', 'k', 'v']
    >>> batch_reads(lambda b: helper(b)), batch_reads(lambda b: b.get("k"))
    (None, None)
    """
    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount < 1 or not _FRAME_READS.isdisjoint(code.co_names):
        return None
    arg = code.co_varnames[0]
    if arg in code.co_cellvars:
        return None  # (an inner function reads it)
    ops = list(dis.get_instructions(code))
    names: list[Any] = []
    for i, op in enumerate(ops):
        if "FAST" not in op.opname or arg not in (
                op.argval if isinstance(op.argval, tuple) else (op.argval,)):
            continue
        key, subscript = ops[i + 1:i + 3] if i + 3 <= len(ops) else (None, None)
        if (op.opname not in ("LOAD_FAST", "LOAD_FAST_BORROW") or key is None
                or subscript is None or key.opname != "LOAD_CONST"
                or not (subscript.opname == "BINARY_SUBSCR" or subscript.argrepr == "[]")):
            return None
        names.append(key.argval)
    return _names(names)


def pair_reads(fn: Any, side: int) -> Reads:
    """The payload columns of input ``side`` (0: left, 1: right) that a join's ``select(left,
    right)`` reads, as :func:`function_reads` says of a function of one payload; None when it
    may read any (no ``select``: the pair itself is the output).

    >>> sorted(pair_reads(lambda l, r: {"n": r["name"], "id": l["id"]}, 1))
    ['name']
    >>> pair_reads(lambda l, r: r, 1) is None, pair_reads(None, 0) is None
    (True, True)
    """
    if fn is None or not callable(fn) or getattr(fn, "__code__", None) is None:
        return None
    traced = trace_pair(fn)
    keys = None if traced is None else _expr_keys(traced)
    if keys is None:
        return None
    recorders = (_Recorder(), _Recorder())
    try:
        with tracing():
            fn(*recorders)
    except Exception:  # noqa: BLE001 - traced once already: any surprise reads everything
        return None
    mine = [k[1] for k in keys if k[0] == "lr"[side]]
    if any(k is None for k in mine):
        return None  # (the side's payload itself)
    return _names([*mine, *recorders[side].seen])


def _field_reads(field: Any) -> Reads:
    return None if isinstance(field, int) else function_reads(field)


def udm_reads(udm: Any) -> Reads:
    """The payload columns an aggregate reads (cedar's own, by exact type), or None (any
    other UDM, which gets the payloads themselves)."""
    t = type(udm)
    if t is agg.Count:
        return NOTHING if udm.where is None else function_reads(udm.where)
    if t in (agg.Sum, agg.Avg, agg.Min, agg.Max, agg.TimeWeightedAverage):
        return _field_reads(udm.field)
    if t is agg.CountDistinct:
        return union(_field_reads(udm.field),
                     NOTHING if udm.where is None else function_reads(udm.where))
    if t is agg.Aggregates:
        out: Reads = NOTHING
        for part in udm.parts.values():
            out = union(out, udm_reads(part))
        return out
    return None


def union(a: Reads, b: Reads) -> Reads:
    """Both reads: every column when either reads every column."""
    return None if a is None or b is None else a | b


# -- the walk -------------------------------------------------------------------------------------
def walk(root: Any) -> list[Any]:
    """The nodes under ``root``, every node after its inputs (shared ones once)."""
    out: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
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


class Stated(Protocol):
    """A node as :func:`needs` walks it: its inputs and what it reads of each."""

    @property
    def inputs(self) -> tuple[Any, ...]: ...

    def reads(self, out: Reads, port: int) -> Reads: ...


def needs(root: Stated, top: Reads) -> dict[int, Reads]:
    """Per node under ``root`` (by identity) the columns its consumers read of its output,
    ``top`` of the root's: each node's :meth:`~topology.building.nodes.Node.reads` of each input,
    from the output down (the union over a node's consumers)."""
    order = walk(root)
    out: dict[int, Reads] = {id(root): top}
    for node in reversed(order):  # every node before its inputs
        mine = out.get(id(node), NOTHING)
        for port, i in enumerate(node.inputs):
            need = node.reads(mine, port)
            out[id(i)] = union(out[id(i)], need) if id(i) in out else need
    return out


__all__ = ["NOTHING", "Reads", "Stated", "function_reads", "needs", "udm_reads", "union",
           "walk"]
