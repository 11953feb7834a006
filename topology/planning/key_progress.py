"""Where per-key CTIs travel (``AdvanceTime(per_key=...)``, docs/ctis.md).

A source with per-key progress sends, beside its events and its stream CTIs (the low
watermark), :class:`~operators.events.KeyCtis`: each key's own CTI as it moves. Only a step
keyed by the *same* key can use them: a ``group_apply`` (each group is one key, so it gets
its key's CTI and finalizes its output then) or a ``detect`` with that ``key=``. They reach
it through ``where`` steps, which keep the payloads, and ``select`` steps whose function
traces (:func:`operators.expr.trace`), so that the key read through them is the source's
(``select(lambda r: (r["k"], r["v"]))`` then ``group_apply(lambda p: p[0])`` is keyed by
``"k"``). :func:`key_paths` finds those paths; the planner then

* tells each such step to use them (``per_key``), and gives a ``group_apply`` only a fast
  path whose operator does too (:attr:`topology.planning.rules.Rule.per_key`);
* marks the out-edges of the steps that send them (the source, the steps on a path):
  True on an edge of a path, False on the others, which drop them
  (:attr:`~topology.planning.routing.OutEdge.key_ctis`);
* tells a per-key source with no such consumer to send none.

Every other step sees the low watermark alone, a stream CTI like any other.

Two keys are the same when they are the same column name or function, or when both trace to
the same expression of the source's rows (:func:`operators.expr.trace`): ``"meter"``,
``lambda r: r["meter"]`` and ``col("meter")`` are one key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from operators.expr import Field, trace
from topology.building import nodes as n
from topology.building import source_nodes as sn
from topology.building.reads import walk

__all__ = ["PER_KEY_NOTE", "KeyPaths", "key_paths", "same_key"]

#: How ``explain()`` marks a step that finalizes each key at its own CTI (``why`` reads it).
PER_KEY_NOTE = "at each key's CTI (per-key progress)"


def _expression(key: Any) -> Any:
    """The expression a key (a column name or a function) reads, or None when it does not
    trace."""
    if isinstance(key, str):
        return Field(key)
    return trace(key) if callable(key) else None


def _through(expr: Any, selects: list[Any]) -> Any:
    """``expr``, read of the payloads after ``selects`` (their traced outputs, first to
    last), as an expression of the payloads before them; None when it cannot say."""
    for out in reversed(selects):
        if not isinstance(expr, Field):
            return None
        if expr.key is None:  # the whole payload
            expr = out
        elif isinstance(out, (tuple, dict)):
            try:
                expr = out[expr.key]
            except (IndexError, KeyError, TypeError):
                return None
        else:
            return None
    return expr


def same_key(a: Any, b: Any, selects: list[Any] | None = None) -> bool:
    """Whether key ``a`` of the source's rows and key ``b`` (column names or functions) read
    after ``selects`` (the traced outputs of the select steps between) are one key.

    >>> same_key("meter", lambda r: r["meter"]), same_key("meter", lambda r: r["site"])
    (True, False)
    >>> same_key("k", lambda p: p[0], [trace(lambda r: (r["k"], r["v"]))])
    True
    """
    if a is b and not selects:
        return True
    ea, eb = _expression(a), _through(_expression(b), selects or [])
    return ea is not None and eb is not None and repr(ea) == repr(eb)


@dataclass
class KeyPaths:
    """The steps on the paths of per-key CTIs (node ids)."""

    #: the steps that send them: per-key sources and the ``where``/``select`` steps on a path
    producers: set[int] = field(default_factory=set)
    #: the ``group_apply`` and ``detect`` steps that use them
    consumers: set[int] = field(default_factory=set)
    #: (producer, consumer) node ids of the edges that carry them
    edges: set[tuple[int, int]] = field(default_factory=set)
    #: the per-key sources (whether or not they have a consumer)
    sources: set[int] = field(default_factory=set)

    def flag(self, producer: n.Node, consumer: Any) -> bool | None:
        """:attr:`OutEdge.key_ctis` of the edge ``producer`` → ``consumer`` (False out of a
        per-key source without a consumer too: a Spark stream's feeder sends them anyway)."""
        if id(producer) not in self.producers and id(producer) not in self.sources:
            return None
        return (id(producer), id(consumer)) in self.edges


def _per_key(node: n.Node) -> Callable[[Any], Any] | str | None:
    advance = getattr(node, "advance", None) if isinstance(node, sn.FromRows) else None
    return None if advance is None else advance.per_key


def key_paths(root: n.Node) -> KeyPaths:
    """The paths of per-key CTIs in the tree under ``root`` (see the module docstring)."""
    nodes = walk(root)
    consumers: dict[int, list[n.Node]] = {}
    for node in nodes:
        for i in node.inputs:
            consumers.setdefault(id(i), []).append(node)
    paths = KeyPaths()
    for source in nodes:
        key = _per_key(source)
        if key is None:
            continue
        paths.sources.add(id(source))

        def reaches(node: n.Node, selects: list[Any], key: Any = key) -> bool:
            """Whether per-key CTIs from ``node`` (after ``selects``) reach a consumer,
            marking the way."""
            found = False
            for c in consumers.get(id(node), ()):
                if (isinstance(c, (n.GroupApply, n.Detect)) and c.key is not None
                        and same_key(key, c.key, selects)):
                    paths.consumers.add(id(c))
                elif isinstance(c, n.Where) and reaches(c, selects):
                    pass
                elif not (isinstance(c, n.Select) and (out := trace(c.fn)) is not None
                          and reaches(c, [*selects, out])):
                    continue
                paths.edges.add((id(node), id(c)))
                found = True
            if found:
                paths.producers.add(id(node))
            return found

        reaches(source, [])
    return paths
