"""What state a deployed query is in, told from its actors: running, recovering, finished,
failed (and at which step, for what reason) or stopped -- the diagnosis behind
:meth:`Query.state <topology.running.query.Query.state>`, ``error()`` and ``wait()``. A base class
of
:class:`~topology.running.query.Query`.
"""

from __future__ import annotations

import time
from typing import Any

from topology.running.registry import HOST_STEP, actor_states

#: Seconds a diagnosis waits for one step's stats (a busy step is not a dead one).
STATS_WAIT_S = 10.0
#: Seconds a dead host's last calls may take to reach the sources it fed.
HOST_DRAIN_S = 3.0
#: Why a step whose actor is gone failed (a query without checkpoints).
DIED = ("its actor died (its process was killed or lost); a query deployed without "
         "checkpoint_dir cannot recover it: stop it, and deploy it with checkpoint_dir=... "
         "to survive the loss of an actor")
#: Why a checkpointed query whose host is gone for good failed.
HOST_DEAD = ("the query's host is gone for good (killed with no restart, or its restart "
              "failed), so nothing supervises the query; the output released so far is "
              "saved under its checkpoint_dir")


class Health:
    """The diagnosis of a deployed query from its actors' answers (a base class of
    :class:`~topology.running.query.Query`, whose handles, host and supervisor it reads)."""

    name: str
    sink_step: str
    host: Any
    supervisor: Any
    _stopped: bool
    _handles: dict[str, Any]
    _feeding: list[Any]
    _fed: list[str] | None
    _drain: tuple[float, dict[str, int]] | None

    def _diagnose(self, wait_s: float = STATS_WAIT_S) -> tuple[str, str | None, str | None]:
        """(state, failed step, reason): see :meth:`state`. A step that does not answer
        within ``wait_s`` is busy (its stats wait for the batch it is working on), not dead."""
        if self._stopped:
            return "stopped", None, None
        if self.supervisor is not None:
            return self._diagnose_supervised()
        import ray

        from actors.step_host import SlotGone

        handles = dict(self._handles)
        refs = {step: h.stats.remote() for step, h in handles.items()}
        answered, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=wait_s)
        stats: dict[str, dict[str, Any] | None] = {}
        dead = []
        for step, ref in refs.items():
            try:
                stats[step] = ray.get(ref) if ref in answered else None  # None: busy
            except ray.exceptions.RayActorError:
                dead.append(step)
            except SlotGone:  # its slot was freed: stopped by another handle
                return "stopped", None, None
        sink = stats.get(self.sink_step)
        if sink is not None and sink["finished"] and not sink["error"]:
            return "finished", None, None
        if dead:
            return "failed", dead[0], DIED
        failed = first_failed(stats)
        if failed is not None:
            return "failed", failed, str(stats[failed]["error"])  # type: ignore[index]
        for f in self._feeding:
            try:
                errors = f.feed_errors()
            except ray.exceptions.RayActorError:  # the host is gone
                return self._host_gone(stats)
            if errors:  # (source step, reason): what no actor has heard of yet
                step, reason = errors[0]
                return "failed", str(step), str(reason)
        return "running", None, None

    def _host_gone(self, stats: dict[str, dict[str, Any] | None]) -> tuple[str, str | None,
                                                                         str | None]:
        """The host that fed some sources (without checkpoints) is dead: harmless if it had
        sent their whole input — they then finish — else the query can never finish. Its
        last calls may still be on their way: only sources that stay unfinished and take
        nothing for ``HOST_DRAIN_S`` count as cut off."""
        fed = self._host_fed()
        open_ = {s: stats[s]["events_in"] for s in fed  # type: ignore[index]
                 if stats.get(s) is not None and not stats[s]["finished"]}  # type: ignore[index]
        if not open_:
            return "running", None, None
        now = time.monotonic()
        if self._drain is None or self._drain[1] != open_:
            self._drain = (now, open_)
        if now - self._drain[0] < HOST_DRAIN_S:
            return "running", None, None
        return "failed", HOST_STEP, (
            f"the query's host, which fed {', '.join(open_)}, died before their input ended; "
            f"a query deployed without checkpoint_dir cannot feed them again: deploy it with "
            f"checkpoint_dir=... to survive the loss of its host")

    def _host_fed(self) -> list[str]:
        """The sources the query's host feeds: no input edge, not fed by the deploying
        process, not a ``published()`` subscription (from the sink's manifest)."""
        import ray

        if self._fed is None:
            info = ray.get(self._handles[self.sink_step].manifest.remote(),
                           timeout=STATS_WAIT_S)
            inner = {d for ds in info.get("edges", {}).values() for d in ds}
            local = set(info.get("fed_by_driver", ()))
            subs = {tok.split("/", 1)[1] for _, tok in info.get("subscriptions", ())}
            self._fed = [s for s in self._handles if s not in inner | local | subs]
        return self._fed

    def _diagnose_supervised(self) -> tuple[str, str | None, str | None]:
        """A checkpointed query: its supervisor knows, if its host is there to ask."""
        import ray

        if self.host is not None:  # a call to a restarting host waits for its restart
            answer = self.host.call.remote("state")
            deadline = time.monotonic() + STATS_WAIT_S
            while time.monotonic() < deadline:
                state = actor_states(self.name).get(HOST_STEP)
                if state is None:
                    return "failed", HOST_STEP, HOST_DEAD
                if state != "ALIVE":
                    return "recovering", None, None
                try:
                    kind, step, reason = ray.get(answer, timeout=0.2)
                    return str(kind), step, reason
                except ray.exceptions.GetTimeoutError:
                    continue
                except ray.exceptions.RayActorError:
                    break  # lost under the call: the supervisor's own wait below
        try:
            kind, step, reason = self.supervisor.state()
        except ray.exceptions.RayActorError:
            return "failed", HOST_STEP, HOST_DEAD
        return str(kind), step, reason


def first_failed(stats: dict[str, dict[str, Any] | None]) -> str | None:
    """The step whose own error failed the query: a failed step none of whose direct
    upstream steps failed (a failure travels downstream, every step it reaches records it),
    the first in ``stats``' order when there are several; None if no step failed."""
    failed = [s for s, st in stats.items() if st is not None and st["error"]]
    ups: dict[str, set[str]] = {}
    for step, st in stats.items():
        for dst, _ in (st or {}).get("out_edges", ()):
            ups.setdefault(dst, set()).add(step)
    origins = [s for s in failed if not ups.get(s, set()) & set(failed)]
    return next(iter(origins or failed), None)
