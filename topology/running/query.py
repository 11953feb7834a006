"""``Query``: the handle of a query running on Ray, from the driver that deployed it or any
other driver connected to the cluster (:func:`attach`).

Every call goes to the actors' ``control`` concurrency group, so it is answered while data
flows. A ``Query`` is a driver-side object: it refuses to be pickled; another process gets its
own handle with ``topology.attach(name)``.

    q = stream.deploy("meter-avg")
    q.stats()["where#1"]["events_in"]     # per step: events in/out, CTI, state size, ...
    q.snapshot()                          # output CHT rows alive at the output CTI
    for msg in q.subscribe(): ...         # alive events, then the live output
    q.stop()
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from actors.wire import decode
from operators.columns import expand
from operators.errors import OperatorError
from operators.events import Message
from topology.running.query_health import HOST_DEAD, STATS_WAIT_S, Health
from topology.running.registry import (
    FETCH_WAIT_S,
    HOST_STEP,
    NAMESPACE,
    actor_name,
    actor_states,
    ensure_ray,
    hosted,
    kill_actor,
    list_queries,
    step_actor,
    unsubscribe,
)

if TYPE_CHECKING:
    from operators.detect_seeing import DetectView
    from topology.seeing.why import Explanation

#: Seconds between two full checks of every step while ``Query.wait()`` waits.
CHECK_S = 0.5
#: Seconds one of those checks waits for the steps' stats (a busy step answers at once from
#: its last report; one that does not answer by then is taken to be busy).
DIAGNOSE_WAIT_S = 1.0


#: Seconds ``stop()`` waits for the slots of a hosted query's steps to be out of their
#: batches before it says which are stuck (:class:`StuckSlotWarning`).
SLOT_FREE_S = 2.0

#: Seconds ``attach()`` waits for a recovering query to be whole again.
ATTACH_WAIT_S = 60.0
#: Seconds ``attach()`` retries a query that is not recovering but not reachable either.
ATTACH_GRACE_S = 5.0


class QueryUnavailable(RuntimeError):
    """``attach(name)``: the query's actors are there, but it cannot be reached (still
    recovering after the wait, or its sink or a step is gone and no supervisor in a host
    stands for them: a query without checkpoints)."""


class NameTaken(ValueError):
    """``deploy(name)`` of a name that a query holds: running, finished but not stopped, or
    recovering (its host or an operator being restarted). The message says how to stop it."""


class QueryStopped(RuntimeError):
    """A call on the handle of a query that was stopped (by this handle, another one, or
    ``cedar stop``): its steps are gone. Deploy it again, or ``attach()`` to the query that
    holds the name now."""


class StuckSlotWarning(UserWarning):
    """``Query.stop()`` of a hosted query one of whose steps is still inside a batch (a
    function that does not return): the query is stopped and its name is free, but that
    step's slot stays taken until the call returns (:meth:`StepHosts.stuck
    <topology.running.step_hosts.StepHosts.stuck>`)."""


class QueryFailed(OperatorError):
    """A deployed query failed: ``step`` names the step (or ``~host``, the query's host),
    ``reason`` says what happened, in cedar's words."""

    def __init__(self, query: str, step: str, reason: str) -> None:
        super().__init__(f"query {query!r} failed: step {step}: {reason}")
        self.query, self.step, self.reason = query, step, reason


def stop_by_name(name: str, timeout_s: float = 30.0) -> None:
    """Kill every actor of the deployed query ``name`` — its host first, so that it starts
    nothing again — with no restart, and return once Ray has confirmed each one dead (its
    name released). An actor that appears meanwhile (a host's restart under way) is killed
    too. Raises :class:`NameTaken` if some actor is still there after ``timeout_s``."""

    deadline = time.monotonic() + timeout_s
    while True:
        states = actor_states(name)
        if not states:
            return
        if time.monotonic() > deadline:
            raise NameTaken(f"query {name!r} could not be stopped within {timeout_s:.0f} s: "
                            f"still there: {states}")
        slots = hosted()
        for step in sorted(states, key=lambda s: s != HOST_STEP):  # the host first
            try:
                kill_actor(step_actor(actor_name(name, step), slots))
            except Exception:  # noqa: BLE001 - dead meanwhile
                pass
        time.sleep(0.05)


class HostRunner:
    """The runner in a query's host actor (:mod:`actors.host`): the same methods as the
    local one, called through the actor. While Ray restarts a lost host, a call waits for
    it (up to ``wait_s``); a host that is dead for good raises at once."""

    def __init__(self, host: Any, wait_s: float = 60.0) -> None:
        self.host, self.wait_s = host, wait_s

    def call(self, method: str, *args: Any) -> Any:
        import ray
        from ray._private import state

        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                return ray.get(self.host.call.remote(method, *args))
            except ray.exceptions.RayActorError:
                record = state.actors(actor_id=self.host._actor_id.hex()) or {}
                if record.get("State") == "DEAD" or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        return lambda *args: self.call(method, *args)


class Query(Health):
    """A running query: per-step actor handles (``steps``), and its sink."""

    def __init__(self, name: str, handles: dict[str, Any], *, sink: str = "sink",
                 explain: str = "", subscriptions: list[tuple[str, str]] | None = None,
                 supervisor: Any = None, host: Any = None, feeding: Any = None,
                 claim: tuple[str, str] | None = None) -> None:
        self.name = name
        #: (checkpoint root, token) of the query's claim on its name (checkpointed queries)
        self._claim = claim
        #: the query's host actor in the cluster (:mod:`actors.host`), or None
        self.host = host
        #: the checkpointing supervisor (``deploy(..., checkpoint_dir=...)``): in this
        #: process, or in the host; None without checkpoints
        self.supervisor = supervisor
        if supervisor is None and host is not None and feeding is None:
            self.supervisor = HostRunner(host)
        #: what feeds the sources without checkpoints: this process's threads, the host
        self._feeding = [f for f in feeding or () if f is not None]
        self._handles = dict(handles)
        self.sink_step = sink
        self._explain = explain
        self._subscriptions = subscriptions or []
        #: the sources the host feeds (:meth:`_host_fed`), and since when they took nothing
        self._fed: list[str] | None = None
        self._drain: tuple[float, dict[str, int]] | None = None
        self._checked = 0.0  # when wait() last asked every step (at most every CHECK_S)
        self._stopped = False  # stop() was called on this handle
        self._kept: list[Message] | None = None  # the output before a savepoint's cut

    def _get(self, refs: Any, timeout: float | None = None) -> Any:
        """``ray.get(refs)``; a step whose slot was freed (the query was stopped, maybe by
        another process) raises :class:`QueryStopped`, not Ray's error around ``SlotGone``."""
        import ray

        from actors.step_host import SlotGone

        try:
            return ray.get(refs, timeout=timeout)
        except SlotGone:
            raise self._stopped_error() from None

    def _stopped_error(self) -> QueryStopped:
        return QueryStopped(
            f"query {self.name!r} was stopped: its steps are gone. Deploy it again, or "
            f"topology.attach({self.name!r}) to the query that holds the name now")

    def __reduce__(self) -> Any:
        raise TypeError(
            f"a Query handle belongs to the driver that made it; in another process use "
            f"topology.attach({self.name!r})"
        )

    def __repr__(self) -> str:
        return f"<Query {self.name!r}: {len(self.handles)} actors>"

    @property
    def handles(self) -> dict[str, Any]:
        """The actor of each step (new ones after a recovery)."""
        if self.supervisor is not None and self._handles:
            return dict(self.supervisor.current_handles())
        return self._handles

    @handles.setter
    def handles(self, value: dict[str, Any]) -> None:
        self._handles = dict(value)

    def recoveries(self) -> list[dict[str, Any]]:
        """Checkpointed queries: one record per restart (``recovery_s``, the ``epoch`` it
        resumed from, ``replayed`` log entries, ``output_position``; ``resumed`` when the
        supervisor itself was restarted)."""
        return list(self.supervisor.recovery_log()) if self.supervisor is not None else []

    def output(self) -> list[Message]:
        """Checkpointed queries: the output messages released so far (exactly once)."""
        if self._kept is not None:
            return list(self._kept)
        if self.supervisor is None:
            raise TypeError(f"query {self.name!r}: output() needs deploy(..., checkpoint_dir=); "
                            f"use subscribe()")
        return list(self.supervisor.output_from(0)[0])

    @property
    def steps(self) -> list[str]:
        """The step ids, one actor each."""
        return list(self.handles)

    @property
    def _sink(self) -> Any:
        if self._stopped:
            raise self._stopped_error()
        return self.handles[self.sink_step]

    def explain(self) -> str:
        return self._explain

    # -- inspection -------------------------------------------------------------------------
    def stats(self) -> dict[str, dict[str, Any]]:
        """Per step: ``events_in``, ``events_out``, ``batches_in``/``out``, ``cti`` (the output
        CTI), ``state_size``, ``late``, ``dead_letters``, ``in_flight``, ``finished``,
        ``error`` (sources add their ingress counters under ``source``), ``busy`` and
        ``busy_s`` (a step inside one long batch answers at once from its last report, with
        the counters it moved since, and says for how long). A checkpointed query
        adds to every step ``recoveries`` (restarts so far), ``recovery_s`` (the last one's
        duration: from noticing the death to the replay sent) and ``checkpoint_epoch``."""
        if self._stopped:
            raise self._stopped_error()
        refs = {step: h.stats.remote() for step, h in self.handles.items()}
        out = {step: self._get(ref) for step, ref in refs.items()}
        if self.supervisor is not None:
            extra = self.supervisor.stats()
            for s in out.values():
                s.update(extra)
        return out

    def start(self) -> None:
        """Start feeding the sources of a query deployed with ``hold=True`` (its actors are
        in place and waiting); nothing for a query that is fed already."""
        for f in self._feeding:
            f.go()

    def snapshot(self) -> list[tuple[int, int, Any]]:
        """The output CHT as ``(start, end, payload)`` rows: every row alive at the current
        output CTI (end ≥ CTI), plus the final rows when deployed with ``history=True``."""
        rows: list[tuple[int, int, Any]] = self._get(self._sink.rows.remote())
        return rows

    def late(self) -> list[Any]:
        """The late events of every source (dropped or adjusted by its AdvanceTime policy)."""
        return self._records("late")

    def dead_letters(self) -> list[Any]:
        """Every input that could not be processed, with the reason."""
        return self._records("dead_letters")

    def why(self, at: Any = None, *, step: str | None = None,
            tz: str | _dt.tzinfo | None = None, key: Any = None) -> Explanation:
        """Why the output at ``at`` (a time: ticks, a datetime or an ISO-8601 string; a
        window ``(start, end)``; None: the output CTI, i.e. the next output) is final,
        speculative or not yet produced; if not final, which input's CTI holds it back,
        through which steps (each step's input CTIs, their minimum and where it came from),
        how long ago that input last advanced, and for an idle source the idle timeout that
        would move it; and the late events dropped or adjusted out of it, with their original
        times (:class:`topology.seeing.why.Explanation`: ``print()`` it, or ``to_dict()``). ``step``
        asks about another step's output (whether it is speculative is then unknown: only
        the sink keeps its output); ``key`` about one key's output where a source has per-key
        progress (that key's CTI, how far behind the others, when its last event came).
        ``cedar why NAME --at TIME [--key KEY]`` prints the same."""
        from actors.step_host import SlotGone

        try:
            return _why(self, at, step, tz, key)
        except SlotGone:
            raise self._stopped_error() from None

    def partial_matches(self, limit: int | None = None) -> dict[str, tuple[DetectView, ...]]:
        """Per step that runs a ``detect``: what it shows of itself
        (:class:`operators.detect_seeing.DetectView`): its ``limit`` oldest partial matches
        (default 20; per key the symbols bound so far, the events and the deadline) and its
        last ended candidate runs, with what ended each. ``why`` reports them too (and
        ``cedar inspect`` prints them). A step busy in one long batch is left out."""
        import functools

        from topology.running.progress import FACTS_WAIT_S, detect_views

        if self._stopped:
            raise self._stopped_error()
        read = functools.partial(detect_views, limit=limit)
        refs = {step: h.inspect.remote(read, FACTS_WAIT_S) for step, h in self.handles.items()}
        answers = {step: self._get(ref) for step, ref in refs.items()}
        return {step: views for step, views in answers.items() if views}

    def _records(self, kind: str) -> list[Any]:
        if self._stopped:
            raise self._stopped_error()
        refs = [h.records.remote(kind) for h in self.handles.values()]
        return [r for rs in self._get(refs) for r in rs]

    def error(self) -> str | None:
        """The query's failure in cedar's words — ``query 'q' failed: step S: reason`` — or
        None while it runs, recovers or after it finished (see :meth:`state`)."""
        kind, step, reason = self._diagnose()
        return str(QueryFailed(self.name, step, reason)) if kind == "failed" else None  # type: ignore[arg-type]

    def state(self) -> str:
        """Where the query is: ``"running"``, ``"recovering"`` (a checkpointed query whose
        host or operators Ray or its supervisor is starting again), ``"finished"`` (its input
        ended and its output is complete), ``"failed: step S: reason"`` (S: the step that
        raised, not one its failure reached) or ``"stopped"`` (stopped by this handle, or
        a hosted query stopped by another process). Never raises a Ray error: a dead actor
        is a state too."""
        kind, step, reason = self._diagnose()
        return f"failed: step {step}: {reason}" if kind == "failed" else kind

    # -- output -------------------------------------------------------------------------------
    def subscribe(self, snapshot: bool = True,
                  timeout_s: float | None = None) -> Iterator[Message]:
        """An iterator of output messages: with ``snapshot``, first the events alive at the
        current output CTI (Inserts, then that CTI), then the live stream. It ends when the
        query's input ends, or after ``timeout_s`` seconds without output."""
        if self.supervisor is not None:
            return self._subscribe_supervised(timeout_s)
        sink = self._sink
        pull = self._get(sink.open_pull.remote(snapshot))

        def messages() -> Iterator[Message]:
            quiet_since = time.monotonic()
            try:
                while True:
                    blob, finished, error = self._get(sink.fetch.remote(pull, FETCH_WAIT_S))
                    msgs = list(expand(decode(blob)))  # column batches pass the sink whole
                    yield from msgs
                    if error is not None:
                        raise OperatorError(f"query {self.name!r} failed in {error}")
                    if finished:
                        return
                    now = time.monotonic()
                    if msgs:
                        quiet_since = now
                    elif timeout_s is not None and now - quiet_since > timeout_s:
                        return
            finally:
                try:
                    sink.close_pull.remote(pull)
                except Exception:  # the query was stopped meanwhile  # noqa: BLE001
                    pass

        return messages()

    def _subscribe_supervised(self, timeout_s: float | None) -> Iterator[Message]:
        """The released output from its start (checkpointed queries survive restarts)."""
        i = 0
        while True:
            msgs, done, error = self.supervisor.output_from(
                i, timeout_s if timeout_s is not None else FETCH_WAIT_S)
            i += len(msgs)
            yield from msgs
            if done and not msgs:
                if error is not None:
                    raise OperatorError(error)
                return
            if not msgs and timeout_s is not None:
                return

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the query's input has ended and its output is complete (True), or
        ``timeout_s`` passed (False). A failure — a step that raised, an actor that died in
        a query without checkpoints, a host lost before it fed the whole input — raises
        :class:`QueryFailed` naming the step, as soon as it is seen."""
        import ray

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if self.supervisor is not None:
            while True:  # in steps, so that a host restarted meanwhile is reached again
                left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
                try:
                    done, error = self.supervisor.outcome(max(0.0, left))
                except ray.exceptions.RayActorError:  # the host is gone, or still restarting
                    done, error = False, None
                    if self._diagnose()[0] == "failed":
                        error = HOST_DEAD
                if error is not None:
                    kind, step, reason = self._diagnose()
                    if kind != "failed":
                        step, reason = HOST_STEP, error
                    raise QueryFailed(self.name, step or HOST_STEP, reason or error)
                if done or (deadline is not None and time.monotonic() >= deadline):
                    return bool(done)

        while True:
            # never past the deadline (but time for a last look at the sink once it passed)
            rest = None if deadline is None else deadline - time.monotonic()
            wait_s = STATS_WAIT_S if rest is None else min(STATS_WAIT_S, max(0.5, rest))
            try:
                s = self._get(self._sink.stats.remote(), timeout=wait_s)
                if s["finished"] and not s["error"]:
                    return True
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                s = None
            if rest is not None and rest <= 0:
                return False  # the sink, just asked, has not finished
            if s is None or s["error"] or time.monotonic() - self._checked > CHECK_S:
                self._checked = time.monotonic()
                # a round of checks never takes the rest of the deadline: a step that does
                # not answer soon (its control thread taken) is only busy, and the sink is
                # asked again before the deadline is called
                kind, step, reason = self._diagnose(min(wait_s, DIAGNOSE_WAIT_S))
                if kind == "finished":
                    return True
                if kind == "failed":
                    raise QueryFailed(self.name, step, reason)  # type: ignore[arg-type]
                if kind == "stopped":
                    raise self._stopped_error()
            time.sleep(0.02)

    def flush_trace(self) -> None:
        """Write every step's trace rows kept so far (``deploy(name, trace=...)``) to the
        trace's parquet parts; ``stop()`` does it too. Nothing happens when tracing is off."""
        import ray

        try:
            ray.get([h.flush_trace.remote() for h in self.handles.values()], timeout=30)
        except Exception:  # noqa: BLE001 - a step is gone: its rows are lost with it
            pass

    #: (the Stream, its deploy options) when ``Stream.deploy`` started it in this process
    deployed_as: tuple[Any, dict[str, Any]] | None = None

    def rescale(self, partitions: int, savepoint: str, *, step: str | None = None,
                timeout_s: float = 60.0) -> Query:
        """Stop with a savepoint, deploy again from it at ``partitions``; the new query
        (:func:`topology.running.savepoints.rescale`)."""
        from topology.running.savepoints import rescale

        return cast(Query, rescale(self, partitions, savepoint, step, timeout_s))

    def stop(self, timeout_s: float = 30.0, *, savepoint: str | None = None
             ) -> dict[str, Any] | None:
        """Stop the query: detach it from the queries it reads, stop feeding, kill its actors
        (its host first), and wait (up to ``timeout_s``) until Ray confirms them dead and
        their names are free, so that the name can be deployed again at once. Works in any
        state of the query: running, recovering, finished or failed. A handle whose name was
        taken over since (``deploy(..., replace=True)``) stops nothing of the new query.
        Queries composed onto this one keep running (they just receive nothing more).

        With ``savepoint`` (a path or storage URI; a checkpointed query) the query is first
        cut at one barrier through every step and its savepoint written there, returning its
        record; every output before the cut is delivered (:meth:`output` keeps it), none after
        (:func:`topology.running.savepoints.take_savepoint`)."""
        import ray

        record = None
        if savepoint is not None:  # cut, written and its output kept before the stop
            record, self._kept = _take_savepoint(self, savepoint, timeout_s)

        try:
            handles = list(self.handles.values())
        except Exception:  # noqa: BLE001 - its host is gone or restarting
            handles = list(self._handles.values())
        ours = self._name_is_ours(handles)
        if ours:
            self.flush_trace()
        for runner in [self.supervisor, *self._feeding] if ours else self._feeding:
            try:
                runner.stop(True)  # a supervisor kills the actors: no restart after
            except Exception:  # noqa: BLE001 - its host is gone
                pass
        unsubscribe(self._subscriptions)
        if ours:
            try:
                info = ray.get(self._sink.manifest.remote(), timeout=10)
                unsubscribe([(s[0], s[1]) for s in info.get("subscriptions", ())])
            except Exception:  # the sink is gone already  # noqa: BLE001
                pass
        for h in ([self.host] if self.host is not None else []) + handles:
            try:
                kill_actor(h)
            except Exception:  # noqa: BLE001
                pass
        self.handles = {}
        self._stopped = True
        if not ours:
            return record
        # ray.kill returns before the actor is dead and its name released; a host that Ray
        # was restarting may have started actors meanwhile
        stop_by_name(self.name, timeout_s)
        if self._claim is not None:
            from actors import checkpoint as ck

            ck.release_claim(self._claim[0], self.name, self._claim[1])
        say_stuck(self.name, handles)
        return record

    def _name_is_ours(self, handles: list[Any]) -> bool:
        """Whether the actors now named after this query are this query's (not those of a
        query deployed under the same name since, with ``replace=True``)."""

        if self._claim is not None:
            from actors import checkpoint as ck

            held = ck.read_claim(self._claim[0], self.name)
            return held is None or held.get("token") == self._claim[1]
        try:
            sink = step_actor(actor_name(self.name, self.sink_step))
        except ValueError:
            return True
        return sink._actor_id in {h._actor_id for h in handles}


def _take_savepoint(query: Query, location: str, timeout_s: float) -> Any:
    from topology.running.savepoints import take_savepoint

    return take_savepoint(query, location, timeout_s)


def say_stuck(query: str, handles: list[Any]) -> None:
    """Warn (:class:`StuckSlotWarning`) of the steps of ``query`` among ``handles`` (just
    stopped) whose slot of a
    step host is still inside their batch after :data:`SLOT_FREE_S`: freed, their name
    free, but their slot taken by no query until the call returns."""
    import warnings

    import ray

    from actors.step_host import HostedStep

    slots: dict[Any, tuple[Any, set[int]]] = {}
    for h in handles:
        if isinstance(h, HostedStep):
            slots.setdefault(h.host._actor_id, (h.host, set()))[1].add(h.slot)
    mine = actor_name(query, "")
    deadline = time.monotonic() + SLOT_FREE_S
    while slots:
        stuck: dict[str, tuple[int, float]] = {}
        try:
            for host, ours in slots.values():
                stuck.update({a: v for a, v in ray.get(host.stuck.remote(),
                                                       timeout=STATS_WAIT_S).items()
                              if a.startswith(mine) and v[0] in ours})
        except Exception:  # noqa: BLE001 - a host gone holds nothing
            return
        if not stuck:
            return
        if time.monotonic() > deadline:
            steps = ", ".join(f"{a[len(mine):]} (slot {i}, stopped {age:.0f} s ago)"
                              for a, (i, age) in sorted(stuck.items()))
            warnings.warn(StuckSlotWarning(
                f"stop({query!r}): the query is stopped and its name is free, but "
                f"{steps} is still inside a batch (its function has not returned): its "
                f"slot is taken by no query until the call returns (the host's other "
                f"slots run on; StepHosts.stuck() lists such slots, and "
                f"StepHosts.shutdown() ends them with the hosts)"), stacklevel=3)
            return
        time.sleep(0.1)


def attach(name: str, address: str | None = None, wait_s: float = ATTACH_WAIT_S) -> Query:
    """The handle of the running query ``name``, from any driver connected to the cluster.
    While the query recovers (Ray restarting its host, which replaces every actor), it waits
    up to ``wait_s`` for the query to be whole again; a query that cannot be reached then
    raises :class:`QueryUnavailable`, one with no actor left ``ValueError``."""
    import ray

    ensure_ray(address or "auto")
    began = time.monotonic()
    while True:
        states = actor_states(name)
        if not states:
            raise ValueError(f"attach({name!r}): no running query has this name (running: "
                             f"{', '.join(list_queries()) or 'none'})")
        try:
            return _attach_now(name)
        except (ValueError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            recovering = any(st != "ALIVE" for st in states.values())
            waited = time.monotonic() - began
            if waited > wait_s or (not recovering and waited > ATTACH_GRACE_S):
                raise QueryUnavailable(
                    f"attach({name!r}): the query cannot be reached (its actors: "
                    f"{', '.join(f'{s} {st.lower()}' for s, st in states.items())}): "
                    f"{'it is still recovering; try again' if recovering else 'its sink is gone'}"
                    f"; stop what is left with `cedar stop {name}` or "
                    f"topology.running.query.stop_by_name({name!r})") from None
            time.sleep(0.2)


def _attach_now(name: str) -> Query:
    """The handle of ``name`` now, or ValueError / a Ray error while it cannot be reached.
    A checkpointed query is reached through its host, whose supervisor knows its current
    actors and holds its released output: a step killed once the query finished (nothing
    restarts it then) or a sink that is gone does not hide that output."""
    import ray

    slots = hosted()
    info = _manifest(name, slots)
    if "actors" not in info:
        raise ValueError("its sink is being configured")  # a recovery under way
    try:
        host = ray.get_actor(info["host"], namespace=NAMESPACE) if "host" in info else None
    except ValueError:
        host = None  # its sources were all fed by the driver, or it has no sources to feed
    try:
        handles = {step: step_actor(actor, slots) for step, actor in info["actors"].items()}
    except ValueError:  # a step is gone: its supervisor knows what stands in its place
        if host is None or "checkpoint_dir" not in info:
            raise
        handles = cast(dict[str, Any], ray.get(host.call.remote("current_handles"),
                                               timeout=STATS_WAIT_S))
    feeding = None if host is None or "checkpoint_dir" in info else [HostRunner(host)]
    claim = (info["checkpoint_dir"], info["claim"]) if "checkpoint_dir" in info and \
        "claim" in info else None
    return Query(name, handles, sink=info.get("sink", "sink"), explain=info.get("explain", ""),
                 subscriptions=[(s[0], s[1]) for s in info.get("subscriptions", ())],
                 host=host, feeding=feeding, claim=claim)


def _manifest(name: str, slots: dict[str, Any]) -> dict[str, Any]:
    """What the sink of ``name`` says of the query (:meth:`OperatorShell.manifest
    <actors.shell.OperatorShell.manifest>`); when the sink is gone, what the supervisor in
    the query's host keeps of it (a checkpointed query). ValueError when neither answers."""
    import ray

    try:
        sink = step_actor(actor_name(name, "sink"), slots)
        return cast(dict[str, Any], ray.get(sink.manifest.remote(), timeout=STATS_WAIT_S))
    except (ValueError, ray.exceptions.RayActorError):
        host = ray.get_actor(actor_name(name, HOST_STEP), namespace=NAMESPACE)
        try:
            return cast(dict[str, Any], ray.get(host.call.remote("manifest"),
                                                timeout=STATS_WAIT_S))
        except ray.exceptions.RayTaskError:  # no supervisor there: not checkpointed
            raise ValueError("its sink is gone") from None


def _why(q: Query, at: Any, step: str | None, tz: str | _dt.tzinfo | None,
         key: Any = None) -> Explanation:
    """:meth:`Query.why` (its steps' progress read from their actors)."""
    from topology.running.progress import FACTS_WAIT_S, actor_progress, keeps_history
    from topology.seeing.why import WHY_LATE_LIMIT, explain, reach_of, span_of

    clock = q._get(q._sink.manifest.remote(), timeout=STATS_WAIT_S).get("clock",
                                                                             "ticks")
    handles = q.handles
    rows = q.snapshot() if step in (None, q.sink_step) else None
    # a sink without history lets its final rows go (a busy sink: None, counted so too)
    released = rows is not None and not q._get(
        q._sink.inspect.remote(keeps_history, FACTS_WAIT_S), timeout=STATS_WAIT_S)
    if at is None:  # the next output of the step: ask for its CTI first
        first = actor_progress(handles, q.sink_step, clock, limit=0)
        mine = first.steps.get(step or q.sink_step)
        span = (mine.cti, mine.cti + 1) if mine is not None else (0, 1)
    else:
        span = span_of(at)
    lo, hi = reach_of(span, rows or ())
    progress = actor_progress(handles, q.sink_step, clock, query=q.name, lo=lo,
                              hi=hi, limit=WHY_LATE_LIMIT, key=key)
    return explain(progress, at, step=step, rows=rows, tz=tz, released=released, key=key)
