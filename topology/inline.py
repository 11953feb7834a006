"""The inline runtime: a whole plan executed in one process, without Ray.

:class:`DagProcessor` hosts every stage of a :class:`~topology.planner.Plan` and pushes each
output batch straight into the stages it feeds (depth first, so every input port sees its
messages in order). It is itself a :class:`~operators.base.Processor` with one input port per
source, which makes it the sub-query of a ``group_apply`` too. :func:`run_inline` feeds the
sources batch by batch, round robin, then ends them: the reference for the Ray runtime's
results, and for its overhead (nothing here costs more per event than the operators do).

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> q = Stream.from_events([Insert("a", 0, 1, 3), Insert("b", 0, 1, 4), Cti(1)])
    >>> q.where(lambda p: p % 2 == 0).collect(runtime="inline")
    [Insert(id='b', start=0, end=1, payload=4), Cti(time=1)]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from actors.trace import Recorder, Trace
from operators.base import Processor
from operators.columns import count_events, expand
from operators.events import Message
from operators.feeds import END, chunks, round_robin
from operators.sources import Passthrough

from . import nodes as n
from .routing import Router

if TYPE_CHECKING:
    from .planner import Plan

#: Messages (or rows) per batch fed to a source.
DEFAULT_BATCH = 4096


class DagProcessor(Processor):
    """All stages of a plan in one process; input port ``i`` feeds ``plan.sources[i]``."""

    _parts = ("procs",)  # step -> processor

    def __init__(self, plan: Plan, name: str | None = None, inline_sink: bool = False,
                 trace: Trace | None = None) -> None:
        super().__init__(name or "plan")
        self.plan = plan
        self.procs: dict[str, Processor] = {}
        for step, st in plan.stages.items():
            # the inline runtime needs no alive-set bookkeeping at its output
            self.procs[step] = (Passthrough(step) if inline_sink and st.role == "sink"
                                else st.factory())
        self.routes = {step: (Router(es), es) for step, es in plan.edges.items()}
        self.inputs = list(plan.sources)
        self.n_inputs = len(self.inputs)
        self.sink = plan.sink
        #: whether column batches leaving the sink are expanded into inserts
        self.expand_output = True
        #: step -> its trace recorder (None: tracing off; see :mod:`actors.trace`)
        self.trace: dict[str, Recorder] | None = None
        if trace is not None:
            self.trace = {step: Recorder(trace, step, proc) for step, proc in self.procs.items()
                          if trace.traces(step)}

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        out: list[Message] = []
        msgs = batch if isinstance(batch, (list, dict)) else list(batch)
        self._push(self.inputs[port], 0, msgs, out)
        return out

    def _push(self, step: str, port: int, msgs: list[Any], out: list[Message]) -> None:
        if self.trace is None:
            res = self.procs[step].process(msgs, port)
        else:
            res = self._traced(step, port, msgs)
        if res:
            self._forward(step, res, out)

    def _traced(self, step: str, port: int, msgs: list[Any]) -> list[Message]:
        rec = self.trace[step] if self.trace is not None and step in self.trace else None
        if rec is None:
            return self.procs[step].process(msgs, port)
        rows = isinstance(self.plan.stages[step].source, n.FromRows)
        return rec.process(self.procs[step], msgs, port, inputs=not rows)

    def _forward(self, step: str, res: list[Message], out: list[Message]) -> None:
        if step == self.sink:
            out.extend(expand(res) if self.expand_output else res)
            return
        router, edges = self.routes[step]
        for e, part in zip(edges, router.route(res)):
            if part:
                self._push(e.dst, e.port, part, out)

    def finish(self) -> list[Message]:
        """End of input: every stage flushes (sources emit their final CTI), in plan order."""
        out: list[Message] = []
        for step, proc in self.procs.items():
            res = proc.finish()
            if res and self.trace is not None and step in self.trace:
                self.trace[step].record("out", 0, res)
            if res:
                self._forward(step, res, out)
        return out

    def children(self) -> Iterable[Processor]:
        return self.procs.values()

    def state_size(self) -> int:
        return sum(p.state_size() for p in self.procs.values())

    def _check(self) -> None:
        for p in self.procs.values():
            p._check()


def feed_of(plan: Plan, step: str) -> Iterable[Any]:
    """What a source stage consumes: the messages of from_events, the rows of from_rows."""
    src = plan.stages[step].source
    if isinstance(src, n.FromEvents):
        return src.messages
    if isinstance(src, n.FromRows):
        return src.rows  # type: ignore[no-any-return]
    if isinstance(src, n.Published):
        raise ValueError(
            f"{step}: published({src.query!r}) reads a query running on Ray; it cannot run "
            f"inline (use collect() on Ray, or deploy())"
        )
    raise ValueError(f"{step}: {plan.stages[step].describe} has nothing to feed")


def source_batches(plan: Plan, step: str, batch_size: int) -> Iterator[Any]:
    """The batches a source stage consumes: its own batches for a batched source (column
    batches of ``from_arrow``/``from_spark``), else lists of ``batch_size`` rows/messages."""
    src = plan.stages[step].source
    if getattr(src, "batched", False):
        return iter(feed_of(plan, step))
    return chunks(feed_of(plan, step), batch_size)


def run_inline(plan: Plan, batch_size: int = DEFAULT_BATCH,
               trace: Trace | None = None, columns: bool = False) -> list[Message]:
    """Run ``plan`` to the end of its sources in this process; return the output messages.
    With ``trace`` every step's messages are recorded there (:mod:`actors.trace`). With
    ``columns`` the sink's column batches are returned as they are (a Spark sink converts them
    column-wise), else expanded into inserts."""
    dag = DagProcessor(plan, inline_sink=True, trace=trace)
    dag.expand_output = not columns
    if trace is None:
        return drive(dag, plan, batch_size)[0]
    from .trace import write_plan

    write_plan(trace, plan, runtime="inline")
    try:
        return drive(dag, plan, batch_size)[0]
    finally:
        for rec in (dag.trace or {}).values():
            rec.flush()


def drive(dag: DagProcessor, plan: Plan, batch_size: int) -> tuple[list[Message], list[int]]:
    """Feed ``dag`` every source of ``plan`` to its end, one batch of each in turn, then the
    end of input; return the output messages and the rows (or messages) fed per source."""
    feeds = [source_batches(plan, s, batch_size) for s in dag.inputs]
    fed = [0] * len(feeds)
    out: list[Message] = []
    try:
        for round_ in round_robin(feeds):
            for port, batch in round_:
                if batch is not END:
                    fed[port] += count_events(batch)
                    out.extend(dag.process(batch, port))
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
