"""Where per-key CTIs travel (``AdvanceTime(per_key=...)``, docs/ctis.md).

A source with per-key progress sends, beside its events and its stream CTIs (the low
watermark), :class:`~operators.events.KeyCtis`: each key's own CTI as it moves. Only a
``group_apply`` keyed by the *same* key can use them (each group is one key, so it gets its
key's CTI and finalizes its output then), and only while the events still carry their source
payloads, so that the group's key is the source's: through ``where`` steps and nothing else.
:func:`key_paths` finds those paths; the planner then

* tells each such ``group_apply`` to use them (``GroupApply.per_key``) and gives it the
  general operator, not a keyed fast path (which knows only the stream's CTI);
* marks the out-edges of the steps that send them (the source, the ``where`` steps on a path):
  True on an edge of a path, False on the others, which drop them
  (:attr:`~topology.planning.routing.OutEdge.key_ctis`);
* tells a per-key source with no such consumer to send none.

Every other step sees the low watermark alone, a stream CTI like any other.

Two keys are the same when they are the same column name or function, or when both trace to
the same expression of the payload (:func:`operators.expr.trace`): ``"meter"``,
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

__all__ = ["KeyPaths", "key_paths", "same_key"]


def _canonical(key: Any) -> Any:
    """What two keys are compared by: a column name as the expression reading it, a function
    by the expression it traces to, else the function itself."""
    if isinstance(key, str):
        return repr(Field(key))
    traced = trace(key) if callable(key) else None
    return key if traced is None else repr(traced)


def same_key(a: Any, b: Any) -> bool:
    """Whether keys ``a`` and ``b`` (column names or functions) are one key.

    >>> same_key("meter", lambda r: r["meter"]), same_key("meter", lambda r: r["site"])
    (True, False)
    """
    if a is b:
        return True
    ca, cb = _canonical(a), _canonical(b)
    return type(ca) is str and type(cb) is str and ca == cb


@dataclass
class KeyPaths:
    """The steps on the paths of per-key CTIs (node ids)."""

    #: the steps that send them: per-key sources and the ``where`` steps on a path
    producers: set[int] = field(default_factory=set)
    #: the ``group_apply`` steps that use them
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

        def reaches(node: n.Node, key: Any = key) -> bool:
            """Whether per-key CTIs from ``node`` reach a consumer (marking the way)."""
            found = False
            for c in consumers.get(id(node), ()):
                if isinstance(c, n.GroupApply) and same_key(c.key, key):
                    paths.consumers.add(id(c))
                elif not (isinstance(c, n.Where) and reaches(c)):
                    continue
                paths.edges.add((id(node), id(c)))
                found = True
            if found:
                paths.producers.add(id(node))
            return found

        reaches(source)
    return paths
