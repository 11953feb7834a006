"""A query's name: who holds it, how a deploy claims it, and how ``replace=True`` frees it.

A name belongs to one query until that query is stopped. :func:`claim_name` refuses a deploy
of a name a query holds (:func:`name_taken`: running, finished but not stopped, or
recovering), and claims it in the query's checkpoint storage too when it has one;
:func:`replace_query` stops the holder completely first (docs/runtime.md#one-query-per-name);
:mod:`topology.running.deploy` calls these before it starts any actor.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

from actors import checkpoint as ck
from topology.running.query import NameTaken, stop_by_name
from topology.running.registry import (
    HOST_STEP,
    actor_name,
    actor_states,
    driver_alive,
    step_actor,
    unsubscribe,
)

#: How :func:`name_taken` names a supervisor that runs in the deploying process.
_SUPERVISOR = "~supervisor"


def name_taken(name: str, states: dict[str, str]) -> NameTaken:
    """The refusal of ``deploy(name)`` while the query ``name`` holds its name."""
    recovering = sorted(s for s, st in states.items() if st != "ALIVE")
    what = "is running"
    if HOST_STEP in recovering:
        what += " and recovering (Ray is restarting its host, which then resumes it)"
    elif _SUPERVISOR in recovering:
        what += (" and recovering (its supervisor, in the process that deployed it, is "
                 "starting its actors again)")
    elif recovering:
        what += f" and recovering (Ray is starting {', '.join(recovering)})"
    return NameTaken(
        f"deploy({name!r}): a query with this name {what}; a new deploy would destroy it. "
        f"Stop it first with topology.attach({name!r}).stop() (or `cedar stop {name}`), "
        f"deploy under another name, or deploy(..., replace=True) to stop it and start this "
        f"one")


def claim_name(name: str, root: str | None, local: bool) -> str:
    """Claim ``name`` for a new run and return the claim's token. The named-actor registry
    says whether a query holds the name: any actor ``<name>/...`` in any state but dead
    (alive, restarting, being created) holds it. A checkpointed query also holds a claim file
    in its checkpoint storage (:func:`actors.checkpoint.claim`, created exclusively), so that
    of two deploys racing past the registry only one goes on to touch the files, and so that
    a recovery checks the run is still the owner before it starts actors again. A claim file
    whose owner is gone (no actor of the name, and its driver gone when the supervisor ran
    there) is taken over."""
    import ray

    states = actor_states(name)
    if states:
        raise name_taken(name, states)
    token = uuid.uuid4().hex
    if root is None:
        return token
    record = {"token": token, "job": ray.get_runtime_context().get_job_id(), "local": local,
              "created": time.time()}
    for _ in range(2):
        held = ck.claim(root, name, record)
        if held is None:
            return token
        if held.get("local") and driver_alive(str(held.get("job"))):
            # its supervisor runs in that driver, between two generations of actors
            raise name_taken(name, {_SUPERVISOR: "RESTARTING"})
        states = actor_states(name)
        if states:
            raise name_taken(name, states)
        ck.release_claim(root, name, held.get("token"))  # stale: its owner is gone
    raise name_taken(name, actor_states(name) or {"claim": "PENDING_CREATION"})


def replace_query(name: str, root: str | None) -> None:
    """``deploy(..., replace=True)``: stop the query holding ``name`` completely — its claim
    revoked first (so that a recovery under way does not start actors again), its host and
    every actor killed with no restart, each confirmed dead — before anything of the new run
    touches a file."""
    import ray

    roots = {root} if root is not None else set()
    subs: list[tuple[str, str]] = []
    try:
        sink = step_actor(actor_name(name, "sink"))
        info = cast(dict[str, Any], ray.get(sink.manifest.remote(), timeout=10))
        if info.get("checkpoint_dir"):
            roots.add(info["checkpoint_dir"])
        subs = [(s[0], s[1]) for s in info.get("subscriptions", ())]
    except Exception:  # noqa: BLE001 - no sink now (a restart under way, or none)
        pass
    for r in roots:
        ck.release_claim(r, name, None)
    stop_by_name(name, timeout_s=60)
    unsubscribe(subs)
