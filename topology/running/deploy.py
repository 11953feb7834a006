"""The Ray runtime's driver side: put a plan on actors, feed its sources, run it.

Every stage of a :class:`~topology.planning.planner.Plan` becomes one
:class:`~actors.shell.OperatorShell` actor (``ray.remote`` applied here, with the explicit
options of :data:`actors.shell.ACTOR_OPTIONS`), told what it hosts by a frozen
:class:`~actors.stage_config.StageConfig` (:func:`stage_config`). The sources are fed in
batches of pre-serialized bytes with at most ``max_in_flight`` batches unanswered
(:mod:`topology.running.feeding`), then the end of input, which travels through the plan behind the
data. A deployed query first claims its name (:mod:`topology.running.claims`). Neither entry point
changes the plan it is given: what a run needs changed (the sink of ``history=True``, the
stages ``collect()`` runs) is a new plan (:func:`with_history`, :func:`_without_sink`).

* :func:`collect_plan` (``Stream.collect()``) runs a plan to the end and returns the output.
  It borrows warm, anonymous actors from a per-session pool and hands them back reset, so a
  test suite or a notebook does not pay an actor start (~1 s, ~150 MB) per query.
* :func:`deploy_plan` (``Stream.deploy(name)``) starts a live query: named, detached actors in
  namespace ``cedar`` (``<query>/<step>``), sources fed by background threads, and a
  :class:`~topology.running.query.Query` handle; ``Stream.published(name)`` sources subscribe to the
  publisher's sink (dynamic composition).

Both take ``checkpoint_dir``: the query then runs under an :class:`actors.supervisor.Supervisor`
(checkpoints at barrier epochs every ``checkpoint_every`` batches per source, restart from the
newest complete epoch when an actor dies, replay, no duplicate output; see that module).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from actors import checkpoint as ck
from actors.config import ShellConfig
from actors.host import save_job
from actors.stage_config import StageCheckpoint, StageConfig
from actors.wire import decode
from operators.columns import expand
from operators.errors import OperatorError
from operators.events import Message
from operators.publish import Publish
from topology.building import nodes as n
from topology.planning.planner import Plan
from topology.planning.routing import Router
from topology.running.claims import claim_name, name_taken, replace_query
from topology.running.feeding import (
    DRIVER_FED,
    FeedJob,
    driver_sources,
    encoder,
    fed_by_cluster,
    feed_round_robin,
)
from topology.running.inline import Collected, report_of, source_batches
from topology.running.progress import KEY_TABLE, actor_progress
from topology.running.query import HostRunner, Query, QueryFailed
from topology.running.registry import (
    FETCH_WAIT_S,
    HEAD_RESOURCE,
    HOST_STEP,
    NAMESPACE,
    actor_name,
    actor_states,
    ensure_ray,
    kill_actor,
    list_queries,
    step_actor,
    unsubscribe,
)
from topology.running.savepoints import cut_streams, resuming, wake_streams

#: Messages (or source rows) per batch (the default of :class:`actors.config.ShellConfig`,
#: which holds every actor setting's default).
DEFAULT_BATCH = ShellConfig.batch_size
#: Idle actors kept warm for collect().
POOL_LIMIT = 24


_SHELL: Any = None


def shell_class() -> Any:
    """The remote actor class: the plain shell with ``ray.remote`` applied once."""
    global _SHELL
    if _SHELL is None:
        import ray

        from actors.shell import ACTOR_OPTIONS, OperatorShell

        _SHELL = ray.remote(**ACTOR_OPTIONS)(OperatorShell)
    return _SHELL


class _Pool:
    """Warm anonymous shells of this Ray session for collect()."""

    def __init__(self) -> None:
        self.session: tuple[str, str] | None = None
        self.idle: list[Any] = []
        self.lock = threading.Lock()

    def _check_session(self) -> None:
        """Forget the shells of an earlier Ray session: a new local instance starts its job
        ids afresh (its first driver is job 01000000 again), its node ids do not."""
        import ray

        context = ray.get_runtime_context()
        session = (context.get_job_id(), context.get_node_id())
        if session != self.session:
            self.session, self.idle = session, []

    def take(self, k: int) -> list[Any]:
        with self.lock:
            self._check_session()
            got, self.idle = self.idle[:k], self.idle[k:]
        return got + [shell_class().remote() for _ in range(k - len(got))]

    def give(self, handles: list[Any]) -> None:
        import ray

        ray.get([h.reset.remote() for h in handles])
        with self.lock:
            self._check_session()
            keep = max(0, POOL_LIMIT - len(self.idle))
            self.idle.extend(handles[:keep])
        for h in handles[keep:]:
            ray.kill(h)

    def release(self) -> None:
        import ray

        with self.lock:
            idle, self.idle = self.idle, []
        if ray.is_initialized():
            for h in idle:
                ray.kill(h)


POOL = _Pool()


def release_pool() -> None:
    """Kill the warm actors collect() keeps (they also die with the Ray session)."""
    POOL.release()


# -- configuring and feeding ---------------------------------------------------------------------
def _configure(plan: Plan, handles: dict[str, Any], settings: ShellConfig,
               sink_info: dict[str, Any], ckpt: tuple[str, str] | None = None,
               restore: int = 0) -> None:
    """Configure every stage (its :func:`stage_config`, one call each, awaited together);
    with ``ckpt`` = (directory, query) the stages checkpoint, and with ``restore`` > 0 they
    resume from that epoch's files."""
    import ray

    ray.get([handles[step].configure.remote(
        stage_config(plan, step, handles, settings, sink_info, ckpt, restore))
        for step in plan.stages])


def stage_config(plan: Plan, step: str, handles: dict[str, Any], settings: ShellConfig,
                 sink_info: dict[str, Any], ckpt: tuple[str, str] | None = None,
                 restore: int = 0) -> StageConfig:
    """What the actor of ``step`` is told of its stage (:class:`~actors.stage_config.StageConfig`):
    its processor's factory, its input edges, a router over its out-edges with their actors
    (``handles``, by step), the actor settings; the sink also gets ``sink_info`` (the query's
    manifest). With ``ckpt`` = (directory, query) it checkpoints there, and with ``restore``
    > 0 it resumes from that epoch's file."""
    st, edges = plan.stages[step], plan.edges[step]
    checkpoint = restore_from = None
    if ckpt is not None:
        checkpoint = StageCheckpoint(ckpt[0], ckpt[1], sink=step == plan.sink)
        if restore:
            restore_from = ck.stage_path(ckpt[0], ckpt[1], restore, step)
    return StageConfig(
        step=step, query=sink_info.get("query", ""), factory=st.factory,
        describe=st.describe, n_in=plan.in_edges(step),
        router=Router(edges), handles={e.dst: handles[e.dst] for e in edges},
        rows=isinstance(st.source, n.FromRows), info=sink_info if step == plan.sink else {},
        settings=settings, checkpoint=checkpoint, restore=restore_from)


def with_history(plan: Plan) -> Plan:
    """``plan`` whose sink keeps the final rows too (``deploy(..., history=True)``): a new
    plan with a new sink stage; ``plan`` itself is left as it was (the caller may deploy or
    explain it again)."""
    sink = dataclasses.replace(plan.stages[plan.sink],
                               factory=functools.partial(Publish, "sink", history=True))
    return dataclasses.replace(plan, stages={**plan.stages, plan.sink: sink})


def _traced(settings: ShellConfig, plan: Plan, trace: Any) -> ShellConfig:
    """``trace=`` (a :class:`topology.Trace` or a directory): every actor records its
    step into its own parquet parts; the plan goes to ``plan.json`` now."""
    from actors.recorder import TraceSettings

    t = TraceSettings.of(trace)
    if t is None:
        return settings
    from topology.running.tracing import write_plan

    write_plan(t, plan, runtime="ray")
    return settings.with_trace(t)


def _subscribe_published(plan: Plan, handles: dict[str, Any],
                         query: str) -> list[tuple[str, str]]:
    """Attach every ``published(name)`` source to its publisher; returns (publisher, token)."""
    import ray

    subs: list[tuple[str, str]] = []
    for step in plan.sources:
        src = plan.stages[step].source
        if isinstance(src, n.Published):
            try:
                pub = step_actor(actor_name(src.query, "sink"))
            except ValueError:
                raise ValueError(
                    f"{step}: no running query is named {src.query!r}; deploy it first with "
                    f"Stream.deploy({src.query!r}) (running: {', '.join(list_queries())})"
                ) from None
            token = f"{query}/{step}"
            ray.get(pub.subscribe.remote(token, handles[step], 0))
            subs.append((src.query, token))
    return subs


# -- the two entry points ----------------------------------------------------------------------
def collect_plan(plan: Plan, *, batch_size: int | None = None,
                 max_in_flight: int | None = None, flush_ms: float | None = None,
                 timeout_s: float | None = None, reuse: bool = True,
                 on_messages: Callable[[list[Message]], Any] | None = None,
                 checkpoint_dir: str | None = None,
                 checkpoint_every: int | None = None,
                 trace: Any = None, columns: bool = False) -> Collected:
    """Run ``plan`` on Ray to the end of its sources; return the output messages (or, with
    ``on_messages``, hand each fetched batch to it as it arrives and return none), as a
    :class:`~topology.running.inline.Collected` that also holds the run's dead letters, late events
    and source accounting, read from the actors before they are handed back. With
    ``columns`` the sink's column batches come as they are, else expanded into inserts.

    An error in any actor is raised here as :class:`~operators.errors.OperatorError` naming
    the step. ``reuse`` borrows warm actors from the session's pool. With ``checkpoint_dir``
    the run survives the death of its actors (fresh actors, not pooled; see
    :func:`deploy_plan`).

    ``batch_size``, ``max_in_flight``, ``flush_ms`` and ``checkpoint_every`` (None: the
    default) make the :class:`~actors.config.ShellConfig` of the actors; a bad one is
    refused here, naming it, before anything starts.
    """
    import ray

    settings = ShellConfig.of(batch_size=batch_size, max_in_flight=max_in_flight,
                              flush_ms=flush_ms, checkpoint_every=checkpoint_every)
    ensure_ray()
    settings = _traced(settings, plan, trace)
    if checkpoint_dir is not None:
        return _collect_checkpointed(plan, settings, checkpoint_dir, timeout_s, on_messages)
    if trace is None:
        plan = _without_sink(plan)
    steps = list(plan.stages)
    actors = POOL.take(len(steps)) if reuse else [shell_class().remote() for _ in steps]
    handles = dict(zip(steps, actors))
    name = f"collect-{uuid.uuid4().hex[:8]}"
    subs: list[tuple[str, str]] = []
    clean = False
    try:
        _configure(plan, handles, settings, {"query": name})
        sink = handles[plan.sink]
        pull = ray.get(sink.open_pull.remote())
        subs = _subscribe_published(plan, handles, name)
        feed_round_robin(plan, handles, settings)
        out: list[Message] = []
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            blob, finished, error = ray.get(sink.fetch.remote(pull, FETCH_WAIT_S))
            # the sink passes column batches on as they are
            msgs: list[Any] = decode(blob) if columns else list(expand(decode(blob)))
            if on_messages is None:
                out.extend(msgs)
            elif msgs:
                on_messages(msgs)
            if error is not None:
                raise OperatorError(f"query failed in {error}")
            if finished:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"collect(): the query did not finish within {timeout_s} s")
        report = report_of(plan, _actor_records(handles))
        progress = actor_progress(handles, plan.sink, plan.clock, query="collect()", ended=True,
                                  table=KEY_TABLE)
        clean = True
        return Collected(out, report, progress if on_messages is None else None)
    finally:
        unsubscribe(subs)
        if reuse and clean:
            POOL.give(actors)
        else:
            for h in actors:
                ray.kill(h)


def _actor_records(handles: dict[str, Any]) -> dict[str, tuple[Any, list[Any], list[Any]]]:
    """Every step's ``(source counters or None, dead letters, late events)``, from its actor
    (:meth:`~actors.shell.OperatorShell.stats`, then ``records`` of the steps that have any):
    what ``Query.dead_letters()``/``late()``/``stats()`` give a deployed query."""
    import ray

    steps = list(handles)
    stats = ray.get([handles[s].stats.remote() for s in steps])
    asks = [(s, kind) for s, st in zip(steps, stats) for kind in ("dead_letters", "late")
            if st[kind]]
    got = dict(zip(asks, ray.get([handles[s].records.remote(k) for s, k in asks])))
    return {s: (st.get("source"), list(got.get((s, "dead_letters"), ())),
                list(got.get((s, "late"), ()))) for s, st in zip(steps, stats)}


def _without_sink(plan: Plan) -> Plan:
    """``plan`` for collect(): its last operator's output goes straight to the driver. The
    sink (:class:`~operators.publish.Publish`) passes its input on unchanged and keeps the
    alive rows for snapshots and composed queries, which a collect() has none of; as a stage
    it cost a hop and an actor (decoding, keeping and re-encoding every output row)."""
    (root,) = (src for src, es in plan.edges.items() if any(e.dst == plan.sink for e in es))
    edges = {step: [e for e in es if e.dst != plan.sink] for step, es in plan.edges.items()
             if step != plan.sink}
    stages = {step: st for step, st in plan.stages.items() if step != plan.sink}
    return Plan(stages, edges, plan.sources, root, plan.logical)


def _collect_checkpointed(plan: Plan, settings: ShellConfig, root: str,
                          timeout_s: float | None,
                          on_messages: Callable[[list[Message]], Any] | None) -> Collected:

    name = f"collect-{uuid.uuid4().hex[:8]}"
    sup = _supervise(plan, name, settings, root, info={"query": name}).start()
    try:
        if not sup.wait(timeout_s):
            raise TimeoutError(f"collect(): the query did not finish within {timeout_s} s")
        if sup.error is not None:
            raise OperatorError(sup.error)
        report = report_of(plan, _actor_records(sup.current_handles()))
        if on_messages is not None:
            if sup.output:
                on_messages(list(sup.output))
            return Collected((), report)
        progress = actor_progress(sup.current_handles(), plan.sink, plan.clock,
                                  query="collect()", ended=True, table=KEY_TABLE)
        return Collected(sup.output, report, progress)
    finally:
        sup.stop(kill=True)
        ck.forget(ck.normalize(root), name)


def _kill(handles: Iterable[Any]) -> None:
    import ray

    if not ray.is_initialized():
        # (at exit, after ray.shutdown(): a call would start Ray again, or join whatever
        # cluster /tmp/ray last recorded, and hang there when it is gone)
        return
    for h in handles:
        try:
            kill_actor(h)
        except Exception:  # noqa: BLE001 - dead already
            pass


def _edges(plan: Plan) -> dict[str, list[str]]:
    """step -> the steps its output goes to (the topology the manifest records)."""
    return {step: [e.dst for e in edges] for step, edges in plan.edges.items()}


def _placement(placement: str | dict[str, str]) -> Callable[[str], dict[str, Any]]:
    """The Ray scheduling options of each step's actor. ``"spread"`` (the default) deals the
    steps round robin over the cluster's alive nodes, in node id order; ``"pack"`` leaves them
    to Ray's default policy (which fills one node first); ``{step: node_id}`` pins those steps
    to nodes and spreads the others. A query restarted after a node was lost is spread over the
    nodes alive then."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if placement == "pack":
        return lambda step: {"scheduling_strategy": "DEFAULT"}
    pins = placement if isinstance(placement, dict) else {}
    if not isinstance(placement, dict) and placement != "spread":
        raise ValueError(f"placement={placement!r}: use 'spread', 'pack' or a dict "
                         f"{{step: node_id}} (node ids: ray.nodes())")
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    dealt: dict[str, str] = {}

    def options(step: str) -> dict[str, Any]:
        if step in pins:
            return {"scheduling_strategy": NodeAffinitySchedulingStrategy(pins[step], soft=False)}
        node = dealt.setdefault(step, nodes[len(dealt) % len(nodes)])
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}

    return options


@dataclasses.dataclass
class _SupervisedJob:
    """A checkpointed query's driver side: its :class:`~actors.supervisor.Supervisor`, run
    in the query's host actor (``deploy``) or in this driver (``collect``)."""

    plan: Plan
    name: str
    settings: ShellConfig
    root: str
    info: dict[str, Any]
    named: bool = False
    detached: bool = False
    placement: str | dict[str, str] = "spread"
    #: the token of the run's claim on its name (:func:`claim_name`), for deployed queries
    claim: str | None = None
    #: (epoch, rounds, output position) of the savepoint the run starts from, else zeros
    base: tuple[int, int, int] = (0, 0, 0)

    def start(self, resume: bool = False) -> Any:
        from actors.supervisor import Supervisor

        sup = Supervisor(name=self.name, steps=list(self.plan.stages), sink=self.plan.sink,
                         root=self.root, start_actors=self.start_actors,
                         configure=self.configure, feeds_from=self.feeds_from,
                         settings=self.settings, manifest=self.info, base=self.base,
                         at_cut=functools.partial(cut_streams, self.plan),
                         wake=functools.partial(wake_streams, self.plan))
        try:
            sup.start(resume)
        except BaseException:
            sup.stop(kill=True)
            raise
        return sup

    def start_actors(self, generation: int) -> dict[str, Any]:
        """Fresh actors for every step, replacing any of the query's still alive. A
        deployed run first checks that it still holds its name: a run that was stopped or
        replaced meanwhile starts nothing (:meth:`check_claim`)."""
        import ray

        place, cls = _placement(self.placement), shell_class()  # over the nodes alive now
        if not self.named:
            return {s: cls.options(**place(s)).remote() for s in self.plan.stages}
        self.check_claim()
        if generation == 0:  # a new run: the claim made sure no actor has these names
            lifetime = "detached" if self.detached else None
            return _named_shells(self.name, list(self.plan.stages), lifetime, place)
        handles = {}
        lifetime = "detached" if self.detached else None
        for s in self.plan.stages:
            name = actor_name(self.name, s)
            try:
                _kill([ray.get_actor(name, namespace=NAMESPACE)])
            except ValueError:
                pass  # none
            deadline = time.monotonic() + 30
            while True:  # the name of a killed actor is freed shortly after its death
                try:
                    handles[s] = cls.options(name=name, namespace=NAMESPACE,
                                             lifetime=lifetime, **place(s)).remote()
                    break
                except ValueError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        return handles

    def check_claim(self) -> None:
        """Raise :class:`~topology.running.query.QueryFailed` if this run no longer holds its name's
        claim (:func:`claim_name`): it was stopped, or replaced by ``deploy(..., replace=True)``."""
        if self.claim is None:
            return
        held = ck.read_claim(self.root, self.name) or {}
        if held.get("token") != self.claim:
            raise QueryFailed(self.name, HOST_STEP, "the query was stopped or replaced by "
                              "another deploy of its name while it was recovering; this run "
                              "starts no actor again")

    def configure(self, handles: dict[str, Any], restore: int) -> None:
        _configure(self.plan, handles, self.settings, self.info, (self.root, self.name), restore)

    def feeds_from(self, rounds: int) -> list[tuple[str, Iterator[Any]]]:
        """Every fed source read from its beginning, its first ``rounds`` rounds skipped;
        a Spark stream goes on from its checkpoint instead (where a savepoint cut it:
        :func:`~topology.running.savepoints.cut_streams`)."""
        plan, size = self.plan, self.settings.batch_size
        # round robin, each source gave one batch a round: `rounds` each (or all it had)
        return [(s, map(encoder(plan, s), source_batches(
                    plan, s, size, skip=0 if resuming(plan, s) else rounds)))
                for s in driver_sources(plan)]


def _supervise(plan: Plan, name: str, settings: ShellConfig, root: str,
               **options: Any) -> _SupervisedJob:
    """The job of ``plan`` under a checkpointing supervisor (not started)."""
    if any(isinstance(plan.stages[s].source, n.Published) for s in plan.sources):
        raise ValueError("checkpoint_dir: a query that reads a published() query cannot be "
                         "checkpointed (the publisher's stream cannot be replayed); run it "
                         "without checkpoint_dir")
    return _SupervisedJob(plan, name, settings, ck.normalize(root), **options)


def _start_host(name: str, job: Any, *, detached: bool, restartable: bool) -> Any:
    """Start the query's host actor (:mod:`actors.host`) on the head node, running ``job``
    (for a restartable host: the location where ``job`` is saved)."""
    import ray

    from actors.host import HOST_OPTIONS, QueryHost

    cls: Any = ray.remote(**HOST_OPTIONS)(QueryHost)
    host = cls.options(name=actor_name(name, HOST_STEP), namespace=NAMESPACE,
                       lifetime="detached" if detached else None,
                       max_restarts=-1 if restartable else 0,
                       resources={HEAD_RESOURCE: 0.001}).remote(job)
    try:
        ray.get(host.ping.remote())
    except ray.exceptions.RayActorError as exc:
        raise OperatorError(f"deploy({name!r}): the query's host failed to start: "
                            f"{exc}") from None
    return host


def deploy_plan(plan: Plan, name: str, *, detached: bool = True, history: bool = False,
                batch_size: int | None = None, max_in_flight: int | None = None,
                flush_ms: float | None = None, checkpoint_dir: str | None = None,
                checkpoint_every: int | None = None,
                placement: str | dict[str, str] = "spread", trace: Any = None,
                replace: bool = False, hold: bool = False, hosts: Any = None,
                restore: str | None = None) -> Any:
    """Start ``plan`` as the live query ``name`` and return its
    :class:`~topology.running.query.Query`.

    A name belongs to one query until that query is stopped: a deploy of a name that a query
    holds — running, finished but not stopped, or recovering (Ray restarting its host) — is
    refused with :class:`~topology.running.query.NameTaken`, and touches nothing of it. With
    ``replace`` the query holding the name is stopped first, completely (its host and every
    actor confirmed dead), and only then are its files replaced.

    ``placement`` puts the actors on the cluster's nodes: ``"spread"`` (default), ``"pack"``
    or ``{step: node_id}`` pins (see :func:`_placement`); ``Query.stats()`` and
    ``cedar inspect`` show each step's node.

    Actors are named ``<name>/<step>`` in namespace ``cedar`` (``detached``: they outlive this
    driver, until ``Query.stop()`` or the cluster's end). With ``history`` the sink keeps the
    final rows too, so ``snapshot()`` returns the whole output CHT, not only the alive rows.

    The sources are fed from the cluster, by the query's host actor ``<name>/~host`` on the
    head node (:mod:`actors.host`), so the query runs on after this process exits. Only a
    source that no other process can read (a generator, a Spark DataFrame) is fed by this
    process, as ``explain()`` and ``cedar inspect`` say.

    With ``checkpoint_dir`` (a directory every node of the cluster can reach, or a storage
    URI such as ``s3://bucket/prefix``: see :mod:`actors.checkpoint`) the query checkpoints
    every ``checkpoint_every`` batches per source and restarts from its last complete
    checkpoint when an actor or a node is lost; ``Query.stats()`` reports the recoveries.
    Its supervisor runs in the host, which Ray restarts if it is lost (it resumes from the
    checkpoints), and keeps the output, which ``Query.output()`` returns in any process.

    With ``trace`` (a :class:`topology.Trace` or a directory) every step records the
    messages it sees; each actor writes its parquet parts when it has many rows, at the end
    of its input, and on ``Query.flush_trace()`` / ``Query.stop()``.

    With ``hold`` the query's actors (and its host) are started and configured, but no
    source is fed until :meth:`Query.start() <topology.running.query.Query.start>`: several queries
    can be put in place first and then run together, their start-up apart from their run
    (``cedar demo`` times them so). The sources this process feeds are opened and their
    first batch read before ``deploy`` returns (up to ``PRIME_S``: a Spark source plans its
    read then), and the actors import what their first batch would. Not with
    ``checkpoint_dir``.

    With ``hosts`` (a :class:`~topology.running.step_hosts.StepHosts`) every step runs in a slot of
    a shared host actor instead of an actor of its own: many idle queries cost what their
    hosts' few processes cost (:mod:`topology.running.step_hosts`). Not detached, its slots are
    freed when this process exits. Not with ``checkpoint_dir`` (a host lost takes every
    query it holds).

    With ``restore`` (a savepoint's location, written by ``Query.stop(savepoint=PATH)``)
    every step starts from its state in the savepoint and the sources from where it cut
    them (read again from their beginning, the batches fed before the cut skipped). Needs
    ``checkpoint_dir``; its sources must be the savepoint's and re-readable. In a changed
    plan a step keeps the state of the savepoint's step with its fingerprint, a new or
    changed stateless step starts fresh, and a new or changed step holding state is refused
    naming it (:mod:`topology.running.savepoints`, :mod:`topology.running.upgrades`).

    ``batch_size``, ``max_in_flight``, ``flush_ms`` and ``checkpoint_every`` (None: the
    default) make the :class:`~actors.config.ShellConfig` of the actors; a bad one is
    refused here, naming it, before anything starts.
    """
    restored = None  # (location, record) of the savepoint
    if restore is not None:
        if checkpoint_dir is None:
            raise ValueError(f"deploy({name!r}, restore={restore!r}): a query restored from a "
                             f"savepoint runs checkpointed: give checkpoint_dir= too (where "
                             f"it checkpoints from then on)")
        from actors.savepoints import inside_checkpoints
        from topology.running.savepoints import check

        if inside_checkpoints(ck.normalize(restore), ck.normalize(checkpoint_dir), name):
            raise ValueError(f"deploy({name!r}, restore={restore!r}): the savepoint is inside "
                             f"the checkpoint folder of {name!r}, which this deploy deletes "
                             f"first; move it out, or give another checkpoint_dir")
        restored = (ck.normalize(restore), check(plan, name, restore, batch_size))
        batch_size = restored[1]["batch_size"]
    if hold and checkpoint_dir is not None:
        raise ValueError(f"deploy({name!r}): hold=True is for queries without checkpoint_dir "
                         f"(a checkpointed query's supervisor starts feeding at once); "
                         f"deploy it without hold")
    if not name or "/" in name:
        raise ValueError(f"deploy({name!r}): a query name must be non-empty and without '/'")
    if hosts is not None and checkpoint_dir is not None:
        raise ValueError(f"deploy({name!r}): hosts= is for queries without checkpoint_dir (a "
                         f"checkpointed query restarts its own actors after a failure); deploy "
                         f"it without hosts")
    settings = ShellConfig.of(batch_size=batch_size, max_in_flight=max_in_flight,
                              flush_ms=flush_ms, checkpoint_every=checkpoint_every)
    ensure_ray()
    root = None if checkpoint_dir is None else ck.normalize(checkpoint_dir)
    fed = driver_sources(plan)
    local = [s for s in fed if not fed_by_cluster(plan, s)]
    if replace:
        replace_query(name, root)
    token = claim_name(name, root, bool(local))
    try:
        return _deploy(plan, name, settings, root, fed, local, token, detached=detached,
                       history=history, placement=placement, trace=trace, hold=hold,
                       hosts=hosts, restore=restored)
    except BaseException:
        if root is not None:
            ck.release_claim(root, name, token)
        raise


def _deploy(plan: Plan, name: str, settings: ShellConfig, root: str | None, fed: list[str],
            local: list[str], token: str, *, detached: bool, history: bool,
            placement: str | dict[str, str], trace: Any, hold: bool = False,
            hosts: Any = None, restore: tuple[str, dict[str, Any]] | None = None) -> Any:
    """:func:`deploy_plan` once the name is claimed; ``restore``: (location, record) of the
    savepoint it starts from."""
    import ray

    from topology.planning.plan import (
        own_fingerprints,
        plan_fingerprint,
        source_fingerprints,
        step_fingerprints,
    )

    settings = _traced(settings, plan, trace)
    if history:
        plan = with_history(plan)
    info: dict[str, Any] = {"query": name,
                            "actors": {s: actor_name(name, s) for s in plan.stages},
            "edges": _edges(plan), "explain": plan.explain(), "created": time.time(),
            "sink": plan.sink, "host": actor_name(name, HOST_STEP),
            "fed_by_driver": local, "claim": token, "clock": plan.clock,
            "fingerprints": step_fingerprints(plan), "fingerprint": plan_fingerprint(plan),
            "own_fingerprints": own_fingerprints(plan),
            "source_fingerprints": source_fingerprints(plan),
            "subscriptions": [(plan.stages[s].source.query, f"{name}/{s}")  # type: ignore[union-attr]
                              for s in plan.sources
                              if isinstance(plan.stages[s].source, n.Published)]}
    if local:
        info["explain"] += "\n" + DRIVER_FED.format(steps=", ".join(local))
    if root is not None:
        info["checkpoint_dir"] = root
        base = (0, 0, 0) if restore is None else (
            restore[1]["epoch"], restore[1]["rounds"], restore[1]["output_position"])
        job = _supervise(plan, name, settings, root, info=info, named=True, detached=detached,
                         placement=placement, claim=token, base=base)
        # a new run: the files of an earlier run under this name (epochs, saved output)
        # must not be taken for this one's on a restart (the claim says no query holds them)
        ck.forget(job.root, name)
        if restore is not None:  # the savepoint is its first complete epoch
            from actors.savepoints import seed

            seed(restore[0], job.root, name, restore[1])
        if local:  # the supervisor must read those sources: it runs here
            sup = job.start()
            return Query(name, sup.handles, sink=plan.sink, explain=info["explain"],
                         supervisor=sup, claim=(root, token))
        location = ck.job_path(job.root, name)
        save_job(location, job)
        host = _start_host(name, location, detached=detached, restartable=True)
        return Query(name, ray.get(host.call.remote("current_handles")), sink=plan.sink,
                     explain=info["explain"], host=host, claim=(root, token))
    if hosts is None:
        lifetime = "detached" if detached else None
        handles = _named_shells(name, list(plan.stages), lifetime, _placement(placement))
    else:
        handles = _hosted_shells(name, list(plan.stages), hosts, detached)
    host = None
    try:
        _configure(plan, handles, settings, info)
        subs = _subscribe_published(plan, handles, name)
        remote = [s for s in fed if s not in local]
        if remote:
            host = _start_host(name, dataclasses.replace(
                FeedJob.of(plan, handles, remote, settings), held=hold),
                detached=detached, restartable=False)
    except BaseException:
        _kill(handles.values())
        raise
    feed_job = dataclasses.replace(FeedJob.of(plan, handles, local, settings), held=hold)
    feeding = [feed_job.start(),
               None if host is None else HostRunner(host)]
    return Query(name, handles, sink=plan.sink, explain=info["explain"], host=host,
                 feeding=feeding, subscriptions=subs)


def _named_shells(name: str, steps: list[str], lifetime: str | None,
                  place: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """A new shell actor named ``<name>/<step>`` per step. Creating a named actor is atomic
    in Ray's registry: if another deploy took one of the names meanwhile, the ones made are
    killed and the deploy refused."""
    import ray

    cls, handles = shell_class(), {}
    try:
        for step in steps:
            handles[step] = cls.options(name=actor_name(name, step), namespace=NAMESPACE,
                                        lifetime=lifetime, **place(step)).remote()
    except ray.exceptions.ActorAlreadyExistsError:
        _kill(handles.values())
        raise name_taken(name, actor_states(name)) from None
    return handles


def _hosted_shells(name: str, steps: list[str], hosts: Any, detached: bool) -> dict[str, Any]:
    """A slot of ``hosts`` per step (:meth:`StepHosts.take
    <topology.running.step_hosts.StepHosts.take>`), refused while a query holds ``name``. Not
    ``detached``: the slots are freed when this process exits (the hosts live on)."""
    import atexit

    states = actor_states(name)
    if states:
        raise name_taken(name, states)
    handles: dict[str, Any] = hosts.take(name, steps)
    if not detached:
        atexit.register(_kill, list(handles.values()))
    return handles


