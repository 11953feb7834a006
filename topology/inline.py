"""The inline runtime: a whole plan executed in one process, without Ray.

:func:`run_inline` hosts every stage of a plan in one :class:`~topology.dag.DagProcessor`,
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

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from actors.trace import Trace
from operators.columns import count_events
from operators.events import Message
from operators.feeds import END, chunks, round_robin

from . import nodes as n
from .dag import DagProcessor

if TYPE_CHECKING:
    from .planner import Plan

#: Messages (or rows) per batch fed to a source.
DEFAULT_BATCH = 4096


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
