"""What a query's sources are read from when their data is made afresh on each run: the
re-readable batches of ``from_arrow``/``from_spark`` (:class:`Batches`, and who feeds them on
a cluster), and the runs of a streaming ``from_spark`` with a checkpoint, held until the
output they made is delivered and then committed (:func:`held_runs`), so a run cut short (an
error, a kill) is replayed whole by the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from topology.building import nodes as n


class Batches:
    """An iterable that makes a fresh iterator of batches each time it is read, and declares
    who feeds it on a cluster (:data:`topology.building.nodes.Feed`): ``"host"`` (the default) when
    any process can read it (a table), so a deployed query's host feeds it (:mod:`actors.host`);
    ``"driver"`` when it lives in the driver (a Spark DataFrame); ``"actor"`` when its source
    actor reads it itself (``OperatorShell.pull``): only a part of ``from_spark(df,
    sources=N)``, a file that the actor reads faster than anyone could send it."""

    def __init__(self, make: Callable[[], Iterable[Any]], feed: n.Feed = "host") -> None:
        self.make, self.feed = make, feed

    def __iter__(self) -> Any:
        return iter(self.make())


@contextmanager
def held_runs(node: n.Node) -> Iterator[Commit]:
    """Hold the runs of the query's streaming Spark sources with a checkpoint (those not
    held already, by ``to_spark_stream``) until the caller has delivered the output: the
    callable yielded commits them. A run not committed (an error, a kill) is replayed whole
    by the next run over the checkpoint (:class:`topology.spark.stream.SparkStreamFeeder`)."""
    held = [s for s in spark_streams(node) if s.checkpoint is not None and not s.held]
    runs = [s.hold() for s in held]
    commit = Commit(held, sum(runs) if runs else None)
    try:
        yield commit
    finally:  # a run not committed stays held on disk, for the next run to replay
        for s in held:
            s.held, s.last = False, None


class Commit:
    """Commits the held runs of a query's streaming Spark sources (:func:`held_runs`);
    ``run`` is their token (the sum of the sources' committed runs before this one: a run
    replayed after a kill has the same token), None without such a source."""

    def __init__(self, streams: list[SparkStream], run: int | None) -> None:
        self.streams, self.run = streams, run

    def __call__(self) -> None:
        for s in self.streams:
            s.commit_run()

    def later(self) -> Callable[[], None]:
        """A commit of this run's feeders, for after the ``with`` (``collect(commit=False)``'s
        ``out.commit``); committing twice does nothing more."""
        feeders = [s.last for s in self.streams if s.last is not None]

        def commit() -> None:
            while feeders:
                feeders.pop(0).commit_run()

        return commit


def spark_streams(node: n.Node) -> list[SparkStream]:
    """The streaming Spark sources of a query tree."""
    messages = getattr(node, "messages", None)
    found = [messages] if isinstance(messages, SparkStream) else []
    for child in node.inputs:
        found += [s for s in spark_streams(child) if s not in found]
    return found


class SparkStream:
    """The message batches of a streaming DataFrame: each iteration is one run, through a new
    :class:`topology.spark.stream.SparkStreamFeeder` that resumes from the checkpoint."""

    def __init__(self, feeder: Callable[[], Any], trigger: dict[str, Any] | None,
                 checkpoint: str | None) -> None:
        self.feeder, self.trigger, self.checkpoint = feeder, trigger, checkpoint
        self.held = False
        self.last: Any = None
        #: the generator of the run under way (:meth:`__iter__`)
        self.running: Any = None

    def hold(self) -> int:
        """Hold the next run until :meth:`commit_run` (a sink commits per output CTI); the
        source's run token (``SparkStreamFeeder.run``)."""
        from topology.spark.checkpoint import stream_run

        self.held = True
        return stream_run(self.checkpoint)

    def commit_run(self) -> None:
        if self.last is not None:
            self.last.commit_run()
        self.held, self.last = False, None

    def run_records(self) -> dict[str, Any] | None:
        """What the source's Ingress did with this run's rows
        (``SparkStreamFeeder.run_records``)."""
        return self.last.run_records() if self.last is not None else None

    def __iter__(self) -> Any:
        self.last = self.feeder()
        self.running = self.last.stream(self.trigger, hold=self.held)
        return self.running

    def wake(self) -> None:
        """The run under way yields an empty list while it waits for a micro-batch
        (:meth:`SparkStreamFeeder.wake <topology.spark.stream.SparkStreamFeeder.wake>`): a
        savepoint's cut is made between two batches, also of a quiet stream."""
        if self.last is not None:
            self.last.wake()

    def cut(self) -> dict[str, Any]:
        """A savepoint's cut, every batch this run yielded fed before it: the run's last
        micro-batch committed (:meth:`SparkStreamFeeder.settle
        <topology.spark.stream.SparkStreamFeeder.settle>`) and the run stopped, so the next
        run over the checkpoint starts right after the cut. The stream's position there:
        ``checkpoint``, ``last_batch_id`` and ``run`` (what a restore checks the checkpoint
        still says, :mod:`topology.running.savepoints`)."""
        if self.last is None or self.checkpoint is None:
            raise RuntimeError(f"{self!r}: cut() needs a running stream with a checkpoint")
        self.last.settle()
        if self.last.holding:  # a held run replayed: fed whole before the cut, it is done
            self.last.commit_run()
        self.running.close()  # stops the Spark query; nothing after the cut is committed
        return {"checkpoint": self.checkpoint, "last_batch_id": self.last.last_batch_id,
                "run": self.last.run}

    def __repr__(self) -> str:
        return f"spark stream, checkpoint={self.checkpoint!r}"
