"""The inline runtime: a whole plan executed in one process, without Ray.

:func:`run_inline` hosts every stage of a plan in one :class:`~topology.planning.dag.DagProcessor`,
feeds the sources batch by batch, round robin, then ends them: the reference for the Ray
runtime's results, and for its overhead (nothing here costs more per event than the operators
do).

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> q = Stream.from_events([Insert("a", 0, 1, 3), Insert("b", 0, 1, 4), Cti(1)])
    >>> q.where(lambda p: p % 2 == 0).collect(runtime="inline")
    [Insert(id='b', start=0, end=1, payload=4), Cti(time=1)]
"""

from __future__ import annotations

import datetime as _dt
import itertools
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from actors.config import ShellConfig
from actors.recorder import TraceSettings
from operators.columns import count_events, expand
from operators.events import MIN_TIME, Insert, Message, Retract
from operators.feeds import END, chunks, guarded, round_robin
from topology.building.times import running_clock
from topology.planning.dag import DagProcessor
from topology.running.progress import inline_progress, last_cti

if TYPE_CHECKING:
    from topology.planning.planner import Plan
    from topology.running.progress import Progress
    from topology.seeing.why import Explanation

#: Messages (or rows) per batch fed to a source (the actors' default, :mod:`actors.config`).
DEFAULT_BATCH = ShellConfig.batch_size


class DeadLetterWarning(UserWarning):
    """A run to the end (``collect()``, ``to_spark()``, ``write()``) sent inputs to the dead
    letters instead of the output. Turn it into an error with
    ``warnings.simplefilter("error", DeadLetterWarning)``."""


#: The accounting equation's terms: a rows source (an Ingress) counts rows in all four, a
#: messages source (``from_events``) has no late-event policy, so no dropped or adjusted.
ROW_TERMS = ("processed", "dropped", "adjusted", "dead_lettered")


@dataclass
class RunReport:
    """What a run to the end did with its input, beside its output: ``dead_letters`` (every
    input no step could process, each with its reason, :class:`~operators.errors.DeadLetter`),
    ``late`` (the events sources dropped or adjusted by their late-event policy,
    :class:`~operators.errors.LateEvent`) and ``accounting``: per source step, its counters,
    which obey ``received == processed + dropped + adjusted + dead_lettered`` (docs/errors.md).
    A streaming ``from_spark`` counts the rows of this run (its Ingress runs in the driver)."""

    dead_letters: list[Any] = field(default_factory=list)
    late: list[Any] = field(default_factory=list)
    accounting: dict[str, dict[str, int]] = field(default_factory=dict)

    def equation(self) -> str:
        """The accounting equation of every source, with this run's numbers."""
        parts = []
        for step, c in self.accounting.items():
            terms = [t for t in ROW_TERMS if t in c]
            rhs = " + ".join(f"{t.replace('_', '-')} {c[t]}" for t in terms)
            parts.append(f"{step}: received {c.get('received', 0)} = {rhs}")
        return "; ".join(parts)

    def warning(self, what: str, where: str) -> str | None:
        """The warning of a run with dead letters (None without): how many, the first reason,
        where to read them (``where`` + ``dead_letters``, e.g. ``"collect(...)."``) and the
        accounting."""
        if not self.dead_letters:
            return None
        n = len(self.dead_letters)
        first = self.dead_letters[0]
        reason = str(first.reason)
        if len(reason) > 300:
            reason = reason[:300] + "..."
        return (f"{what}: {n} input{'s' if n != 1 else ''} went to the dead letters, not to "
                f"the output (the first, in {first.where}: {reason}); read them, each with "
                f"its reason, as {where}dead_letters (late events: {where}late). "
                f"Accounting: {self.equation()}")

    def warn(self, what: str, where: str, stacklevel: int = 2) -> None:
        """Warn (:class:`DeadLetterWarning`) if the run has dead letters."""
        text = self.warning(what, where)
        if text is not None:
            warnings.warn(text, DeadLetterWarning, stacklevel=stacklevel + 1)


class Collected(list[Any]):
    """What ``collect()`` returns: the output messages (a list: compare, slice and iterate it
    as one), plus what the run did not output, as attributes: ``dead_letters``, ``late`` and
    ``accounting`` (see :class:`RunReport`; ``report`` gives the three as one).

    >>> import warnings
    >>> from topology import Stream
    >>> with warnings.catch_warnings(record=True) as said:
    ...     warnings.simplefilter("always")
    ...     out = Stream.from_rows([{"t": 1}, {"t": None}], start="t").collect(runtime="inline")
    >>> out
    [Insert(id=0, start=1, end=2, payload={'t': 1}), Cti(time=2)]
    >>> [(d.where, d.item) for d in out.dead_letters]
    [('from_rows#0', {'t': None})]
    >>> out.report.equation()
    'from_rows#0: received 2 = processed 1 + dropped 0 + adjusted 0 + dead-lettered 1'
    >>> print(said[0].message)  # doctest: +ELLIPSIS
    collect(): 1 input went to the dead letters, not to the output (the first, in ...
    ... as collect(...).dead_letters (late events: collect(...).late). Accounting: ...
    """

    dead_letters: list[Any]
    late: list[Any]
    accounting: dict[str, dict[str, int]]
    #: every step's CTIs at the end of the run, for :meth:`why` (None: not recorded)
    progress: Progress | None
    #: the run's token over streaming ``from_spark`` sources with a checkpoint (the same for
    #: a run delivered again after a kill), None without one (``Stream.collect``)
    run: int | None = None

    def commit(self) -> None:
        """``collect(commit=False)``: commit the run of its streaming Spark sources, once the
        rows are stored (nothing to do otherwise, or a second time)."""

    def __init__(self, messages: Iterable[Any] = (), report: RunReport | None = None,
                 progress: Progress | None = None) -> None:
        super().__init__(messages)
        r = report if report is not None else RunReport()
        self.dead_letters, self.late, self.accounting = r.dead_letters, r.late, r.accounting
        self.progress = progress

    @property
    def report(self) -> RunReport:
        return RunReport(self.dead_letters, self.late, self.accounting)

    def why(self, at: Any = None, *, step: str | None = None,
            tz: str | _dt.tzinfo | None = None, key: Any = None) -> Explanation:
        """Why the output at ``at`` (a time: ticks, a datetime or an ISO-8601 string; a
        window ``(start, end)``; None: the output CTI) is final, speculative or not yet
        produced, what held it back at the end of the run (through which steps, from which
        input) and which late events were dropped or adjusted out of it
        (:class:`topology.seeing.why.Explanation`; ``print()`` it). Every ``collect()`` records
        what this needs, inline and on Ray. ``step`` asks about another step's output;
        ``key`` about one key's output where a source has per-key progress (its own CTI).

        >>> from topology import Stream
        >>> rows = [{"t": t} for t in range(10)]
        >>> out = Stream.from_rows(rows, start="t").collect(runtime="inline")
        >>> out.why(5).status, out.why(10).status
        ('final', 'not yet produced')
        """
        from operators.cht import to_cht
        from topology.seeing.why import explain

        if self.progress is None:
            raise ValueError("why(): this result has no record of its run's progress (it was "
                             "not made by collect())")
        out = step is None or step == self.progress.output
        rows = to_cht(m for m in expand(self) if type(m) in (Insert, Retract)) if out else None
        return explain(self.progress, at, step=step, rows=rows, tz=tz, key=key)


def report_of(plan: Plan, records: dict[str, tuple[Any, list[Any], list[Any]]]) -> RunReport:
    """The :class:`RunReport` of a run of ``plan`` from each step's ``(stats, dead_letters,
    late)`` (stats: a source's counters, else None). A source fed by a streaming Spark
    DataFrame counts rows in the driver's Ingress (``run_records()`` of its data): its rows'
    counters and records replace the messages source's counters."""
    report = RunReport()
    for step, (stats, dead, late) in records.items():
        report.dead_letters.extend(dead)
        report.late.extend(late)
        if step in plan.sources and stats is not None:
            report.accounting[step] = dict(stats)
    for step in plan.sources:
        src = plan.stages[step].source
        data = getattr(src, "messages", None)
        run_records = getattr(data, "run_records", None)
        got = run_records() if callable(run_records) else None
        if got is not None:
            report.dead_letters.extend(got["dead_letters"])
            report.late.extend(got["late"])
            report.accounting[step] = dict(got["stats"])
    return report


def procs_records(dag: DagProcessor) -> dict[str, tuple[Any, list[Any], list[Any]]]:
    """Every step's ``(stats, dead_letters, late)`` in an inline run."""
    return {step: (p.stats, list(p.dead_letters), list(p.late)) for step, p in dag.procs.items()}


def feed_of(plan: Plan, step: str) -> Iterable[Any]:
    """What a source stage consumes (:meth:`topology.building.nodes.Node.source_data`): the messages
    of from_events, the rows of from_rows."""
    st = plan.stages[step]
    if st.source is None:
        raise ValueError(f"{step}: {st.describe} is not a source")
    try:
        return cast(Iterable[Any], st.source.source_data())
    except ValueError as e:
        raise ValueError(f"{step}: {e}") from None


def source_batches(plan: Plan, step: str, batch_size: int, skip: int = 0) -> Iterator[Any]:
    """The batches a source stage consumes: its own batches for a batched source (column
    batches of ``from_arrow``/``from_spark``), else lists of ``batch_size`` rows/messages;
    the first ``skip`` left out (a restore's, the batches fed before its savepoint's cut:
    not even read where the data can skip them, a table's). Data that raises while it is
    read raises :class:`~operators.errors.SourceFailed` naming ``step``."""
    src = plan.stages[step].source
    data = feed_of(plan, step)
    batched = getattr(src, "batched", False)
    if skip and batched and callable(getattr(data, "skipping", None)):
        data, skip = data.skipping(skip), 0  # type: ignore[attr-defined]
    items = guarded(data, step, plan.stages[step].describe)
    batches = items if batched else chunks(items, batch_size)
    return itertools.islice(batches, skip, None) if skip else batches


def run_inline(plan: Plan, batch_size: int = DEFAULT_BATCH,
               trace: TraceSettings | None = None, columns: bool = False) -> Collected:
    """Run ``plan`` to the end of its sources in this process; return the output messages
    (a :class:`Collected`: with the run's dead letters, late events and accounting).
    With ``trace`` every step's messages are recorded there (:mod:`actors.recorder`). With
    ``columns`` the sink's column batches are returned as they are (a Spark sink converts them
    column-wise), else expanded into inserts."""
    dag = _Watched(plan, inline_sink=True, trace=trace)
    dag.expand_output = not columns
    if trace is None:
        out = drive(dag, plan, batch_size)[0]
    else:
        from topology.running.tracing import write_plan

        write_plan(trace, plan, runtime="inline")
        try:
            out = drive(dag, plan, batch_size)[0]
        finally:
            for rec in (dag.trace or {}).values():
                rec.flush()
        clock = running_clock(plan.clock, [p.stats or {} for p in dag.procs.values()])
        if clock != plan.clock:  # a generator's rows said their clock as they came
            write_plan(trace, plan, runtime="inline", clock=clock)
    progress = inline_progress(plan, dag.procs, dag.ctis, dag.cti_walls, dag.push_walls)
    return Collected(out, report_of(plan, procs_records(dag)), progress)


class _Watched(DagProcessor):
    """The inline run's plan, noting each step's output CTI as it leaves the step and the
    wall time it advanced, and when each source last took a batch (for ``why``): a look at
    the last CTI of each output batch, as the Ray shell does."""

    def __init__(self, plan: Plan, **options: Any) -> None:
        super().__init__(plan, **options)
        self.ctis: dict[str, int] = {}
        self.cti_walls: dict[str, float] = {}
        self.push_walls: dict[str, float] = {}

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        self.push_walls[self.inputs[port]] = time.time()
        return super().process(batch, port)

    def _forward(self, step: str, res: list[Message], out: list[Message]) -> None:
        t = last_cti(res)
        if t is not None and t > self.ctis.get(step, MIN_TIME):
            self.ctis[step], self.cti_walls[step] = t, time.time()
        super()._forward(step, res, out)


def drive(dag: DagProcessor, plan: Plan, batch_size: int) -> tuple[list[Message], list[int]]:
    """Feed ``dag`` every source of ``plan`` to its end, one batch of each in turn; a source
    that runs out while others still feed ends there (``end_input``, as an actor's input
    ends on Ray), the last one with the end of input (``finish``). Return the output
    messages and the rows (or messages) fed per source."""
    feeds = [source_batches(plan, s, batch_size) for s in dag.inputs]
    fed = [0] * len(feeds)
    out: list[Message] = []
    ended = 0
    try:
        for round_ in round_robin(feeds):
            for port, batch in round_:
                if batch is not END:
                    fed[port] += count_events(batch)
                    out.extend(dag.process(batch, port))
                else:
                    ended += 1
                    if ended < len(feeds):
                        out.extend(dag.end_input(port))
    finally:
        close_feeds(feeds)
    out.extend(dag.finish())
    return out, fed


def close_feeds(feeds: Iterable[Any]) -> None:
    """Close the feeds that are generators, now rather than when they are collected: a
    streaming source releases its Spark query (and leaves its last micro-batch uncommitted)
    as soon as a run stops, even on an error."""
    for feed in feeds:
        close = getattr(feed, "close", None)
        if close is not None:
            close()
