"""A whole plan as one processor: :class:`DagProcessor` hosts every stage of a
:class:`~topology.planner.Plan` in one process and pushes each output batch straight into the
stages it feeds (depth first, so every input port sees its messages in order). It is itself a
:class:`~operators.processor.Processor` with one input port per source, which makes it the inline
runtime (:mod:`topology.inline_runtime`) and the sub-query of a ``group_apply`` on every runtime.

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> dag = DagProcessor(Stream.from_events([]).shift(2).plan(), inline_sink=True)
    >>> dag.process([Insert("a", 0, 5, 1), Cti(5)])
    [Insert(id='a', start=2, end=7, payload=1), Cti(time=7)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from actors.recorder import Recorder, TraceSettings
from operators.columns import expand
from operators.events import Message
from operators.processor import Processor
from operators.sources import Passthrough

from . import nodes as n
from .routing import Router

if TYPE_CHECKING:
    from .plan import Plan


class DagProcessor(Processor):
    """All stages of a plan in one process; input port ``i`` feeds ``plan.sources[i]``."""

    _parts = ("procs",)  # step -> processor

    def __init__(self, plan: Plan, name: str | None = None, inline_sink: bool = False,
                 trace: TraceSettings | None = None) -> None:
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
        #: step -> its trace recorder (None: tracing off; see :mod:`actors.recorder`)
        self.trace: dict[str, Recorder] | None = None
        if trace is not None:
            self.trace = {step: Recorder(trace, step, proc) for step, proc in self.procs.items()
                          if trace.traces(step)}

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        out: list[Message] = []
        msgs: Any = batch if isinstance(batch, (list, dict)) else list(batch)
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
