"""How deployed queries are found on a Ray cluster: their namespace and actor names,
connecting to Ray, listing the running queries and detaching from a publisher. Shared by
:mod:`topology.running.deploy` (which starts queries) and :mod:`topology.running.query` (which
handles them).
"""

from __future__ import annotations

import os
from typing import Any

#: The Ray namespace of every cedar actor.
NAMESPACE = "cedar"
#: How long a driver waits in one fetch of a query's output.
FETCH_WAIT_S = 0.5
#: The "step" of a deployed query's host actor (``<query>/~host``, see :mod:`actors.host`).
HOST_STEP = "~host"
#: A resource only the head node has: the host actors go there.
HEAD_RESOURCE = "node:__internal_head__"

__all__ = ["FETCH_WAIT_S", "HEAD_RESOURCE", "HOST_STEP", "NAMESPACE", "actor_name",
           "actor_nodes", "actor_states", "driver_alive", "ensure_ray", "hosted", "kill_actor",
           "list_queries", "step_actor", "stuck_slots", "unsubscribe"]


def ensure_ray(address: str | None = None, quiet: bool = False) -> None:
    """Connect to Ray: to ``address`` (or ``$RAY_ADDRESS``) when given, else start a local
    instance. Does nothing when this process is already connected. ``quiet`` keeps Ray's own
    start-up messages and its workers' logs off this process's output (errors still show)."""
    import ray

    if ray.is_initialized():
        return
    opts: dict = {"logging_level": "ERROR", "log_to_driver": False} if quiet else {}
    addr = address or os.environ.get("RAY_ADDRESS")
    if addr:
        ray.init(address=addr, namespace=NAMESPACE, **opts)
    else:
        # "local": never join a cluster a previous `ray start` left recorded in /tmp/ray
        ray.init(address="local", namespace=NAMESPACE, include_dashboard=False, **opts)


def actor_name(query: str, step: str) -> str:
    """The Ray actor name of ``step`` of the deployed query ``query``."""
    return f"{query}/{step}"


def actor_nodes(query: str) -> dict[str, str]:
    """Step (and ``~host``) -> the id of the node its live actor runs on, for the deployed
    query ``query``: from Ray's own records (GCS), without the dashboard."""
    from ray._private import state

    out = {}
    for a in state.actors().values():
        name = a.get("Name") or ""
        if a.get("State") == "ALIVE" and name.startswith(actor_name(query, "")):
            out[name.split("/", 1)[1]] = a["Address"]["NodeID"]
    return out


def actor_states(query: str) -> dict[str, str]:
    """Step (and ``~host``) -> Ray's state of every actor of the deployed query ``query`` that
    is not dead: ``ALIVE``, ``RESTARTING`` (Ray is starting a lost actor again),
    ``PENDING_CREATION`` or ``DEPENDENCIES_UNREADY``. A name is taken in every one of these
    states, so an empty answer means that nothing of the query is left (names from the
    named-actor registry, states from Ray's own records, GCS)."""
    import ray
    from ray._private import state

    prefix = actor_name(query, "")
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a.get("namespace") == NAMESPACE and a.get("name", "").startswith(prefix)}
    slots = {n: "ALIVE" for n in hosted() if n.startswith(prefix)}  # in a live host
    if not names:
        return {n[len(prefix):]: st for n, st in sorted(slots.items())}
    states = {a["Name"]: a["State"] for a in state.actors().values()
              if a.get("Name") in names and a.get("State") != "DEAD"}
    # a name with no live record yet is being created
    states = {n: states.get(n, "PENDING_CREATION") for n in names} | slots
    return {n[len(prefix):]: states[n] for n in sorted(states)}


def driver_alive(job_id: str) -> bool:
    """Whether the Ray driver (job) ``job_id`` (hex) is still connected to the cluster."""
    from ray._private import state

    return any(j.get("JobID") == job_id and not j.get("IsDead") for j in state.jobs())


def list_queries(slots: dict[str, Any] | None = None) -> list[str]:
    """The names of the queries running on the connected cluster (``slots``: what
    :func:`hosted` answered, when the caller asked it already)."""
    import ray

    names: list[str] = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                        if a.get("namespace") == NAMESPACE]
    names += list(hosted() if slots is None else slots)
    return sorted(n[: -len("/sink")] for n in names if n.endswith("/sink"))


def hosted() -> dict[str, Any]:
    """Actor name (``<query>/<step>``) -> :class:`~actors.step_host.HostedStep`, for every
    step held in a slot of a step host of the connected cluster (``deploy(..., hosts=)``,
    :mod:`topology.running.step_hosts`). A host that does not answer (dead, or starting) holds
    none."""
    import ray

    from actors.step_host import HOST_PREFIX, HostedStep

    hosts: list[Any] = []
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a.get("namespace") == NAMESPACE and a.get("name", "").startswith(HOST_PREFIX):
            try:
                hosts.append(ray.get_actor(a["name"], namespace=NAMESPACE))
            except ValueError:  # gone meanwhile
                pass
    out: dict[str, Any] = {}
    asked = [host.names.remote() for host in hosts]
    answered, _ = ray.wait(asked, num_returns=len(asked), timeout=10) if asked else ([], [])
    for host, ref in zip(hosts, asked):
        try:
            held: dict[str, tuple[int, int]] = ray.get(ref) if ref in answered else {}
        except Exception:  # noqa: BLE001 - a dead host holds nothing
            continue
        out.update({name: HostedStep(host, *slot) for name, slot in held.items()})
    return out


def stuck_slots() -> dict[str, tuple[int, float]]:
    """Actor name (``<query>/<step>``) of a stopped step -> ``(slot, seconds since it was
    stopped)``, for every slot of the step hosts of the connected cluster whose data thread
    is still inside that step's batch (a function that has not returned): taken by no query
    until it returns (:meth:`actors.step_host.StepHost.stuck`). Hosts that do not answer
    within a few seconds are left out."""
    import ray

    from actors.step_host import HOST_PREFIX

    asked: list[Any] = []
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a.get("namespace") == NAMESPACE and a.get("name", "").startswith(HOST_PREFIX):
            try:
                asked.append(ray.get_actor(a["name"], namespace=NAMESPACE).stuck.remote())
            except ValueError:  # gone meanwhile
                pass
    answered, _ = ray.wait(asked, num_returns=len(asked), timeout=5) if asked else ([], [])
    out: dict[str, tuple[int, float]] = {}
    for ref in answered:
        try:
            out.update(ray.get(ref))
        except Exception:  # noqa: BLE001 - a dead host holds nothing
            pass
    return out


def step_actor(name: str, slots: dict[str, Any] | None = None) -> Any:
    """The actor named ``name`` (``<query>/<step>``, namespace ``cedar``) or the slot of a
    step host that holds that name; ValueError if there is neither (as ``ray.get_actor``).
    ``slots``: what :func:`hosted` answered, when the caller looks up many names at once."""
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        found = (hosted() if slots is None else slots).get(name)
        if found is None:
            raise
        return found


def kill_actor(handle: Any) -> None:
    """Stop a step's actor for good, or free its slot when it is hosted (the host lives on)."""
    import ray

    from actors.step_host import HostedStep

    if isinstance(handle, HostedStep):
        handle.close()
    else:
        ray.kill(handle, no_restart=True)


def unsubscribe(subs: list[tuple[str, str]]) -> None:
    """Detach each ``(publisher, token)`` subscription; a publisher that is gone is skipped."""
    import ray

    for publisher, token in subs:
        try:
            pub = step_actor(actor_name(publisher, "sink"))
            ray.get(pub.unsubscribe.remote(token))
        except Exception:  # noqa: BLE001 - the publisher is gone: nothing to detach from
            pass
