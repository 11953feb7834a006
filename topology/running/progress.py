"""What each step of a query reports of its progress, gathered into a :class:`Progress`: its
output and input CTIs, the wall times of its last CTI advance and last input batch, a source's
AdvanceTime, latest start and late events, whether it is busy or failed. The inline runtime
makes one from its processors (:func:`inline_progress`), Ray from its actors' stats
(:func:`actor_progress`); :mod:`topology.seeing.why` explains a missing output from it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from topology.building.times import TICKS, running_clock

#: Seconds a step busy in one batch is waited for to read its source facts (late events).
FACTS_WAIT_S = 0.5
#: The characters of a payload shown (a late event's).
PAYLOAD_CHARS = 80
#: The slowest keys of a per-key source shown (and those with the most late rows).
KEYS_SHOWN = 5
#: A finished inline run keeps every key's progress of a per-key source with at most this
#: many keys, so that ``why(key=...)`` can answer about any of them.
KEY_TABLE = 10_000

if TYPE_CHECKING:
    from operators.detect_seeing import DetectView
    from operators.ingress import AdvanceTime
    from operators.processor import Processor
    from topology.planning.plan import Plan


def short_payload(value: Any) -> str:
    """A payload as a report shows it: its repr, cut to :data:`PAYLOAD_CHARS`."""
    from operators.detect_seeing import short

    return short(value, PAYLOAD_CHARS, 3)


@dataclass(frozen=True)
class Late:
    """A late event: ``where`` (its source step), ``action`` (``"dropped"`` or
    ``"adjusted"``), its original lifetime ``[start, end)`` (None when its producer cannot
    tell), ``sent`` (the lifetime it was sent with when adjusted), the source's ``reason`` and
    its payload, shortened."""

    where: str
    action: str
    start: int | None
    end: int | None
    sent: tuple[int, int] | None
    reason: str
    payload: str

    def overlaps(self, lo: int, hi: int) -> bool:
        return self.start is not None and self.end is not None and \
            self.start < hi and self.end > lo


@dataclass(frozen=True)
class SourceFacts:
    """What ``why`` reads of a source beyond its stats: its ``advance`` (:class:`AdvanceTime`),
    ``latest`` (the latest start it sent: an idle CTI moves it one tick past), its late
    events (``late``, ``late_count`` of them in all) and the ``shape`` of its events
    (``"point"``, ``"interval"``, ``"edge"``; None: not a rows source)."""

    advance: AdvanceTime | None = None
    latest: int | None = None
    late: tuple[Late, ...] = ()
    late_count: int = 0
    shape: str | None = None
    #: per-key progress (``AdvanceTime(per_key=...)``): the low watermark, the slowest keys
    #: and those with the most late rows (:meth:`operators.ingress_keys.IngressKeys.slowest_keys`)
    keys: dict[str, Any] | None = None


@dataclass(frozen=True)
class StepProgress:
    """One step, as its runtime saw it: its output CTI ``cti``, the CTI of each input port
    ``in_ctis`` (None when the operator does not keep them: its upstream's output CTI stands
    in), the wall time (``time.time()``) of its last output CTI advance ``cti_wall`` and of its
    last input batch ``push_wall``, whether its input ended (``finished``), the input ports that
    ended before the others (``in_ended``: they hold nothing back), the batches it has sent and
    not had taken (``in_flight``), its ``state_size``, and a source's facts. A step inside one
    long batch (or a function that hangs) reports what it last reported: ``busy`` then, and
    ``busy_s`` the seconds its batch has run (None: unknown). ``error``: its failure, if it
    failed (its own, or one that reached it from upstream)."""

    step: str
    describe: str = ""
    cti: int = MIN_TIME
    in_ctis: tuple[int, ...] | None = None
    cti_wall: float | None = None
    push_wall: float | None = None
    finished: bool = False
    in_flight: int = 0
    state_size: int = 0
    source: SourceFacts | None = None
    in_ended: tuple[int, ...] = ()
    busy: bool = False
    busy_s: float | None = None
    error: str | None = None
    #: what each ``detect`` the step runs shows of itself: its oldest partial matches and
    #: its last ended candidate runs (:mod:`operators.detect_seeing`)
    detect: tuple[DetectView, ...] = ()


@dataclass(frozen=True)
class Progress:
    """A query's progress: every step's :class:`StepProgress`, each step's inputs as
    ``(port, upstream step)``, the ``output`` step, the plan's ``clock`` (``"timestamps"`` or
    ``"ticks"``, :mod:`topology.building.times`), whether the run ``ended`` (``collect()``), the
    query's name and when it was taken (``taken``, wall clock)."""

    steps: Mapping[str, StepProgress]
    inputs: Mapping[str, tuple[tuple[int, str], ...]]
    output: str
    clock: str = TICKS
    ended: bool = False
    query: str = ""
    taken: float = field(default_factory=time.time)

    def failed(self) -> tuple[str, str] | None:
        """``(step, error)`` of the step whose own failure failed the query: a failed step
        none of whose inputs failed (a failure travels downstream); None: nothing failed."""
        failed = [s for s, p in self.steps.items() if p.error]
        for s in failed:
            if not any(self.steps[up].error for _, up in self.inputs.get(s, ())
                       if up in self.steps):
                return s, str(self.steps[s].error)
        return (failed[0], str(self.steps[failed[0]].error)) if failed else None

    def upstream(self, step: str) -> set[str]:
        """Every step ``step`` reads from, directly or not (``step`` included)."""
        seen, todo = {step}, [step]
        while todo:
            for _, up in self.inputs.get(todo.pop(), ()):
                if up not in seen:
                    seen.add(up)
                    todo.append(up)
        return seen


# -- the explanation ----------------------------------------------------------------------------


def step_facts(proc: Processor, lo: int = MIN_TIME, hi: int = MAX_TIME,
               limit: int | None = None, key: Any = None, table: int = 0
               ) -> SourceFacts | None:
    """What ``why`` reads of a processor beyond its stats (None: nothing): a source's
    AdvanceTime and latest start, the late events it (or a CTI import) recorded whose
    original lifetimes overlap ``[lo, hi)``, at most ``limit``, and its per-key progress
    (the slowest keys; ``key``'s; every key's when at most ``table``). Read-only; runs in
    the actor (:meth:`actors.shell.OperatorShell.inspect`) or in the process of an inline
    run."""
    from operators.chain import SourceChain
    from operators.sources import RowsSource

    head: Any = proc  # the source of a fused stage (a SourceChain's, a FusedDag's: fused.py)
    while isinstance(head, SourceChain) or getattr(head, "head", None) is not None:
        head = head.stages[0] if isinstance(head, SourceChain) else head.head
    records = list(proc.late)
    if isinstance(head, RowsSource):
        ingress = head.ingress
        # the ingress's latest start sent: its poll() emits an idle CTI one tick past it
        top = ingress._top
        advance, latest = ingress.advance, (top if top > MIN_TIME else None)
        lifetime: Any = ingress.late_lifetime
        shape: str | None = ingress.shape
    elif records:
        advance, latest, lifetime, shape = None, None, _message_lifetime, None
    else:
        return None
    late: list[Late] = []
    for rec in records:
        try:
            span = lifetime(rec)
        except Exception:  # noqa: BLE001 - a row read once already; shown without its time
            span = None
        start, end = span if span is not None else (None, None)
        if limit is not None and len(late) >= limit:
            break
        if start is None or (start < hi and end > lo):  # type: ignore[operator]
            late.append(_late(rec, start, end))
    keys = None
    if isinstance(head, RowsSource) and head.ingress.advance.per_key is not None:
        clock = head.clock
        keys = head.ingress.slowest_keys(KEYS_SHOWN, key, table,
                                         None if clock is None else clock())
    return SourceFacts(advance, latest, tuple(late), len(records), shape, keys)


def detect_views(proc: Processor | None, limit: int | None = None) -> tuple[DetectView, ...]:
    """What each ``detect`` in ``proc`` (it, or a processor it hosts: a fused chain's
    stages, an in-process plan's steps) shows of itself: its ``limit`` oldest partial matches
    (default :data:`operators.detect_seeing.PARTIALS_SHOWN`) and its last ended candidate
    runs. Read-only; runs in the actor (:meth:`actors.shell.OperatorShell.inspect`) or in
    the process of an inline run."""
    from operators.detect import Detect
    from operators.detect_seeing import PARTIALS_SHOWN
    from operators.group_apply import GroupApply

    found: list[DetectView] = []
    todo = [] if proc is None else [proc]
    while todo:
        p = todo.pop()
        if isinstance(p, Detect):
            found.append(p.partial_matches(PARTIALS_SHOWN if limit is None else limit))
        elif isinstance(p, GroupApply):
            found.extend(_group_views(p, PARTIALS_SHOWN if limit is None else limit))
        todo.extend(reversed(list(p.children())))
    return tuple(found)


def _group_views(g: Any, limit: int) -> list[DetectView]:
    """The detect steps of a ``group_apply``'s busy groups, one view per step: each group's
    runs under its group key, the ``limit`` oldest (by deadline) of all groups."""
    import dataclasses

    by_step: dict[str, list[tuple[str, DetectView]]] = {}
    for key, sub in g.busy_groups():
        for v in detect_views(sub, limit):
            by_step.setdefault(v.step, []).append((repr(key), v))
    out = []
    for views in by_step.values():
        partials = sorted((dataclasses.replace(p, key=p.key or k) for k, v in views
                           for p in v.partials), key=lambda p: p.deadline)
        ended = [dataclasses.replace(e, key=e.key or k) for k, v in views for e in v.ended]
        first = views[0][1]
        out.append(dataclasses.replace(
            first, partials=tuple(partials[:limit]), ended=tuple(ended[-limit:]),
            keys=sum(v.keys for _, v in views), looked=sum(v.looked for _, v in views)))
    return out


def step_reads(proc: Processor, lo: int = MIN_TIME, hi: int = MAX_TIME,
               limit: int | None = None, key: Any = None, table: int = 0
               ) -> tuple[SourceFacts | None, tuple[DetectView, ...]]:
    """:func:`step_facts` and :func:`detect_views` of ``proc``, read at once (one control
    call per step)."""
    return step_facts(proc, lo, hi, limit, key, table), detect_views(proc)


def keeps_history(proc: Processor) -> bool:
    """Whether ``proc`` is a sink that keeps its final rows (``history=True``): without it,
    a row is let go once a CTI passes its end, so ``why`` of a final time cannot list it.
    Runs in the sink's actor (:meth:`actors.shell.OperatorShell.inspect`)."""
    from operators.publish import Publish

    return isinstance(proc, Publish) and proc.history


def _message_lifetime(rec: Any) -> tuple[int, int] | None:
    item = rec.item
    return (item.start, item.end) if isinstance(item, (Insert, Retract)) else None


def _late(rec: Any, start: int | None, end: int | None) -> Late:
    sent = rec.event
    item = rec.item
    payload = item.payload if isinstance(item, (Insert, Retract)) else item
    return Late(rec.where, rec.action, start, end,
                None if not isinstance(sent, (Insert, Retract)) else
                (sent.start, sent.new_end if isinstance(sent, Retract) else sent.end),
                rec.reason, short_payload(payload))


def last_cti(messages: list[Any]) -> int | None:
    """The time of the last CTI in ``messages`` (None: none)."""
    for m in reversed(messages):
        if type(m) is Cti:
            return int(m.time)
    return None


def plan_inputs(plan: Plan) -> dict[str, tuple[tuple[int, str], ...]]:
    """Each step's inputs as ``(port, upstream step)``, from the plan's edges."""
    inputs: dict[str, list[tuple[int, str]]] = {}
    for src, edges in plan.edges.items():
        for e in edges:
            inputs.setdefault(e.dst, []).append((e.port, src))
    return {s: tuple(sorted(set(v))) for s, v in inputs.items()}


def inline_progress(plan: Plan, procs: Mapping[str, Processor], ctis: Mapping[str, int],
                    cti_walls: Mapping[str, float], push_walls: Mapping[str, float],
                    ended: bool = True) -> Progress:
    """The :class:`Progress` of an inline run: ``procs`` its processors, ``ctis`` each step's
    output CTI as it left the step and ``cti_walls``/``push_walls`` when it advanced and when
    a source last took a batch (kept by :func:`topology.running.inline.run_inline`)."""
    steps = {}
    for step, proc in procs.items():
        ins = proc.in_ctis
        steps[step] = StepProgress(
            step, plan.stages[step].describe, cti=ctis.get(step, MIN_TIME),
            in_ctis=None if ins is None else tuple(ins), cti_wall=cti_walls.get(step),
            push_wall=push_walls.get(step), finished=ended, state_size=proc.state_size(),
            source=step_facts(proc, table=KEY_TABLE), in_ended=tuple(sorted(proc.in_ended or ())),
            detect=detect_views(proc))
    clock = running_clock(plan.clock, [p.stats for p in procs.values() if p.stats is not None])
    return Progress(steps, plan_inputs(plan), plan.sink, clock, ended=ended, query="collect()")


def actor_progress(handles: Mapping[str, Any], output: str, clock: str, *, query: str = "",
                   ended: bool = False, lo: int = MIN_TIME, hi: int = MAX_TIME,
                   limit: int | None = None, timeout_s: float = 30.0,
                   key: Any = None, table: int = 0) -> Progress:
    """The :class:`Progress` of a plan on Ray, from every actor's ``stats()`` and
    :func:`step_facts` (late events overlapping ``[lo, hi)``, at most ``limit`` per step) and
    :func:`detect_views` (a detect's partial matches and ended runs); a per-key source's
    progress of ``key``, and of every key when it has at most ``table``.
    A step busy in one long batch does not wait for it: it answers from its last report
    (``busy``), without its source facts. A step that does not answer within ``timeout_s``
    (its process stuck) raises :class:`TimeoutError` naming it."""
    import ray

    steps = list(handles)
    stats = _answers(ray, [handles[s].stats.remote() for s in steps], steps, timeout_s,
                     "its stats")
    read = functools.partial(step_reads, lo=lo, hi=hi, limit=limit, key=key, table=table)
    reads = _answers(ray, [handles[s].inspect.remote(read, FACTS_WAIT_S) for s in steps],
                     steps, timeout_s, "its late events")
    inputs: dict[str, set[tuple[int, str]]] = {}
    out = {}
    for step, st, answer in zip(steps, stats, reads):
        f, seen = (None, ()) if answer is None else answer  # (None: busy in one batch)
        for dst, port in st.get("out_edges", ()):
            inputs.setdefault(dst, set()).add((port, step))
        ins = st.get("in_ctis")
        out[step] = StepProgress(
            step, st.get("operator", ""), cti=st["cti"],
            in_ctis=None if ins is None else tuple(ins), cti_wall=st.get("cti_wall"),
            push_wall=st.get("push_wall"), finished=bool(st["finished"]),
            in_flight=int(st.get("in_flight", 0)), state_size=int(st.get("state_size") or 0),
            source=f, in_ended=tuple(st.get("in_ended") or ()), busy=bool(st.get("busy")),
            busy_s=st.get("busy_s"), error=st.get("error"), detect=seen)
    # the plan's clock, or what a source fed by a generator told of its rows as they came
    return Progress(out, {s: tuple(sorted(v)) for s, v in inputs.items()}, output,
                    running_clock(clock, stats), ended=ended, query=query)


def _answers(ray: Any, refs: list[Any], steps: list[str], timeout_s: float,
             what: str) -> list[Any]:
    """``ray.get(refs)`` of one call per step; a step that has not answered after
    ``timeout_s`` raises :class:`TimeoutError` naming it (not Ray's ``GetTimeoutError``)."""
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    late = [s for s, ref in zip(steps, refs) if ref not in done]
    if late:
        raise TimeoutError(f"why: step {late[0]} did not send {what} within {timeout_s:.0f} s "
                           f"(its process is stuck or gone); ask again later")
    return list(ray.get(refs))

