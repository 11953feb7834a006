"""``QueryHost``: the driver side of a deployed query, as an actor of the cluster.

``deploy()`` puts what a driver used to do for a query — feeding its sources and, when it is
checkpointed, supervising it (:mod:`actors.supervisor`) — into one actor named
``<query>/~host``, detached with the query. The script that deployed the query may then exit,
or be killed: the query keeps being fed, checkpointed and restarted, and any process
connected to the cluster reaches it (``topology.attach``).

The host is started with a *job*: a picklable object whose ``start(resume)`` begins the work
in this process and returns the *runner* that the ``call``s reach (the job and runner are
built in :mod:`topology.running.deploy`; this module knows only that protocol). When Ray restarts a
lost host (``max_restarts``: for checkpointed jobs, whose runner can resume), ``__init__``
runs again with ``resume=True``. Ray keeps an actor's arguments only while the process that
made them lives, so a restartable host is given the *location* of its job, saved with the
checkpoints (:func:`save_job`), not the job.

The host asks for no CPU (it waits most of the time), and calls run on a few threads, so a
``wait`` never blocks ``stats``.
"""

from __future__ import annotations

from typing import Any

from . import checkpoint as ck
from .files import atomic_write


def save_job(location: str, job: Any) -> None:
    """Save ``job`` (functions and all: cloudpickle) where a restarted host reads it."""
    from ray import cloudpickle

    atomic_write(location, cloudpickle.dumps(job))


#: Ray options of the host actor (``deploy()`` adds name, namespace, lifetime, placement).
HOST_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 16}


class QueryHost:
    """Runs ``job`` (see the module docstring) and answers ``call(method, *args)``."""

    def __init__(self, job: Any) -> None:
        import warnings

        import ray

        self.runner: Any = None
        with warnings.catch_warnings():  # Ray's own property warns of a deprecated call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resumed = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        if isinstance(job, str):
            job = ck.load(job)
        self.runner = job.start(resume=self.resumed)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.runner, method)(*args)

    def ping(self) -> str:
        return "ok"

    def node(self) -> str:
        """The id of the node this host runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def __repr__(self) -> str:
        return f"QueryHost({type(self.runner).__name__})"
