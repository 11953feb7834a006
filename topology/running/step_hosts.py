"""Step hosts: Ray actors that run the steps of many queries (:mod:`actors.step_host`).

``q.deploy(name, hosts=StepHosts())`` puts every step of the query in a slot of a shared host
instead of an actor of its own. An idle Ray worker process costs ~0.5 % of a core whatever it
runs, so a thousand idle steps in their own actors burn five cores; in 16 hosts, what 16
processes burn. The price: the steps of one host share its process (its cores through one
Python interpreter), and a host that dies takes every step it holds. Use hosts for many
small or mostly idle queries; give a busy query actors of its own (the default).

The hosts are detached named actors (``~steps/<pool>/<i>``, namespace ``cedar``): every
driver that names the same pool shares them, and ``cedar status``, ``cedar ui`` and
``attach()`` find hosted queries as they find the others. A hosted query runs until it is
stopped (``Query.stop()``, ``cedar stop``); deployed with ``detached=False``, its slots are
also freed when the deploying process exits. The hosts stay until
:meth:`StepHosts.shutdown`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from topology.running.registry import HOST_STEP, NAMESPACE, actor_name, ensure_ray


@functools.cache
def _host_class(capacity: int) -> Any:
    """The remote class of hosts of ``capacity`` slots (Ray exports a class once)."""
    import ray

    from actors.step_host import StepHost, host_options

    return ray.remote(**host_options(capacity))(StepHost)


@dataclasses.dataclass(frozen=True)
class StepHosts:
    """A pool of ``count`` host actors of ``capacity`` slots (steps) each, named ``name``.
    As a context manager it shuts its hosts down at the end of the block."""

    count: int = 2
    capacity: int = 32
    name: str = "default"

    def __post_init__(self) -> None:
        if self.count < 1 or self.capacity < 1:
            raise ValueError(f"StepHosts(count={self.count}, capacity={self.capacity}): "
                             f"both must be at least 1")
        if not self.name or "/" in self.name:
            raise ValueError(f"StepHosts(name={self.name!r}): a non-empty name without '/'")

    def actors(self) -> list[Any]:
        """The pool's host actors, started if they are not running (by this or another
        driver: a host that exists is reused as it is, whatever capacity it was made with)."""

        from actors.step_host import HOST_PREFIX

        ensure_ray()
        cls = _host_class(self.capacity)
        return [cls.options(name=f"{HOST_PREFIX}{self.name}/{i}", namespace=NAMESPACE,
                            lifetime="detached", get_if_exists=True).remote(self.capacity)
                for i in range(self.count)]

    def take(self, query: str, steps: list[str]) -> dict[str, Any]:
        """A slot for every step of ``query``, each in the host with the most free slots
        then; raises ValueError if the pool has fewer free slots than ``steps``."""
        import ray

        from actors.step_host import HostedStep

        hosts = self.actors()
        free = ray.get([h.free.remote() for h in hosts])
        wanted: dict[int, list[str]] = {}
        for step in steps:
            i = max(range(len(hosts)), key=lambda k: free[k])
            free[i] -= 1
            wanted.setdefault(i, []).append(step)
        got: dict[str, Any] = {}
        try:
            for i, group in wanted.items():
                slots = ray.get(hosts[i].open.remote([actor_name(query, s) for s in group]))
                if slots is None:
                    raise ValueError(
                        f"deploy({query!r}): the step hosts {self.name!r} have too few free "
                        f"slots for its {len(steps)} steps ({self.count} hosts of "
                        f"{self.capacity}; a slot whose stopped step is still inside a "
                        f"batch is not free: StepHosts.stuck()); stop a hosted query or use "
                        f"a pool with more (StepHosts(count=..., capacity=..., name=...))")
                got.update({s: HostedStep(hosts[i], *k) for s, k in zip(group, slots)})
        except BaseException:
            for h in got.values():
                h.close()
            raise
        return {s: got[s] for s in steps}  # in the plan's order, whatever host took them

    def stuck(self) -> dict[str, tuple[int, float]]:
        """Actor name (``<query>/<step>``) -> ``(slot, seconds since it was stopped)`` of
        every slot of the pool whose stopped step is still inside a batch (a function that
        does not return): no query takes it until the call returns
        (:meth:`actors.step_host.StepHost.stuck`)."""
        import ray

        out: dict[str, tuple[int, float]] = {}
        for part in ray.get([h.stuck.remote() for h in self.actors()], timeout=30):
            out.update(part)
        return out

    def __enter__(self) -> StepHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Kill the pool's hosts, and with them every step they hold, and the query hosts
        (``<query>/~host``, which feed a query's list or file sources) of the queries they
        hold; returns once all their names are free (a pool of the same name made next
        starts new hosts, and the queries' names can be deployed again)."""
        import ray

        from actors.step_host import HOST_PREFIX

        ensure_ray()
        names = [f"{HOST_PREFIX}{self.name}/{i}" for i in range(self.count)]
        names += [actor_name(q, HOST_STEP) for q in self._queries(names)]
        deadline = time.monotonic() + timeout_s
        while names:
            for name in list(names):
                try:
                    ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
                except ValueError:  # none (any more)
                    names.remove(name)
            if names:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"StepHosts({self.name!r}).shutdown(): still there "
                                       f"after {timeout_s:.0f} s: {names}")
                time.sleep(0.05)

    def _queries(self, hosts: list[str]) -> list[str]:
        """The names of the queries whose steps the hosts named ``hosts`` hold (running or
        stuck); a host that does not answer within a few seconds holds none."""
        import ray

        handles: list[Any] = []
        for name in hosts:
            try:
                handles.append(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:  # not running
                pass
        asked: list[Any] = [h.names.remote() for h in handles]
        asked += [h.stuck.remote() for h in handles]
        done, _ = ray.wait(asked, num_returns=len(asked), timeout=5) if asked else ([], [])
        queries: set[str] = set()
        for ref in done:
            try:
                queries.update(a.split("/", 1)[0] for a in ray.get(ref))
            except Exception:  # noqa: BLE001 - a host dead meanwhile holds nothing
                pass
        return sorted(queries)
