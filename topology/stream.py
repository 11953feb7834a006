"""``Stream``: the immutable fluent builder of cedar queries (docs/operators.md, docs/runtime.md).

A ``Stream`` wraps one node of a logical query tree (:mod:`topology.nodes`); every method
returns a new ``Stream`` and never changes the one it is called on, so a stream can be reused
as the input of several queries. Nothing runs until :meth:`Stream.collect` (run to the end,
return the output messages) or :meth:`Stream.deploy` (a live query on Ray, see
:class:`topology.query.Query`).

    >>> from operators.events import Insert, Cti
    >>> from operators.aggregates import Count
    >>> s = Stream.from_events([Insert(i, i, i + 1, i) for i in range(6)] + [Cti(6)])
    >>> q = s.where(lambda p: p % 2 == 0).tumbling_window(3).aggregate(Count())
    >>> print(q.explain(stages=False))  # doctest: +ELLIPSIS
    sink
    └── tumbling.aggregate#2  tumbling.aggregate(Count(), size=3)
        └── where#1  where(<lambda>) [column-wise]
            └── from_events#0  from_events(7 messages)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from operators import windows as w
from operators.events import Message
from operators.ticks import Duration
from operators.vectorized import Vectorized

from . import nodes as n
from .checks import (
    check_flag,
    check_function,
    check_fuse,
    check_iterable,
    check_key,
    check_query_name,
    check_runtime,
    check_step_name,
    check_window_spec,
    fuse_level,
)
from .held_runs import Batches, SparkStream, held_runs, spark_streams
from .times import time_fields

#: Rows per column batch of a columnar source (``from_arrow``, ``from_spark``). Large: the
#: cost of a Ray call and of grouping a batch is per batch (measured on W1 on Ray, 2 cores:
#: 32k rows 0.9M events/s, 64k 1.4M, 256k 1.9–2.4M).
COLUMN_BATCH_ROWS = 262_144

if TYPE_CHECKING:
    from .inline_runtime import Collected, RunReport
    from .planner import Plan
    from .query import Query

#: ``checkpoint=`` not given (``None`` is an explicit choice: no restart state).
_UNSET: Any = object()


class Stream:
    """An immutable handle on a logical query; every method returns a new Stream."""

    __slots__ = ("_node",)
    _node: n.Node

    def __init__(self, node: n.Node) -> None:
        object.__setattr__(self, "_node", node)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Stream is immutable: every method returns a new Stream")

    def _then(self, node_type: type[n.Node], *others: Stream, arg: str = "other",
              **kw: Any) -> Stream:
        """A new node of ``node_type`` reading this stream and ``others`` (argument ``arg``
        of the builder method), with the node's fields ``kw``."""
        for o in others:
            if not isinstance(o, Stream):
                raise TypeError(f"{node_type.verb}({arg}={o!r}): expected a Stream of cedar "
                                f"(topology.Stream)")
        return Stream(node_type(inputs=(self._node,) + tuple(o._node for o in others), **kw))

    def __repr__(self) -> str:
        return f"<Stream {self._node.describe()}>"

    # -- sources ----------------------------------------------------------------------------
    @staticmethod
    def from_events(messages: Iterable[Message], name: str | None = None) -> Stream:
        """Replay a physical stream (Insert / Retract / Cti messages). A message that breaks a
        rule of physical streams (docs/model.md) is not processed: it goes to the query's dead
        letters."""
        check_iterable("from_events", "messages", messages, "Insert, Retract and Cti messages")
        return Stream(n.FromEvents(inputs=(), messages=tuple(messages), name=name))

    @staticmethod
    def from_rows(rows: Iterable[Any], start: Any, end: Any = None, shape: str = "point",
                  id: Any = None, advance: Any = None, name: str | None = None) -> Stream:
        """Ingest plain rows (dicts) as events of ``shape`` with
        :class:`operators.ingress.Ingress`: ``start``/``end``/``id`` are column names or
        functions of a row, ``advance`` an :class:`operators.ingress.AdvanceTime` (default:
        CTIs only at the end of input). ``rows`` may be any iterable, e.g. a generator that
        yields rows as they arrive (it is consumed once)."""
        from operators.ingress import Ingress

        check_iterable("from_rows", "rows", rows, "rows (dicts)")
        opts: dict[str, Any] = {"start": start, "end": end, "shape": shape, "id": id}
        if advance is not None:
            opts["advance"] = advance
        Ingress(**opts)  # check the configuration now, where the mistake was made
        return Stream(n.FromRows(inputs=(), rows=rows, start=start, end=end, shape=shape,
                                 id=id, advance=advance, name=name))

    @staticmethod
    def from_spark(df: Any, start: Any, end: Any = None, shape: str = "point", id: Any = None,
                   advance: Any = None, name: str | None = None, *,
                   checkpoint: Any = _UNSET, trigger: dict[str, Any] | None = None,
                   partition_rows: int | None = None, sources: int = 1,
                   staging: str | os.PathLike[str] | None = None) -> Stream:
        """Ingest a Spark DataFrame exactly as :meth:`from_rows` ingests rows (time columns
        of timestamp, date or integer type become ticks).

        A **batch** DataFrame means its whole table, whatever the order of its partitions: it
        is read sorted by time (``start``; for edges, an end edge at its ``end``), range by
        range of ``partition_rows`` rows in bounded driver memory
        (:mod:`topology.spark_source`), so its result is the query over the table sorted by
        time, and no row is late unless ``advance`` has a negative delay. Each run reads the
        DataFrame again, except that queries built on the same ``from_spark`` stream and
        running at the same time (deployed with ``hold=True``, then started together) share
        one read (:mod:`topology.shared_read`): Spark sorts the table once for all of them.

        ``sources=N`` (N >= 2) reads a batch DataFrame in parallel: Spark writes it as N
        parquet files, each sorted by time
        (``df.repartition(N[, id]).sortWithinPartitions(<time key>)``, by a hash of the ``id``
        column when there is one, so that an edge's two rows share a file), under
        ``staging`` (a folder every node reaches; by default a temporary folder when Spark
        runs locally), and the stream is the ``union`` of N sources, each reading one file
        column batch by column batch. The union's CTI is the minimum of theirs, so the result
        is still the query over the whole table (the CHT; ids differ); it passes column
        batches on whole, and a window aggregate over point parts takes the keyed column-wise
        path as over one source. On Ray each source actor reads its own file, in parallel.
        The table is written once, when the stream is first read or
        sent to the cluster; later runs read the same files (build a new stream to read the
        DataFrame again).

        A **streaming** DataFrame is read micro-batch by micro-batch in arrival order
        (``foreachBatch``, ``trigger`` default ``{"availableNow": True}``), where
        ``advance``'s late-event policy decides what a row behind a CTI becomes, and it
        **needs** ``checkpoint=PATH`` (a directory or storage URI): Spark keeps the source's
        offsets there and cedar its Ingress state and the last micro-batch id
        (:class:`topology.spark_stream.SparkStreamFeeder`), so that each run (each
        ``collect()``) continues the stream where the last run over that checkpoint stopped,
        with no event twice and none lost, even when a run failed half-way. Only the
        source resumes: the query's operators start afresh in each run. The source's dead
        letters and late events are read with
        :func:`topology.spark_source.stream_records(PATH) <topology.spark_source.stream_records>`.
        ``checkpoint=None`` is the explicit choice of no restart state: every run reads the
        stream from its beginning again, as Spark does with a temporary checkpoint."""
        from .shared_read import SharedRead
        from .spark_source import PARTITION_ROWS, spark_row_batches
        from .spark_stream import SparkStreamFeeder
        from .times import spark_clock

        check_step_name(name, "from_spark")
        if not hasattr(df, "isStreaming") or not hasattr(df, "schema"):
            raise TypeError(f"from_spark(df={df!r}): expected a pyspark.sql.DataFrame")
        if df.isStreaming:
            if checkpoint is _UNSET:
                raise ValueError(
                    "from_spark: a streaming DataFrame needs checkpoint=PATH (a directory or "
                    "storage URI), where Spark keeps the source's offsets and cedar its "
                    "ingress state, so that a restarted query resumes exactly once (no event "
                    "twice, none lost); pass checkpoint=None explicitly to read the stream "
                    "from its beginning on every run, with no restart state")
            if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
                raise TypeError(f"from_spark: checkpoint={checkpoint!r}: give a path or URI "
                                f"(or None)")
            location = None if checkpoint is None else os.fspath(checkpoint)
            opts = {"start": start, "end": end, "shape": shape, "id": id,
                    "name": name or "spark", "checkpoint_location": location}
            if advance is not None:
                opts["advance"] = advance
            SparkStreamFeeder(df, **opts)  # check now: columns, types, the checkpoint's schema
            source = SparkStream(lambda: SparkStreamFeeder(df, **opts), trigger, location)
            return Stream(n.FromEvents(inputs=(), messages=source, batched=True,
                                       name=name or "spark", clock=spark_clock(df, start)))
        if checkpoint is not _UNSET and checkpoint is not None:
            raise ValueError("from_spark: checkpoint= is for streaming DataFrames; a batch "
                             "DataFrame is read whole, sorted by time, on every run")
        if isinstance(sources, bool) or not isinstance(sources, int) or sources < 1:
            raise ValueError(f"from_spark: sources={sources!r}: give an int >= 1 (the number of "
                             f"sources that read the DataFrame in parallel)")
        if sources > 1:
            return Stream._from_spark_parts(df, start, end, shape, id, advance, name, sources,
                                            staging)
        rows = PARTITION_ROWS if partition_rows is None else partition_rows
        spark_row_batches(df, start, end, COLUMN_BATCH_ROWS, shape=shape,
                          partition_rows=rows)  # check the arguments now
        # queries built on this stream and running at the same time share one read
        # (topology/shared_read.py): Spark sorts the table once for all of them
        batches = Batches(SharedRead(lambda: spark_row_batches(
            df, start, end, COLUMN_BATCH_ROWS, columnar=True, shape=shape,
            partition_rows=rows)), feed="driver")
        return Stream._batched(batches, start, end, shape, id, advance, name or "spark",
                               spark_clock(df, start))

    @staticmethod
    def _from_spark_parts(df: Any, start: Any, end: Any, shape: str, id: Any, advance: Any,
                          name: str | None, sources: int, staging: Any) -> Stream:
        """``from_spark(..., sources=N)``: the union of N portable sources, each reading one
        time-sorted parquet file Spark writes (:class:`topology.spark_staged.StagedTable`)."""
        from .spark_frames import check_batch_frame, check_columns
        from .spark_staged import StagedPart, StagedTable, staging_directory
        from .times import spark_clock

        what = "from_spark"
        check_batch_frame(df, what)
        check_columns(df, what, start=start, end=end, id=id)
        if id is not None and not isinstance(id, str):
            raise TypeError(f"{what}: id={id!r}: with sources={sources} the id must be a column "
                            f"name, so that the rows of one id (an edge's start and end, a "
                            f"duplicate) go to the same source")
        base = name or "spark"
        directory = staging_directory(df.sparkSession,
                                      None if staging is None else os.fspath(staging), what)
        table = StagedTable(df, start, end, shape, id, sources, directory, what)
        parts = [Stream._batched(
            Batches(StagedPart(table, i, start, end, COLUMN_BATCH_ROWS), feed="actor"),
            start, end, shape, id, advance, f"{base}[{i}]", spark_clock(df, start))
            for i in range(sources)]
        from .table_parts import UnionOfParts

        return parts[0]._then(UnionOfParts, *parts[1:], name=base)

    @staticmethod
    def from_arrow(data: Any, start: Any, end: Any = None, shape: str = "point", id: Any = None,
                   advance: Any = None, name: str | None = None,
                   batch_rows: int = COLUMN_BATCH_ROWS) -> Stream:
        """Ingest columns exactly as :meth:`from_rows` ingests the rows they hold: ``data`` is
        a ``pyarrow.Table`` or ``RecordBatch``, an iterable of them (read lazily, e.g. a
        generator of record batches as they arrive), or a mapping of column name to array
        (numpy arrays, lists). Time columns may be timestamps, dates or integer ticks
        (a nanosecond timestamp only when every value is a whole microsecond: a finer one is
        refused, with how to cast the column, never cut silently). Events
        travel column-wise (``operators.columns.Columns``): the fast path for
        ``where``/``select`` functions that work on whole columns and for windowed
        aggregates per group.

        Times from timestamp or date columns are shown to people as times (``explain``,
        ``cedar inspect``, pictures); a generator's schema is not known before it runs, so
        give its schema with ``pyarrow.RecordBatchReader.from_batches(schema, generator)``
        for its times to be shown as times rather than ticks."""
        import pyarrow as pa

        from .arrow_reader import TableBatches, arrow_batches, check_times
        from .times import arrow_clock, known_schema

        check_step_name(name, "from_arrow")
        if not isinstance(data, (dict, pa.Table, pa.RecordBatch)):
            check_iterable("from_arrow", "data", data, "pyarrow Tables or RecordBatches (or "
                            "give one Table, RecordBatch or a mapping of column name to array)")
        if isinstance(data, dict):
            data = pa.table(data)
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            check_times(data, start, end)  # now, not half-way through a run
            # read afresh at each collect(); the planner may read fewer columns (pruning)
            batches: Iterable[Any] = TableBatches(data, start, end, batch_rows)
        else:
            batches = arrow_batches(data, start, end, batch_rows)
        clock = arrow_clock(known_schema(data), start)
        return Stream._batched(batches, start, end, shape, id, advance, name, clock)

    @staticmethod
    def _batched(batches: Iterable[Any], start: Any, end: Any, shape: str, id: Any,
                 advance: Any, name: str | None, clock: str | None = None) -> Stream:
        """A source of ready batches (row lists or column batches), ingested like rows;
        ``clock`` is the kind of time its schema says it carries (:mod:`topology.times`)."""
        stream = Stream.from_rows((), start=start, end=end, shape=shape, id=id,
                                  advance=advance, name=name)
        node = cast(n.FromRows, stream._node)
        return Stream(dataclasses.replace(node, rows=batches, batched=True, clock=clock))

    @staticmethod
    def published(query: str, name: str | None = None) -> Stream:
        """The output of the running query ``query`` (deployed with :meth:`deploy`): first
        every event still alive at its current CTI, then its live stream."""
        check_query_name(query, "published", "query")
        return Stream(n.Published(inputs=(), query=query, name=name))

    # -- span operators ---------------------------------------------------------------------
    def where(self, pred: Callable[[Any], Any], name: str | None = None,
              vectorized: bool = False) -> Stream:
        """Keep the events whose payload satisfies ``pred``; lifetimes unchanged. With
        ``vectorized=True``, ``pred`` takes a batch's payload columns and returns a boolean
        mask (:mod:`operators.vectorized`)."""
        if vectorized:
            pred = Vectorized(pred, mask=True, step=name)
        return self._then(n.Where, pred=pred, name=name)

    def select(self, fn: Callable[[Any], Any], name: str | None = None,
               vectorized: bool = False) -> Stream:
        """Map every payload through ``fn``; lifetimes unchanged. With ``vectorized=True``,
        ``fn`` takes a batch's payload columns and returns the new payload columns
        (:mod:`operators.vectorized`)."""
        if vectorized:
            fn = Vectorized(fn, step=name)
        return self._then(n.Select, fn=fn, name=name)

    def alter_lifetime(self, start: Callable[[int], int] | None = None,
                       duration: Any = None, name: str | None = None) -> Stream:
        """New lifetimes: start ``start(s)``, end ``s' + duration`` (a duration: ticks, a
        ``timedelta`` or ``"5 min"``; or a function ``(s, e) -> ticks``); see
        :mod:`operators.alter_lifetime`."""
        return self._then(n.AlterLifetime, start=start, duration=duration, name=name)

    def shift(self, delta: Duration, name: str | None = None) -> Stream:
        """Move every lifetime by ``delta`` (∞ stays ∞): ticks, a ``timedelta`` or a string
        such as ``"-5 min"``."""
        return self._then(n.Shift, delta=delta, name=name)

    def to_points(self, name: str | None = None) -> Stream:
        """Every event becomes the point ``[start, start + 1)``."""
        return self._then(n.ToPoints, name=name)

    def clip_duration(self, limit: Duration, name: str | None = None) -> Stream:
        """Lifetimes longer than ``limit`` (ticks, a ``timedelta`` or ``"1 h"``) are cut to
        ``[start, start + limit)``."""
        return self._then(n.ClipDuration, limit=limit, name=name)

    # -- scan and distinct ---------------------------------------------------------------
    def scan(self, step: Any, initial: Any = None, tie: Callable[[Any], Any] | None = None,
             name: str | None = None) -> Stream:
        """A user-defined stream operator: ``step(state, payload) -> (state, outputs)`` is
        called once per event, in start order (equal starts ordered by ``tie(payload)``,
        default ``repr``), once a CTI has made the event final; each output payload becomes
        a point at the event's start, never retracted. ``initial`` is the first state
        (deep-copied; per key under ``group_apply``). ``step`` may instead be a
        :class:`operators.udm.StreamOperator` (class, instance or registered name) with its
        own ``initial()`` (:mod:`operators.scan`)."""
        return self._then(n.Scan, step=step, initial=initial, tie=tie, name=name)

    def distinct(self, key: Any = None, name: str | None = None) -> Stream:
        """For each distinct payload (or ``key(payload)``), the maximal intervals its
        lifetimes cover: overlapping or touching lifetimes of equal payloads become one
        event. With ``key``, each interval carries the payload of its earliest-starting
        event (equal starts: the least by ``repr``) (:mod:`operators.distinct`)."""
        return self._then(n.Distinct, key=key, name=name)

    # -- windows ----------------------------------------------------------------------------
    def window(self, spec: w.WindowSpec, clip: str | None = None, output: str | None = None,
               emit: str | None = None, *,
               policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Divide the time axis by ``spec`` (:mod:`operators.windows`); then ``.aggregate``
        or ``.apply``. ``clip=`` (default ``"full"``) cuts member lifetimes to the window,
        ``output=`` (default ``"window"``; ``"point_end"`` for count windows) stamps the
        results (docs/windows.md). ``emit="speculative"`` (the default) outputs a window's
        result as soon as it has events and corrects it by retractions; ``emit="final"``
        outputs each result once, when a CTI passes the window's end, and never retracts it.
        The three may instead come as one ``policy=WindowPolicy(clip, output, emit)``
        (:class:`operators.windows.WindowPolicy`). A bad or inapplicable policy fails here,
        naming the argument.

        >>> Stream.from_events([]).tumbling_window(5, output="bogus")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: output='bogus' is not an output policy; use one of 'window', 'point_end', ...
        """
        if policy is None:
            policy = w.WindowPolicy.of(clip, output, emit)
        elif clip is not None or output is not None or emit is not None:
            raise TypeError("window: give policy=WindowPolicy(...) or clip=/output=/emit=, "
                            "not both")
        elif not isinstance(policy, w.WindowPolicy):
            raise TypeError(f"window(policy={policy!r}): give an "
                            f"operators.windows.WindowPolicy")
        check_window_spec(spec)
        return WindowedStream(self, spec, policy.resolve(spec).policy)

    def hopping_window(self, size: Duration, hop: Duration, alignment: Duration = 0,
                       clip: str | None = None, output: str | None = None,
                       emit: str | None = None, *,
                       policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows ``[alignment + k·hop, alignment + k·hop + size)``; ``size``, ``hop`` and
        ``alignment`` are durations: ticks, a ``timedelta`` or a string such as ``"5 min"``."""
        return self.window(w.hopping_window(size, hop, alignment), clip, output, emit,
                           policy=policy)

    def tumbling_window(self, size: Duration, alignment: Duration = 0, clip: str | None = None,
                        output: str | None = None, emit: str | None = None, *,
                        policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows ``[alignment + k·size, alignment + (k + 1)·size)``; ``size`` is a
        duration: ticks, a ``timedelta`` or a string such as ``"5 min"``.

        >>> from datetime import timedelta
        >>> s = Stream.from_events([])
        >>> sizes = ("5 min", timedelta(minutes=5), 300_000_000)
        >>> {s.tumbling_window(size).spec for size in sizes}
        {HoppingWindow(size=300000000, hop=300000000, alignment=0)}
        """
        return self.window(w.tumbling_window(size, alignment), clip, output, emit,
                           policy=policy)

    def snapshot_window(self, clip: str | None = None, output: str | None = None,
                        emit: str | None = None, *,
                        policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows between consecutive distinct event endpoints."""
        return self.window(w.snapshot_window(), clip, output, emit, policy=policy)

    def count_window(self, n_starts: int, by: str = "start", clip: str | None = None,
                     output: str | None = None, emit: str | None = None, *,
                     policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Windows over ``n_starts`` consecutive distinct start (or end) times."""
        if isinstance(n_starts, bool) or not isinstance(n_starts, int) or n_starts <= 0:
            raise ValueError(f"count_window(n_starts={n_starts!r}): give a positive int (the "
                             f"number of distinct times a window spans)")
        return self.window(w.count_window(n_starts, by), clip,  # type: ignore[arg-type]
                           output, emit, policy=policy)

    def session_window(self, gap: Duration, max_duration: Duration | None = None,
                       clip: str | None = None, output: str | None = None,
                       emit: str | None = None, *,
                       policy: w.WindowPolicy | None = None) -> WindowedStream:
        """Sessions (:mod:`operators.windows.session`): over the distinct start times, a
        maximal run in which each next start is less than the previous start + ``gap`` (a
        duration, as ``max_duration``: ticks, a ``timedelta`` or ``"30 s"``); the window is
        ``[first start, last start + gap)``, cut at ``first start + max_duration`` when given
        (an event starting there or later opens a new session).
        An event belongs to the session holding its start. A session that grows, or two
        that a late event bridges, are corrected by retractions; ``emit="final"`` outputs a
        session once a CTI passes its end. Bad arguments fail here, naming the argument.

        >>> from operators.aggregates import Count
        >>> from operators.events import Insert, Cti
        >>> s = Stream.from_events([Insert(i, t, t + 1, i) for i, t in enumerate((0, 2, 10))]
        ...                        + [Cti(20)])
        >>> to_cht = __import__("operators.cht", fromlist=["to_cht"]).to_cht
        >>> to_cht(s.session_window(5).aggregate(Count()).collect(runtime="inline"))
        [(0, 7, 2), (10, 15, 1)]
        >>> s.session_window(0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: session_window(gap=0): gap must be a positive duration, got 0 ticks; ...
        """
        return self.window(w.session_window(gap, max_duration), clip, output, emit,
                           policy=policy)

    # -- multi-input ------------------------------------------------------------------------
    def join(self, other: Stream, on: tuple[Any, Any] | None = None,
             select: Callable[[Any, Any], Any] | None = None,
             name: str | None = None) -> Stream:
        """Pairs with equal keys (``on=(left_key, right_key)``; None: every pair) whose
        lifetimes overlap, over the intersection; payload ``select(l, r)``."""
        return self._then(n.Join, other, on=on, select=select, name=name)

    def anti_join(self, other: Stream, on: tuple[Any, Any] | None = None,
                  name: str | None = None) -> Stream:
        """The parts of each left lifetime during which no matching right event is alive."""
        return self._then(n.AntiJoin, other, on=on, name=name)

    def left_join(self, other: Stream, on: tuple[Any, Any] | None = None,
                  select: Callable[[Any, Any], Any] | None = None, default: Any = None,
                  name: str | None = None) -> Stream:
        """The join, plus the unmatched parts of left lifetimes paired with ``default``."""
        return self._then(n.LeftJoin, other, on=on, select=select, default=default, name=name)

    def full_outer_join(self, other: Stream, on: tuple[Any, Any] | None = None,
                        select: Callable[[Any, Any], Any] | None = None,
                        name: str | None = None) -> Stream:
        """The join, plus each side's unmatched parts as ``select(l, None)`` and
        ``select(None, r)`` (cut as ``anti_join`` cuts them)."""
        if select is not None and not callable(select):
            raise TypeError(f"full_outer_join(select={select!r}): select must be a function "
                            f"(left, right) -> payload; one of the two is None where a side "
                            f"has no partner")
        if on is not None and (not isinstance(on, (tuple, list)) or len(on) != 2):
            raise ValueError(f"full_outer_join(on={on!r}): on must be a pair (left_key, "
                             f"right_key) of field names or functions of the payload, or None "
                             f"for a cross join")
        return self._then(n.FullOuterJoin, other, on=on, select=select, name=name)

    def import_ctis(self, leader: Stream, policy: str = "drop",
                    name: str | None = None) -> Stream:
        """This stream's events with ``leader``'s CTIs imported (StreamInsight's
        AdvanceTimeImportSettings): the output CTI is the larger of the two, so a rarely
        changing stream (a reference table) no longer holds back a join with a fast one.
        Events that arrive behind the imported CTI go through ``policy`` ('drop' or
        'adjust'), are counted in the step's ``late`` and sent on ``.late()``."""
        if not isinstance(leader, Stream):
            raise TypeError(f"import_ctis(leader={leader!r}): leader must be a Stream of the "
                            f"same query, whose CTIs this stream takes")
        return self._then(n.ImportCti, leader, policy=policy, name=name)

    def late(self, name: str | None = None) -> Stream:
        """The late events of this stream's source (a rows, Arrow or Spark source) or of its
        ``import_ctis``: each dropped or adjusted event as an insert with its original times
        and the payload ``{"source", "policy", "reason", "payload"}``. Its only CTI comes at
        the end of input. Route it to a sink or into another query like any stream."""
        from .table_parts import UnionOfParts

        node = self._node
        if isinstance(node, (n.FromRows, n.ImportCti)):
            return self._then(n.Late, name=name)
        if isinstance(node, UnionOfParts) and all(isinstance(i, n.FromRows)
                                                  for i in node.inputs):
            parts = [Stream(i)._then(n.Late, name=None if name is None else f"{name}[{k}]")
                     for k, i in enumerate(node.inputs)]
            return parts[0]._then(n.Union, *parts[1:], name=name)
        raise ValueError(
            f"late(): {node.verb} has no late events; call .late() on a source that ingests "
            f"rows (from_rows, from_arrow, from_spark) or on an import_ctis, whose "
            f"AdvanceTime policy drops or adjusts them")

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """All events of every input; the CTI is the minimum of the inputs' CTIs."""
        return self._then(n.Union, *others, arg="others", name=name)

    def group_apply(self, key: Callable[[Any], Any], fn: Callable[[Stream], Stream],
                    partitions: int = 1, name: str | None = None) -> Stream:
        """Run ``fn`` on the events of each key separately; payloads become
        ``(key, payload)``. ``partitions=N`` spreads the keys over N actors by hash."""
        check_key("group_apply", "key", key)
        check_function("group_apply", "fn", fn, "(a Stream of one group's events) -> the "
                         "Stream of its sub-query")
        sub = fn(Stream(n.GroupInput(inputs=())))
        if not isinstance(sub, Stream):
            raise TypeError(f"group_apply(fn={_name(fn)}): the sub-query function must "
                            f"return a Stream, got {sub!r}")
        return self._then(n.GroupApply, key=key, sub=sub._node, partitions=partitions,
                          name=name)

    # -- planning and running ---------------------------------------------------------------
    def plan(self, fuse: bool | str = False) -> Plan:
        """The stages this query runs as (:mod:`topology.planner`), fused at level ``fuse``
        (False, True, ``"stateless"``, ``"chains"`` or ``"all"``: docs/runtime.md)."""
        from .planner import plan

        fuse_level("plan", fuse)
        return plan(self._node, fuse=fuse)

    def explain(self, fuse: bool | str = False, stages: bool = True) -> str:
        """The logical plan (step ids and arguments), and with ``stages`` the physical one."""
        from .planner import assign_steps, explain_tree

        fuse_level("explain", fuse)
        check_flag("explain", "stages", stages)
        if stages:
            return self.plan(fuse).explain()
        return explain_tree(self._node, assign_steps(self._node))

    def collect(self, runtime: str = "ray", *, fuse: bool | str | None = None,
                batch_size: int | None = None, trace: Any = None, columns: bool = False,
                commit: bool = True, **options: Any) -> Collected:
        """Run the query to the end of its sources and return the output messages
        (``columns=True``: the output's column batches as :class:`~operators.columns.Columns`,
        each standing for its inserts, instead of one ``Insert`` per event).

        The result is a list with what the run did not output as attributes
        (:class:`topology.inline_runtime.Collected`): ``dead_letters`` (the inputs no step could
        process, each with its reason), ``late`` (the events sources dropped or adjusted by
        their late-event policy) and ``accounting`` (per source, ``received == processed +
        dropped + adjusted + dead_lettered``). A run with dead letters warns once
        (:class:`topology.inline_runtime.DeadLetterWarning`) with their count and where to read
        them.

        ``runtime="ray"`` connects to Ray (or starts a local instance), deploys one actor per
        stage, feeds the sources, drains and tears the actors down; ``runtime="inline"`` runs
        the same plan in this process. ``options`` go to the Ray runtime
        (:func:`topology.deploy.deploy_plan`). ``trace`` (a directory, or an
        :class:`topology.Trace` with bounds) records the messages entering and leaving
        every step as parquet; read it with ``Trace.open(path)`` or ``cedar debug PATH``.
        ``fuse`` runs stateless steps in the stage before them (see :meth:`_ray_plan`);
        ``fuse="chains"`` or ``"all"`` fuse deeper (docs/runtime.md, "Fusion").

        Over a streaming ``from_spark(..., checkpoint=PATH)`` the run is committed only when
        ``collect()`` returns its output, as its last act: a run that fails or is killed
        before commits nothing, and the next ``collect()`` delivers its events again
        (docs/spark.md). With ``commit=False`` the run stays held after ``collect()``
        returned, until the caller, having stored the rows, calls ``out.commit()``; a run
        killed before that is delivered again by the next ``collect()``, under the same
        ``out.run`` (the run's token: store the rows under it, replacing what is there, and
        no kill anywhere loses or duplicates a row).
        """
        check_runtime("collect", runtime)
        check_fuse("collect", fuse)
        if not isinstance(commit, bool):
            raise TypeError(f"collect(commit={commit!r}): give True or False")
        with held_runs(self._node) as held:
            out = self._run(runtime, fuse=fuse, batch_size=batch_size, trace=trace,
                            columns=columns, **options)
            out.report.warn("collect()", "collect(...).", stacklevel=2)
            out.run = held.run
            if not commit:
                out.commit = held.later()  # type: ignore[method-assign]
            else:
                held()  # the commit: nothing between it and the hand-over
        return out

    def _run(self, runtime: str, *, fuse: bool | str | None = None,
             batch_size: int | None = None, trace: Any = None, columns: bool = False,
             **options: Any) -> Collected:
        """:meth:`collect`'s run, with no commit of a streaming source and no warning."""
        if runtime == "inline":
            from actors.config import ShellConfig
            from actors.recorder import TraceSettings

            from .inline_runtime import run_inline

            size = ShellConfig.of(batch_size=batch_size).batch_size  # a bad one fails here
            return run_inline(self.plan(False if fuse is None else fuse), size,
                              trace=TraceSettings.of(trace), columns=columns)
        from .deploy import collect_plan

        if batch_size is not None:
            options["batch_size"] = batch_size
        return collect_plan(self._ray_plan(fuse, trace), trace=trace, columns=columns,
                            **options)

    def _ray_plan(self, fuse: bool | str | None, trace: Any = None) -> Plan:
        """The plan a run to the end on Ray executes: by default (``fuse=None``) with its
        stateless steps fused into their source's or their neighbour's stage, since a hop
        between actors costs more than a filter or a projection (a batch serialised, copied
        and decoded); one actor per step with ``fuse=False``, or when ``trace`` records each
        step by its id."""
        return self.plan(trace is None if fuse is None else fuse)

    # -- Spark sinks ------------------------------------------------------------------------
    def to_spark(self, spark: Any = None, runtime: str = "ray", staging: str | None = None,
                 **options: Any) -> Any:
        """Run the query and return its output CHT as a Spark DataFrame: ``start`` and ``end``
        timestamps (∞ as null) plus the payload's fields (a scalar payload is ``value``).
        Column batches of the output stay columns on the way to Spark, staged as parquet parts
        under ``staging`` (:func:`topology.spark_sink.to_spark`). The DataFrame's
        ``run_report`` (:class:`topology.inline_runtime.RunReport`) holds the run's dead
        letters, late events and accounting; dead letters also warn, as in :meth:`collect`. A
        streaming ``from_spark`` with a checkpoint is committed once the DataFrame is made."""
        from .spark_sink import to_spark

        check_runtime("to_spark", runtime)
        with held_runs(self._node) as commit:
            out = self._run(runtime, columns=True, **options)
            df = to_spark(spark, out, staging=staging, times=time_fields(self._node))
            commit()
        out.report.warn("to_spark()", "to_spark(...).run_report.", stacklevel=2)
        return df

    def write(self, path: str, format: str = "parquet", mode: str = "error", spark: Any = None,
              runtime: str = "ray", staging: str | None = None, **options: Any) -> RunReport:
        """Run the query and write its output CHT through Spark (see :meth:`to_spark`);
        returns the run's :class:`topology.inline_runtime.RunReport` (dead letters, late events,
        accounting), and warns on dead letters. A streaming ``from_spark`` with a checkpoint
        is committed once the files are written."""
        from .spark_sink import WRITE_MODES, write

        check_runtime("write", runtime)
        if mode not in WRITE_MODES:  # (write checks it too, but only after the run)
            raise ValueError(f"write(mode={mode!r}): mode must be one of {WRITE_MODES}")
        with held_runs(self._node) as commit:
            out = self._run(runtime, columns=True, **options)
            write(spark, out, path, format=format, mode=mode, staging=staging,
                  times=time_fields(self._node))
            commit()
        report = out.report
        report.warn("write()", "write(...).", stacklevel=2)
        return report

    def to_spark_stream(self, path: str, format: str = "parquet", spark: Any = None,
                        runtime: str = "ray", **options: Any) -> Any:
        """Run the query and append, at each output CTI, the rows that CTI made final to
        ``path``, exactly once across restarts (:class:`topology.spark_sink.FinalRowsSink`: a
        restarted run on the same path skips what was committed). On Ray the rows are
        appended while the query runs. Returns the sink (``committed``, ``dead_letters``).

        Over a streaming ``from_spark`` with a checkpoint the source's run is held until the
        sink has committed it, so that a run that dies is replayed whole and the pair is
        exactly once end to end (docs/spark.md)."""
        from .spark_sink import FinalRowsSink

        check_runtime("to_spark_stream", runtime)
        resumed = [s for s in spark_streams(self._node) if s.checkpoint is not None]
        run = sum(s.hold() for s in resumed) if resumed else None
        try:
            sink = FinalRowsSink(spark, path, format=format, run=run,
                                 times=time_fields(self._node))
            if runtime == "inline":
                sink.on_messages(self._run("inline", **options))
            else:
                from .deploy import collect_plan

                fuse = options.pop("fuse", None)
                check_fuse("to_spark_stream", fuse)
                collect_plan(self._ray_plan(fuse, options.get("trace")),
                             on_messages=sink.on_messages, **options)
            sink.end()
            for s in resumed:
                s.commit_run()
        finally:  # a failed run stays held on disk, for the next run to replay
            for s in resumed:
                s.held, s.last = False, None
        return sink

    def deploy(self, name: str, *, fuse: bool | str = False, trace: Any = None,
               **options: Any) -> Query:
        """Start the query on Ray under ``name`` and return its live :class:`Query` handle;
        the sources are fed in the background. ``trace`` records every step's messages, as
        in :meth:`collect`. ``name`` is letters, digits and ``- _ .``, starting with a letter,
        a digit or ``_`` (it names the query's actors and its checkpoint folder).

        ``fuse`` runs several steps in one actor: False (the default) one actor per step;
        True or ``"stateless"`` the stateless steps in the stage before them; ``"chains"``
        every run of single-input steps (a source, its filters, a keyed window, a select) in
        one actor; ``"all"`` each connected part of the query in one actor (its sink and a
        partitioned group_apply's partitions apart). Fewer actors cost fewer hops and less
        idle CPU, and run in parallel less (docs/runtime.md, "Fusion")."""
        from .deploy import deploy_plan

        check_query_name(name, "deploy")
        fuse_level("deploy", fuse)
        return deploy_plan(self.plan(fuse), name, trace=trace, **options)


@dataclass(frozen=True)
class WindowedStream:
    """A stream divided into windows; ``aggregate`` or ``apply`` a UDM per window."""

    stream: Stream
    spec: w.WindowSpec
    policy: w.WindowPolicy = w.DEFAULT_POLICY

    def _window(self, udm: Any, kind: str, name: str | None, on_error: str) -> Stream:
        return self.stream._then(n.Window, spec=self.spec, udm=udm, kind=kind,
                                 policy=self.policy, on_error=on_error, name=name)

    def aggregate(self, udm: Any, name: str | None = None, on_error: str = "raise") -> Stream:
        """One result per non-empty window: payload ``udm``'s result (an Aggregate, an
        IncrementalAggregate, a registered name or a function of the payload list)."""
        return self._window(udm, "aggregate", name, on_error)

    def apply(self, udo: Any, name: str | None = None, on_error: str = "raise") -> Stream:
        """Zero or more events per window: one per payload ``udo`` returns."""
        return self._window(udo, "apply", name, on_error)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
