"""Restoring a savepoint into a changed query: which step keeps which state (issue 39, item 3).

A savepoint records, for each step of the query it was taken of, two fingerprints
(:mod:`topology.planning.plan`): its *own* (what the step is: its operator, arguments and
the code of its functions, not its step id) and its *upstream* one (its own and everything
upstream of it). :func:`match` decides, for each step of a new plan, in this order:

1. **unchanged** -- a step of the savepoint has its fingerprint (itself and all upstream
   of it the same; under another step id when the planner numbered it otherwise: a step
   added upstream renames ``where#1`` to ``where#2``). It keeps that step's state.
2. **keeps its state** -- a step of the savepoint has its own fingerprint, but something
   upstream of it changed (a ``where`` predicate before a window). It keeps that step's
   state: the state the *old* query built from the input before the cut. That is the new
   query's own state only if the change upstream would not have changed what reached the
   step before the cut; a restore does not check that, ``cedar upgrade --check``
   (:mod:`topology.seeing.cutover`) does, on the sources read again.
3. **starts fresh** -- a new or changed step that holds no state (the plan's
   ``Stage.stateless``: where, select, ...), or a changed one whose state in the savepoint
   is that of a step that saw nothing yet (its snapshot equals a new one's).
   A source stage whose source is the same but whose stateless steps fused into it
   (``fuse=True``) changed **keeps its state** too: its source's (position, ids, CTIs,
   accounting), the fused steps fresh (:func:`source_kept`).
4. **refused** -- a new or changed source (the savepoint's positions are its sources'), or
   a new or changed step that holds state: its state cannot be rebuilt, as no input log is
   retained to replay into it.

Ties (two steps of the savepoint with the fingerprint) go to the one of the same step id,
else to the first in plan order; a step of the savepoint is given to one new step only.

0. **rescaled** -- decided first: the partitions of a ``group_apply(..., key_groups=G)``
   at another ``partitions`` than the savepoint's (their fingerprints do not depend on the
   width: :mod:`topology.planning.plan`). Each new partition takes the key groups it holds
   now from the savepoint's partitions (:func:`regrouped`, :func:`operators.key_groups.regroup`).
"""

from __future__ import annotations

import dataclasses
import pickle
import re
from typing import Any

from topology.planning.plan import (
    Plan,
    own_fingerprints,
    source_fingerprints,
    step_fingerprints,
)

#: The verdicts, as ``cedar upgrade`` prints them.
UNCHANGED, KEEPS, FRESH, REFUSED = "unchanged", "keeps its state", "starts fresh", "refused"
RESCALED = "rescaled"


@dataclasses.dataclass(frozen=True)
class Fate:
    """What a restore does with one step of the new plan: its verdict, the savepoint's step
    whose state it takes (``old``; None when it starts fresh or is refused) and why."""

    step: str
    verdict: str
    old: str | None
    why: str
    #: a partition of a rescaled group_apply: the savepoint's partitions it takes its key
    #: groups from
    regroup: tuple[str, ...] = ()
    #: a source stage that keeps only its source's state from ``old`` (the stateless steps
    #: fused after it changed: they start fresh)
    source_only: bool = False

    @property
    def refused(self) -> bool:
        return self.verdict == REFUSED


def _pick(step: str, candidates: list[str]) -> str | None:
    if not candidates:
        return None
    return step if step in candidates else candidates[0]


def _empty(location: str, old: str, plan: Plan, step: str) -> bool:
    """Whether ``old``'s state in the savepoint is that of a step that saw nothing yet: its
    processor snapshot pickles as a new processor of ``step`` does."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location

    try:
        saved = ck.load(step_location(location, old))["proc"]
        fresh = plan.stages[step].factory().snapshot()
        return pickle.dumps(saved, protocol=4) == pickle.dumps(fresh, protocol=4)
    except Exception:  # noqa: BLE001 - unreadable or unpicklable: not known to be empty
        return False


def match(plan: Plan, record: dict[str, Any], location: str) -> list[Fate]:
    """The :class:`Fate` of every step of ``plan`` restored from the savepoint ``record``
    at ``location`` (see the module docstring), in plan order."""
    saved, saved_own = record["fingerprints"], record.get("own_fingerprints")
    now, own = step_fingerprints(plan), own_fingerprints(plan)
    sources = source_fingerprints(plan)
    taken: set[str] = set()
    fates = _rescaled(plan, saved, now, taken)
    for step in plan.stages:  # 1. the same step, its upstream the same
        if step in fates:
            continue
        old = _pick(step, [s for s, f in saved.items() if f == now[step] and s not in taken])
        if old is not None:
            taken.add(old)
            fates[step] = Fate(step, UNCHANGED, old, "the same step, upstream the same" + (
                "" if old == step else f" (it was {old!r})"))
    if saved_own is None:  # a savepoint older than own fingerprints: the same plan only
        saved_own = {}
    for step in plan.stages:  # 2. the same step, something upstream of it changed
        if step in fates or plan.stages[step].role == "source":
            continue
        old = _pick(step, [s for s, f in saved_own.items() if f == own[step] and s not in taken])
        if old is not None:
            taken.add(old)
            fates[step] = Fate(step, KEEPS, old, "the same step" + (
                "" if old == step else f" (it was {old!r})") + "; a step upstream of it "
                "changed: its state is what the old query's input built up to the cut")
    for step, st in plan.stages.items():  # 3. and 4.: new or changed
        if step in fates:
            continue
        what = "changed" if step in saved and step not in taken else "new"
        kept = _same_source(step, record, sources, taken)
        if kept is not None:
            taken.add(kept)
            fates[step] = Fate(step, KEEPS, kept, (
                "the same source" + ("" if kept == step else f" (it was {kept!r})") + "; the "
                "stateless steps fused into its stage changed: the source's position and "
                "state are kept, the steps start fresh"), source_only=True)
        elif st.role == "source":
            fates[step] = Fate(step, REFUSED, None, (
                f"a {what} source: a restored query resumes its sources where the savepoint "
                f"cut them, and those positions are the old sources'"))
        elif st.stateless:
            fates[step] = Fate(step, FRESH, None, f"{what}, and it holds no state")
        elif what == "changed" and _empty(location, step, plan, step):
            fates[step] = Fate(step, FRESH, None, "changed, and its state in the savepoint is "
                                                  "empty (it had seen nothing yet)")
        else:
            fates[step] = Fate(step, REFUSED, None, (
                f"{what}, and it holds state: its state cannot be rebuilt: no retained input "
                f"log (cedar keeps no input before the cut to replay into it)"
                + (_NOT_RESCALABLE if _PARTITION.match(step) else "")))
    return [fates[step] for step in plan.stages]


def _same_source(step: str, record: dict[str, Any], sources: dict[str, str],
                 taken: set[str]) -> str | None:
    """The savepoint's source stage that ``step`` (a source stage with only stateless steps
    fused after its source) can take the source's state of: the same source, its fused
    steps stateless too (the same step id first); None if none."""
    mine = sources.get(step)
    if mine is None:
        return None
    olds = [s for s, f in record.get("source_fingerprints", {}).items()
            if f == mine and s not in taken]
    return _pick(step, olds)


#: Said of a refused partition: how a group_apply restores at another width.
_NOT_RESCALABLE = ("; a group_apply restores at other partitions= only if its state is kept by "
                   "key group, in as many key groups as at its first start (key_groups=, "
                   "128 unless given with partitions > 1: docs/operations.md, \"Rescaling\")")
#: A partition's step id: its group_apply's and its index.
_PARTITION = re.compile(r"^(.*)\[(\d+)\]$")


def _partitions(steps: Any) -> dict[str, list[str]]:
    """The partition steps among ``steps``, by their group_apply's step id, in order."""
    found: dict[str, list[tuple[int, str]]] = {}
    for s in steps:
        m = _PARTITION.match(s)
        if m:
            found.setdefault(m.group(1), []).append((int(m.group(2)), s))
    return {g: [s for _, s in sorted(parts)] for g, parts in found.items()}


def _rescaled(plan: Plan, saved: dict[str, str], now: dict[str, str],
              taken: set[str]) -> dict[str, Fate]:
    """The fates of the partitions of each rescalable group_apply whose ``partitions``
    differ from the savepoint's with the same fingerprint (step 0 above); their old
    partitions are ``taken``."""
    from operators.key_groups import rescalable
    from topology.building import nodes as n

    fates: dict[str, Fate] = {}
    olds = _partitions(saved)
    for group, parts in _partitions(plan.stages).items():
        node = plan.stages[parts[0]].nodes[0]
        if not (isinstance(node, n.GroupApply) and node.groups):
            continue
        same = [g for g, ps in olds.items() if saved[ps[0]] == now[parts[0]]
                and not taken.intersection(ps)]
        if not same:
            continue
        old = olds[group if group in same else same[0]]
        if len(old) == len(parts):
            continue
        taken.update(old)
        if not rescalable(plan.stages[parts[0]].factory()):
            for step in parts:
                fates[step] = Fate(step, REFUSED, None, (
                    f"{len(old)} partitions then, {len(parts)} now, and its operator "
                    f"({plan.stages[step].variant or 'the general group_apply'}) cannot be "
                    f"dealt by key yet: restore it at {len(old)} partitions"))
            continue
        for step in parts:
            fates[step] = Fate(step, RESCALED, None, (
                f"{len(old)} partitions then, {len(parts)} now: it takes the key groups it "
                f"holds from {', '.join(old)}"), regroup=tuple(old))
    return fates


def made_states(plan: Plan, location: str, fates: list[Fate]) -> dict[str, Any]:
    """The checkpoint state of each step of ``plan`` whose state is made from the
    savepoint's at ``location`` rather than taken whole: the partitions of a rescaled
    group_apply (:func:`regrouped`), the source stages that keep only their source's
    (:func:`source_kept`) and a sink whose upstream changed (:func:`upgraded_sink`)."""
    made = regrouped(plan, location, {f.step: f.regroup for f in fates if f.regroup})
    for f in fates:
        if f.source_only and f.old is not None:
            made[f.step] = source_kept(plan, location, f.step, f.old)
        elif f.verdict == KEEPS and f.old is not None and plan.stages[f.step].role == "sink":
            made[f.step] = upgraded_sink(location, f.step, f.old)
    return made


def upgraded_sink(location: str, step: str, old: str) -> dict[str, Any]:
    """The checkpoint state of a sink restored from the savepoint's ``old`` into a query
    changed upstream of it: the old sink's, marked ``upgraded`` (its rows alive at the cut
    are retracted with the payloads they were emitted with: :class:`~operators.publish.
    Publish`)."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location

    state = ck.load(step_location(location, old))
    return {**state, "step": step, "proc": {**state["proc"], "upgraded": True}}


def source_kept(plan: Plan, location: str, step: str, old: str) -> dict[str, Any]:
    """The checkpoint state of source stage ``step`` from the savepoint's ``old``: the old
    source's state (the first of a fused chain's steps, or the stage's own), the stateless
    steps after it fresh."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location

    state = ck.load(step_location(location, old))
    saved = state["proc"]
    source = saved["stages"][0] if "stages" in saved else saved
    fresh = plan.stages[step].factory().snapshot()
    if "stages" in fresh:  # a chain: its source's state, its other steps' fresh
        proc = {**fresh, "stages": [source, *fresh["stages"][1:]],
                "out_cti": saved["out_cti"], "in_ctis": saved["in_ctis"]}
    else:
        proc = source
    return {**state, "step": step, "proc": proc}


def regrouped(plan: Plan, location: str, regroup: dict[str, tuple[str, ...]]
              ) -> dict[str, Any]:
    """The checkpoint state of each partition of a rescaled group_apply of ``plan``
    (``regroup``: new partition -> the savepoint's partitions, as :class:`Fate` says), made
    from the savepoint's partitions' at ``location``: each key's state dealt to the
    partition that holds its key group now (:func:`operators.key_groups.regroup`), the
    lowest of their output CTIs, their counts on the first."""
    from actors import checkpoint as ck
    from actors.savepoints import step_location
    from operators.key_groups import regroup as deal

    by_old: dict[tuple[str, ...], list[str]] = {}
    for step, old in regroup.items():
        by_old.setdefault(tuple(old), []).append(step)
    out: dict[str, Any] = {}
    for old, new in by_old.items():
        states = [ck.load(step_location(location, s)) for s in old]
        node = plan.stages[new[0]].nodes[0]
        procs = deal([s["proc"] for s in states], [plan.stages[s].factory for s in new],
                     node.groups)  # type: ignore[attr-defined]  # (a group_apply)
        counts = {k: sum(s["counts"][k] for s in states) for k in states[0]["counts"]}
        for i, (step, proc) in enumerate(zip(new, procs, strict=True)):
            out[step] = {**states[0], "step": step, "proc": proc,
                         "out_cti": min(s["out_cti"] for s in states),
                         "counts": counts if i == 0 else dict.fromkeys(counts, 0),
                         "released": [], "released_base": 0}
    return out


def fresh_snapshots(plan: Plan, fates: list[Fate]) -> dict[str, Any]:
    """The processor snapshot of a new processor of each step that starts fresh: what the
    restored run's first epoch holds for it."""
    return {f.step: plan.stages[f.step].factory().snapshot() for f in fates
            if f.old is None and not f.regroup}


def dropped(record: dict[str, Any], fates: list[Fate]) -> list[str]:
    """The savepoint's steps whose state no step of the new plan takes: dropped by the
    restore (a step removed, or changed into a step that starts fresh or is refused)."""
    kept = {f.old for f in fates} | {s for f in fates for s in f.regroup}
    return [s for s in record["fingerprints"] if s not in kept]


def table(fates: list[Fate]) -> str:
    """The fates as ``cedar upgrade`` prints them: one line per step of the new query."""
    width = max((len(f.step) for f in fates), default=4)
    lines = [f"{'step':<{width}}  {'verdict':<15}  from / why"]
    for f in fates:
        source = f"{f.old}: " if f.old is not None else ""
        lines.append(f"{f.step:<{width}}  {f.verdict:<15}  {source}{f.why}")
    return "\n".join(lines)
