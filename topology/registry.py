"""How deployed queries are found on a Ray cluster: their namespace and actor names,
connecting to Ray, listing the running queries and detaching from a publisher. Shared by
:mod:`topology.deploy` (which starts queries) and :mod:`topology.query` (which handles them).
"""

from __future__ import annotations

import os

#: The Ray namespace of every cedar actor.
NAMESPACE = "cedar"
#: How long a driver waits in one fetch of a query's output.
FETCH_WAIT_S = 0.5
#: The "step" of a deployed query's host actor (``<query>/~host``, see :mod:`actors.host`).
HOST_STEP = "~host"
#: A resource only the head node has: the host actors go there.
HEAD_RESOURCE = "node:__internal_head__"

__all__ = ["FETCH_WAIT_S", "HEAD_RESOURCE", "HOST_STEP", "NAMESPACE", "actor_name",
           "actor_nodes", "actor_states", "driver_alive", "ensure_ray", "list_queries",
           "unsubscribe"]


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
    if not names:
        return {}
    states = {a["Name"]: a["State"] for a in state.actors().values()
              if a.get("Name") in names and a.get("State") != "DEAD"}
    # a name with no live record yet is being created
    return {n[len(prefix):]: states.get(n, "PENDING_CREATION") for n in sorted(names)}


def driver_alive(job_id: str) -> bool:
    """Whether the Ray driver (job) ``job_id`` (hex) is still connected to the cluster."""
    from ray._private import state

    return any(j.get("JobID") == job_id and not j.get("IsDead") for j in state.jobs())


def list_queries() -> list[str]:
    """The names of the queries running on the connected cluster."""
    import ray

    names = []
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a.get("namespace") == NAMESPACE and a.get("name", "").endswith("/sink"):
            names.append(a["name"][: -len("/sink")])
    return sorted(names)


def unsubscribe(subs: list[tuple[str, str]]) -> None:
    """Detach each ``(publisher, token)`` subscription; a publisher that is gone is skipped."""
    import ray

    for publisher, token in subs:
        try:
            pub = ray.get_actor(actor_name(publisher, "sink"), namespace=NAMESPACE)
            ray.get(pub.unsubscribe.remote(token))
        except Exception:  # noqa: BLE001 - the publisher is gone: nothing to detach from
            pass
