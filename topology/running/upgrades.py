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
4. **refused** -- a new or changed source (the savepoint's positions are its sources'), or
   a new or changed step that holds state: its state cannot be rebuilt, as no input log is
   retained to replay into it.

Ties (two steps of the savepoint with the fingerprint) go to the one of the same step id,
else to the first in plan order; a step of the savepoint is given to one new step only.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

from topology.planning.plan import Plan, own_fingerprints, step_fingerprints

#: The verdicts, as ``cedar upgrade`` prints them.
UNCHANGED, KEEPS, FRESH, REFUSED = "unchanged", "keeps its state", "starts fresh", "refused"


@dataclasses.dataclass(frozen=True)
class Fate:
    """What a restore does with one step of the new plan: its verdict, the savepoint's step
    whose state it takes (``old``; None when it starts fresh or is refused) and why."""

    step: str
    verdict: str
    old: str | None
    why: str

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
    taken: set[str] = set()
    fates: dict[str, Fate] = {}
    for step in plan.stages:  # 1. the same step, its upstream the same
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
        if st.role == "source":
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
                f"log (cedar keeps no input before the cut to replay into it)"))
    return [fates[step] for step in plan.stages]


def fresh_snapshots(plan: Plan, fates: list[Fate]) -> dict[str, Any]:
    """The processor snapshot of a new processor of each step that starts fresh: what the
    restored run's first epoch holds for it."""
    return {f.step: plan.stages[f.step].factory().snapshot() for f in fates if f.old is None}


def dropped(record: dict[str, Any], fates: list[Fate]) -> list[str]:
    """The savepoint's steps whose state no step of the new plan takes: dropped by the
    restore (a step removed, or changed into a step that starts fresh or is refused)."""
    kept = {f.old for f in fates}
    return [s for s in record["fingerprints"] if s not in kept]


def table(fates: list[Fate]) -> str:
    """The fates as ``cedar upgrade`` prints them: one line per step of the new query."""
    width = max((len(f.step) for f in fates), default=4)
    lines = [f"{'step':<{width}}  {'verdict':<15}  from / why"]
    for f in fates:
        source = f"{f.old}: " if f.old is not None else ""
        lines.append(f"{f.step:<{width}}  {f.verdict:<15}  {source}{f.why}")
    return "\n".join(lines)
