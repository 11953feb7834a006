"""The fast paths, as one ordered table of physical rules.

A window, or a ``group_apply`` of one window over its group input, has a general operator
(:func:`operators.windows.make_window`, :class:`operators.group_apply.GroupApply`) and, for
some inputs and aggregates, a faster one that computes the same CHT. Each :class:`Rule` says
when its operator applies — from the node and the facts its input states
(:meth:`topology.building.nodes.Node.lengths`) — and how to build it. The planner takes the first
rule that applies (:func:`choose`), else the general operator; the stage records the rule's
``variant``, which ``explain()`` and ``plan.json`` show.

=========================================  ============  ======================================
variant                                    node          applies when
=========================================  ============  ======================================
column-wise session aggregate              window        session window over point inserts
column-wise window aggregate / UDO         window        hopping/tumbling over point inserts,
                                                         or intervals of bounded length
keyed session aggregate                    group_apply   session window over point inserts
keyed by-end count window                  group_apply   ``count_window(1, by="end")``
keyed count window extreme                 group_apply   by-start Min/Max over inserts
keyed window aggregate / UDO               group_apply   as the column-wise window aggregate
=========================================  ============  ======================================

A rule that no longer proves its case must not apply: each one's operator module states what
it takes (``supports``), and the property tests run every variant against the general
operator. Setting :data:`RULES` to ``()`` turns every fast path off (the tests do, to compare).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from operators.windows import HoppingWindow
from operators.windows.keyed import KeyedWindowAggregate, supports
from operators.windows.keyed_count import KeyedEndAggregate
from operators.windows.keyed_count import supports as supports_ends
from operators.windows.keyed_count_start import KeyedCountExtreme
from operators.windows.keyed_count_start import supports as supports_count_extremes
from operators.windows.keyed_session import KeyedSessionAggregate, supports_sessions
from operators.windows.spec import SessionWindow
from topology.building import nodes as n
from topology.planning.plan import Factory

#: The keyed window aggregate takes intervals whose lifetime (plus a window) spans at most
#: this many hops: it adds each event to every window it overlaps at once.
KEYED_WINDOWS_PER_EVENT = 64

#: What a rule's test returns when it applies: the keywords its operator is built with.
Options = dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """One fast path: for nodes of type ``node``, ``applies(window, lengths)`` gives the
    options of its operator (None: it does not apply) from the window node (the node itself,
    or a group_apply's window) and the lengths its input states; ``build(node, window,
    step, options)`` makes the factory; ``variant(window, options)`` names it for people."""

    node: type[n.Node]
    applies: Callable[[n.Window, int | None], Options | None]
    build: Callable[[n.Node, n.Window, str, Options], Factory]
    variant: Callable[[n.Window, Options], str]
    #: whether its operator finalizes each key at its own CTI when the source's per-key CTIs
    #: are by the group key (topology.planning.key_progress); a rule without it is not used
    #: then, and the general group_apply does it
    per_key: bool = False


def _one_group(payload: Any) -> int:
    """The key of a window aggregate outside group_apply: every event in one group."""
    return 0


def window_of_groups(node: n.GroupApply) -> n.Window | None:
    """The window a group_apply runs over each group, when its sub-query is only that."""
    sub = node.sub
    if isinstance(sub, n.Window) and isinstance(sub.inputs[0], n.GroupInput):
        return sub
    return None


# -- the tests ------------------------------------------------------------------------------------
def _sessions(w: n.Window, lengths: int | None) -> Options | None:
    ok = (isinstance(w.spec, SessionWindow) and lengths == 1
          and supports_sessions(w.spec, w.udm, w.kind, w.policy, w.on_error))
    return {} if ok else None


def _windows(w: n.Window, lengths: int | None) -> Options | None:
    """Over points (``{}``), or over inserts of bounded lifetimes (``intervals``)."""
    if lengths == 1:
        return {} if supports(w.spec, w.udm, w.kind, w.policy, w.on_error) else None
    if (lengths is None or not isinstance(w.spec, HoppingWindow)
            or lengths + w.spec.size > KEYED_WINDOWS_PER_EVENT * w.spec.hop
            or not supports(w.spec, w.udm, w.kind, w.policy, w.on_error, intervals=True)):
        return None
    return {"intervals": True}


def _ends(w: n.Window, lengths: int | None) -> Options | None:
    return {} if supports_ends(w.spec, w.udm, w.kind, w.policy, w.on_error) else None


def _extremes(w: n.Window, lengths: int | None) -> Options | None:
    ok = lengths is not None and supports_count_extremes(w.spec, w.udm, w.kind, w.policy,
                                                         w.on_error)
    return {} if ok else None


# -- the builders ---------------------------------------------------------------------------------
def _keyed(node: n.Node) -> dict[str, Any]:
    """How a fast path keys its input: by a group_apply's key, else all events in one group
    (``keyed=False``: a window outside group_apply, its output payloads not keyed)."""
    if isinstance(node, n.GroupApply):
        return {"key": node.key}
    return {"key": _one_group, "keyed": False}


def _build_sessions(node: n.Node, w: n.Window, step: str, opts: Options) -> Factory:
    k = _keyed(node)
    return functools.partial(KeyedSessionAggregate, k.pop("key"), w.spec, w.udm,
                             policy=w.policy, name=step, **k)


def _build_windows(node: n.Node, w: n.Window, step: str, opts: Options) -> Factory:
    k = _keyed(node)
    return functools.partial(KeyedWindowAggregate, k.pop("key"), w.spec, w.udm,
                             policy=w.policy, name=step, kind=w.kind, **k, **opts)


def _build_ends(node: n.Node, w: n.Window, step: str, opts: Options) -> Factory:
    return functools.partial(KeyedEndAggregate, _keyed(node)["key"], w.udm, policy=w.policy,
                             name=step)


def _build_extremes(node: n.Node, w: n.Window, step: str, opts: Options) -> Factory:
    return functools.partial(KeyedCountExtreme, _keyed(node)["key"], w.spec, w.udm, name=step)


def _what(w: n.Window) -> str:
    return "UDO" if w.kind == "apply" else "aggregate"


#: The fast paths, in the order the planner tries them (the first that applies wins).
RULES: tuple[Rule, ...] = (
    Rule(n.Window, _sessions, _build_sessions,
         lambda w, o: "a column-wise session aggregate (point input)"),
    Rule(n.Window, _windows, _build_windows,
         lambda w, o: f"a column-wise window {_what(w)} "
                      f"({'interval' if o.get('intervals') else 'point'} input)"),
    Rule(n.GroupApply, _sessions, _build_sessions,
         lambda w, o: "one keyed session aggregate (all groups at once)"),
    Rule(n.GroupApply, _ends, _build_ends,
         lambda w, o: "one keyed by-end count window (all groups at once)"),
    Rule(n.GroupApply, _extremes, _build_extremes,
         lambda w, o: "one keyed count window extreme (all groups at once)"),
    Rule(n.GroupApply, _windows, _build_windows,
         lambda w, o: f"one keyed window {_what(w)} (all groups at once)", per_key=True),
)


@dataclass(frozen=True)
class Choice:
    """The fast path chosen for a node: its factory and its variant (for ``explain()``)."""

    factory: Factory
    variant: str


def choose(node: n.Node, step: str, per_key: bool = False) -> Choice | None:
    """The first rule of :data:`RULES` that applies to ``node`` (a window, or a group_apply
    of one window over its group input), built for ``step``; None: the general operator.
    With ``per_key`` (the group_apply finalizes each key at its own CTI) only the rules whose
    operator does that."""
    w = node if isinstance(node, n.Window) else (
        window_of_groups(node) if isinstance(node, n.GroupApply) else None)
    if w is None:
        return None
    lengths = node.inputs[0].lengths()
    for rule in RULES:
        if type(node) is not rule.node or (per_key and not rule.per_key):
            continue
        opts = rule.applies(w, lengths)
        if opts is not None:
            return Choice(rule.build(node, w, step, opts), rule.variant(w, opts))
    return None


__all__ = ["KEYED_WINDOWS_PER_EVENT", "RULES", "Choice", "Rule", "choose", "window_of_groups"]
