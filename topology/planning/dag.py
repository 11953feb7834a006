"""A whole plan as one processor: :class:`DagProcessor` hosts every stage of a
:class:`~topology.planning.planner.Plan` in one process and pushes each output batch straight into
the stages it feeds (depth first, so every input port sees its messages in order). It is itself a
:class:`~operators.processor.Processor` with one input port per source, which makes it the inline
runtime (:mod:`topology.running.inline`) and the sub-query of a ``group_apply`` on every runtime.

    >>> from topology import Stream
    >>> from operators.events import Insert, Cti
    >>> dag = DagProcessor(Stream.from_events([]).shift(2).plan(), inline_sink=True)
    >>> dag.process([Insert("a", 0, 5, 1), Cti(5)])
    [Insert(id='a', start=2, end=7, payload=1), Cti(time=7)]

**Ends of input.** :meth:`end_input` ends one source before the others: its stage finishes
(a source's final CTI) and its end reaches the steps it feeds, as the actors pass ends on:
an inner step whose inputs have all ended is finished and its end passed on in turn, one
with an input still open gets :meth:`~operators.processor.Processor.end_input` for the
ended port (a union or join then follows its open inputs' CTIs). :meth:`finish` finishes
what is left, in plan order.

    >>> ref = Stream.from_events([])
    >>> dag = DagProcessor(ref.union(Stream.from_events([])).plan(), inline_sink=True)
    >>> dag.process([Cti(3)], 0) + dag.process([Cti(5)], 1)
    [Cti(time=3)]
    >>> dag.end_input(0) + dag.process([Cti(9)], 1)
    [Cti(time=5), Cti(time=9)]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from actors.recorder import Recorder, TraceSettings
from operators.columns import expand
from operators.events import Message
from operators.processor import Processor, ended_error
from operators.sources import Passthrough
from topology.building import nodes as n
from topology.planning.routing import Router

if TYPE_CHECKING:
    from topology.planning.plan import Plan


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
        #: step -> the step at the other end of each of its input edges
        self.feeders: dict[str, list[str]] = {step: [] for step in plan.stages}
        for src, es in plan.edges.items():
            for e in es:
                self.feeders[e.dst].append(src)
        #: the steps finished already (all their inputs ended); part of the snapshot
        self.done: set[str] = set()
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
        if self.in_ended is not None and port in self.in_ended:
            raise ended_error(self.name, port)
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

    def on_end_input(self, port: int) -> list[Message]:
        """Source ``self.inputs[port]`` has ended: finish it and pass its end on."""
        out: list[Message] = []
        self._end_step(self.inputs[port], out)
        return out

    def _end_step(self, step: str, out: list[Message]) -> None:
        """Every input of ``step`` has ended: finish it, then end its out-edges (a step whose
        inputs have all ended then is finished in turn, one with an input still open gets
        ``end_input`` on the ended port)."""
        self._finish_step(step, out)
        for e in self.routes[step][1]:
            if e.dst in self.done:
                continue  # (fed twice by this step: finished at its first edge)
            if all(f in self.done for f in self.feeders[e.dst]):
                self._end_step(e.dst, out)
            else:
                res = self.procs[e.dst].end_input(e.port)
                self._flushed(e.dst, res, out)

    def _finish_step(self, step: str, out: list[Message]) -> None:
        self.done.add(step)
        self._flushed(step, self.procs[step].finish(), out)

    def _flushed(self, step: str, res: list[Message], out: list[Message]) -> None:
        """``step``'s output at an end of input: traced as output, and forwarded."""
        if res and self.trace is not None and step in self.trace:
            self.trace[step].record("out", 0, res)
        if res:
            self._forward(step, res, out)

    def finish(self) -> list[Message]:
        """End of input: every stage not finished yet flushes (sources emit their final
        CTI), in plan order."""
        out: list[Message] = []
        for step in self.procs:
            if step not in self.done:
                self._finish_step(step, out)
        return out

    def snapshot(self) -> dict[str, Any]:
        state = super().snapshot()
        state["done"] = sorted(self.done)
        return state

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.done = set(state.get("done", ()))  # (absent before ends were per input)

    def children(self) -> Iterable[Processor]:
        return self.procs.values()

    def state_size(self) -> int:
        return sum(p.state_size() for p in self.procs.values())

    def _check(self) -> None:
        for p in self.procs.values():
            p._check()
