"""``deploy(name, ..., restore=PATH)``: what a plan must be to start from a savepoint.

A savepoint (:mod:`actors.savepoints`) holds every step's state at a cut and the rounds of
the sources fed before it. A plan restores it only when

* each of its steps keeps a state of the savepoint's, or holds none, or held none at the
  cut (:mod:`topology.running.upgrades`: matched by fingerprint, not by step id); else the
  first step refused (a new or changed source, or a changed step that holds state) is
  named, and why;
* each of its fed sources can be read again from its beginning (a list, a tuple, an Arrow
  table, parquet files, a batch DataFrame): the restored run reads it again and skips the
  rounds fed before the cut. A one-shot iterator (a generator) cannot be. A streaming
  ``from_spark`` with a checkpoint goes on from its own checkpoint instead: the cut
  committed the stream's last micro-batch fed before it and stopped it there
  (:func:`cut_streams`), so its next run starts right after the cut, and the savepoint
  keeps the stream's position to check that nothing read the stream since
  (:func:`moved_on`; a Spark checkpoint cannot go back);
* it is cut into batches of the same size (rounds count batches).

:func:`check` says what is wrong and how to fix it, before anything starts.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from actors import checkpoint as ck
from actors.savepoints import SavepointFailed, load_record
from topology.building import nodes as n
from topology.planning.plan import Plan
from topology.running.feeding import driver_sources
from topology.running.upgrades import fresh_snapshots, made_states, match

if TYPE_CHECKING:
    from operators.events import Message
    from topology.spark.held_runs import SparkStream


def _taken(record: dict[str, Any]) -> str:
    when = _dt.datetime.fromtimestamp(record["taken"], _dt.UTC)
    return f"query {record['query']!r} at {when:%Y-%m-%d %H:%M:%S} UTC"


def _data(plan: Plan, step: str) -> Any:
    src = plan.stages[step].source
    return src.source_data() if isinstance(src, (n.FromRows, n.FromEvents)) else None


def resuming(plan: Plan, step: str) -> SparkStream | None:
    """The stream of source ``step`` if it resumes by itself where a savepoint cut it: a
    streaming ``from_spark`` with a checkpoint, whose own checkpoint continues after the
    last micro-batch fed before the cut (:meth:`SparkStream.cut
    <topology.spark.held_runs.SparkStream.cut>`); else None."""
    from topology.spark.held_runs import SparkStream

    data = _data(plan, step)
    return data if isinstance(data, SparkStream) and data.checkpoint is not None else None


def _streams(plan: Plan) -> list[tuple[str, SparkStream]]:
    """The :func:`resuming` sources of ``plan`` and their streams."""
    return [(s, stream) for s in driver_sources(plan)
            if (stream := resuming(plan, s)) is not None]


def wake_streams(plan: Plan) -> None:
    """A savepoint was asked: each :func:`resuming` source waiting for a micro-batch
    yields an empty batch, so that the feeder reaches the cut between two rounds even
    while the stream is quiet."""
    for _, stream in _streams(plan):
        stream.wake()


def cut_streams(plan: Plan) -> dict[str, dict[str, Any]]:
    """At a savepoint's cut: each :func:`resuming` source's stream cut there, and its
    position (the savepoint's record keeps them as ``positions``)."""
    return {step: stream.cut() for step, stream in _streams(plan)}


def one_shot(plan: Plan, step: str) -> str | None:
    """Why source ``step`` cannot be read again from its beginning, or None when it can."""
    from topology.spark.held_runs import SparkStream

    data = _data(plan, step)
    if isinstance(data, SparkStream):
        return ("it reads a Spark streaming DataFrame, which goes on from its own checkpoint "
                "and cannot be read again from its start")
    if isinstance(data, Iterator):
        return (f"it reads a one-shot iterator ({type(data).__name__}), which cannot be read "
                f"again to skip what was fed before the cut")
    return None


def moved_on(stream: SparkStream, record: dict[str, Any], old: str | None) -> str | None:
    """Why ``stream`` does not go on where the savepoint's source ``old`` stopped (its
    checkpoint has read on since, or is another), or None when it does."""
    from topology.spark.checkpoint import stream_records

    at = (record.get("positions") or {}).get(old or "")
    if at is None:
        return ("the savepoint did not cut a Spark stream there (it was taken before cedar "
                "kept a stream's position, or the source was another)")
    now = stream_records(stream.checkpoint or "")["last_batch_id"]
    if stream.checkpoint == at["checkpoint"] and now == at["last_batch_id"]:
        return None
    where = (f"its checkpoint {stream.checkpoint!r} is not the savepoint's "
             f"{at['checkpoint']!r}" if stream.checkpoint != at["checkpoint"] else
             f"its checkpoint {stream.checkpoint!r} has read on to micro-batch {now} since "
             f"the cut after micro-batch {at['last_batch_id']} (a run over it after the "
             f"savepoint)")
    return (f"it reads a Spark streaming DataFrame, which goes on from its own checkpoint, "
            f"and {where}: a Spark checkpoint cannot go back")


def check(plan: Plan, name: str, location: str, batch_size: int | None) -> dict[str, Any]:
    """The savepoint record at ``location`` if ``plan`` can start from it (see the module
    docstring), with ``mapping`` (each step of ``plan``: the savepoint's step whose state it
    takes, or None), ``fresh`` (the snapshot of each step that starts fresh) and
    ``made`` (the state of each step made from the savepoint's rather than taken whole:
    :func:`~topology.running.upgrades.made_states`) added;
    ValueError naming the step and the fix when it cannot."""
    record = load_record(location)
    head = f"deploy({name!r}, restore={location!r})"
    fates = match(plan, record, ck.normalize(location))
    refused = [f for f in fates if f.refused]
    if refused:
        f = refused[0]
        raise ValueError(
            f"{head}: step {f.step!r} differs from the savepoint's and cannot be restored: "
            f"{f.why}. The savepoint of {_taken(record)} restores every step it has the "
            f"fingerprint of (see explain(); `cedar upgrade NEW.py --savepoint PATH` shows "
            f"each step's fate); keep {f.step!r} as it was, or deploy without restore= to "
            f"start afresh")
    record = {**record, "mapping": {f.step: f.old for f in fates},
              "fresh": fresh_snapshots(plan, fates),
              "made": made_states(plan, ck.normalize(location), fates)}
    for step in driver_sources(plan):
        stream = resuming(plan, step)
        why = (one_shot(plan, step) if stream is None else
               moved_on(stream, record, record["mapping"][step]))
        fix = ("Give it data that can be read again from its start (a list, an Arrow table, "
               "parquet files)" if stream is None else
               "Restore the savepoint taken last over that checkpoint")
        if why is not None:
            raise ValueError(
                f"{head}: source {step!r} cannot resume where the savepoint stopped (after "
                f"{record['rounds']:,} batches of each source): {why}. {fix}, or deploy it "
                f"without restore= to start afresh")
    if batch_size is not None and batch_size != record["batch_size"]:
        raise ValueError(f"{head}: batch_size={batch_size}, but the savepoint counted its "
                         f"sources' positions in batches of {record['batch_size']}; leave "
                         f"batch_size out (the savepoint's is used) or give "
                         f"{record['batch_size']}")
    return record


def take_savepoint(query: Any, location: str, timeout_s: float
                   ) -> tuple[dict[str, Any], list[Message]]:
    """``Query.stop(savepoint=location)`` of ``query`` (a ``Query``): the query cut at one
    barrier through every step, every step's state and its sources' positions written to
    ``location`` (:mod:`actors.savepoints`; a path or storage URI, as ``checkpoint_dir``).
    Returns the savepoint's record (``epoch``, ``rounds``, ``output_position``,
    ``fingerprint``, ...) and the output delivered before the cut; nothing after it is
    emitted. A savepoint that cannot be taken (the query ended or failed) raises
    :class:`~actors.savepoints.SavepointFailed`, the query stopped all the same."""
    import ray

    if query.supervisor is None:
        raise ValueError(
            f"query {query.name!r}: stop(savepoint=...) needs a query deployed with "
            f"checkpoint_dir= (a savepoint is cut by its checkpoint barriers); stop it "
            f"without savepoint=, and deploy it with checkpoint_dir= next time")
    try:
        record: dict[str, Any] = query.supervisor.savepoint(ck.normalize(location),
                                                            max(timeout_s, 60.0))
        return record, query.output()
    except Exception as exc:
        query.stop(timeout_s)
        # through the host, Ray's task error wraps it: raise it as the host raised it
        cause = exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else exc
        if isinstance(cause, SavepointFailed):
            raise SavepointFailed(str(cause)) from None
        raise


def rescale(query: Any, partitions: int, savepoint: str, step: str | None,
            timeout_s: float) -> Any:
    """``Query.rescale``: run ``query`` at another width. It is stopped with a savepoint at
    ``savepoint`` and deployed again under its name from it, its rescalable group_apply (the
    one of step id ``step``, or the only one) at ``partitions`` (1 to its key groups); the
    new query is returned. Each new partition takes its keys' state; nothing is lost or
    doubled (docs/operations.md, "Rescaling"). ``query`` keeps the output before the cut.
    A query deployed elsewhere is rescaled by hand: ``cedar stop NAME --savepoint P``, then
    its script deployed at the new ``partitions=`` with ``restore=P``."""
    if query.deployed_as is None:
        raise ValueError(
            f"query {query.name!r}: rescale() needs the handle Stream.deploy returned in this "
            f"process (it deploys that stream again); else stop it with `cedar stop "
            f"{query.name} --savepoint PATH` and deploy its script at the new partitions= "
            f"with restore=PATH")
    stream, options = query.deployed_as
    wider = stream.with_partitions(partitions, step)  # (refused before anything stops)
    query.stop(timeout_s, savepoint=savepoint)
    return wider.deploy(query.name, **{**options, "restore": savepoint})
