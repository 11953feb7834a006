"""The sources of a :class:`~topology.stream.Stream`: its constructors (``Stream.from_rows``,
``from_events``, ``from_arrow``, ``from_spark``, ``published``), each checking its arguments
where the query writes them and making the source node (:mod:`topology.building.nodes`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any, Self, cast

from operators.events import Message
from topology.building import nodes as n
from topology.building.checks import check_iterable, check_query_name, check_step_name
from topology.spark.held_runs import Batches, SparkStream

#: Rows per column batch of a columnar source (``from_arrow``, ``from_spark``). Large: the
#: cost of a Ray call and of grouping a batch is per batch (measured on W1 on Ray, 2 cores:
#: 32k rows 0.9M events/s, 64k 1.4M, 256k 1.9–2.4M).
COLUMN_BATCH_ROWS = 262_144

#: ``checkpoint=`` not given (``None`` is an explicit choice: no restart state).
UNSET: Any = object()


class Sources:
    """The constructors of :class:`~topology.stream.Stream` (a base class of it)."""

    __slots__ = ()
    _node: n.Node

    def __init__(self, node: n.Node) -> None:
        raise NotImplementedError  # (Stream's)

    @classmethod
    def from_events(cls, messages: Iterable[Message], name: str | None = None) -> Self:
        """Replay a physical stream (Insert / Retract / Cti messages). A message that breaks a
        rule of physical streams (docs/model.md) is not processed: it goes to the query's dead
        letters."""
        check_iterable("from_events", "messages", messages, "Insert, Retract and Cti messages")
        return cls(n.FromEvents(inputs=(), messages=tuple(messages), name=name))

    @classmethod
    def from_rows(cls, rows: Iterable[Any], start: Any, end: Any = None, shape: str = "point",
                  id: Any = None, advance: Any = None, name: str | None = None) -> Self:
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
        return cls(n.FromRows(inputs=(), rows=rows, start=start, end=end, shape=shape,
                                 id=id, advance=advance, name=name))

    @classmethod
    def from_spark(cls, df: Any, start: Any, end: Any = None, shape: str = "point", id: Any = None,
                   advance: Any = None, name: str | None = None, *,
                   checkpoint: Any = UNSET, trigger: dict[str, Any] | None = None,
                   partition_rows: int | None = None, sources: int = 1,
                   staging: str | os.PathLike[str] | None = None) -> Self:
        """Ingest a Spark DataFrame exactly as :meth:`from_rows` ingests rows (time columns
        of timestamp, date or integer type become ticks).

        A **batch** DataFrame means its whole table, whatever the order of its partitions: it
        is read sorted by time (``start``; for edges, an end edge at its ``end``), range by
        range of ``partition_rows`` rows in bounded driver memory
        (:mod:`topology.spark.source`), so its result is the query over the table sorted by
        time, and no row is late unless ``advance`` has a negative delay. Each run reads the
        DataFrame again, except that queries built on the same ``from_spark`` stream and
        running at the same time (deployed with ``hold=True``, then started together) share
        one read (:mod:`topology.building.shared_read`): Spark sorts the table once for all of them.

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
        (:class:`topology.spark.stream.SparkStreamFeeder`), so that each run (each
        ``collect()``) continues the stream where the last run over that checkpoint stopped,
        with no event twice and none lost, even when a run failed half-way. Only the
        source resumes: the query's operators start afresh in each run (unless it is
        deployed with ``checkpoint_dir=`` and restored from a savepoint, which continues the
        stream right after its cut: docs/operations.md, "Savepoints"). The source's dead
        letters and late events are read with
        :func:`topology.spark.source.stream_records(PATH) <topology.spark.source.stream_records>`.
        ``checkpoint=None`` is the explicit choice of no restart state: every run reads the
        stream from its beginning again, as Spark does with a temporary checkpoint."""
        from topology.building.shared_read import SharedRead
        from topology.building.times import spark_clock
        from topology.spark.source import PARTITION_ROWS, spark_row_batches
        from topology.spark.stream import SparkStreamFeeder

        check_step_name(name, "from_spark")
        if not hasattr(df, "isStreaming") or not hasattr(df, "schema"):
            raise TypeError(f"from_spark(df={df!r}): expected a pyspark.sql.DataFrame")
        if df.isStreaming:
            if checkpoint is UNSET:
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
            return cls(n.FromEvents(inputs=(), messages=source, batched=True,
                                       name=name or "spark", clock=spark_clock(df, start)))
        if checkpoint is not UNSET and checkpoint is not None:
            raise ValueError("from_spark: checkpoint= is for streaming DataFrames; a batch "
                             "DataFrame is read whole, sorted by time, on every run")
        if isinstance(sources, bool) or not isinstance(sources, int) or sources < 1:
            raise ValueError(f"from_spark: sources={sources!r}: give an int >= 1 (the number of "
                             f"sources that read the DataFrame in parallel)")
        if sources > 1:
            return cls._from_spark_parts(df, start, end, shape, id, advance, name, sources,
                                            staging)
        rows = PARTITION_ROWS if partition_rows is None else partition_rows
        spark_row_batches(df, start, end, COLUMN_BATCH_ROWS, shape=shape,
                          partition_rows=rows)  # check the arguments now
        # queries built on this stream and running at the same time share one read
        # (topology/building/shared_read.py): Spark sorts the table once for all of them
        batches = Batches(SharedRead(lambda: spark_row_batches(
            df, start, end, COLUMN_BATCH_ROWS, columnar=True, shape=shape,
            partition_rows=rows)), feed="driver")
        return cls._batched(batches, start, end, shape, id, advance, name or "spark",
                               spark_clock(df, start))

    @classmethod
    def _from_spark_parts(cls, df: Any, start: Any, end: Any, shape: str, id: Any, advance: Any,
                          name: str | None, sources: int, staging: Any) -> Self:
        """``from_spark(..., sources=N)``: the union of N portable sources, each reading one
        time-sorted parquet file Spark writes (:class:`topology.spark.staged.StagedTable`)."""
        from topology.building.times import spark_clock
        from topology.spark.frames import check_batch_frame, check_columns
        from topology.spark.staged import StagedPart, StagedTable, staging_directory

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
        parts = [cls._batched(
            Batches(StagedPart(table, i, start, end, COLUMN_BATCH_ROWS), feed="actor"),
            start, end, shape, id, advance, f"{base}[{i}]", spark_clock(df, start))
            for i in range(sources)]
        from topology.spark.table_parts import UnionOfParts

        return cls(UnionOfParts(inputs=tuple(p._node for p in parts), name=base))

    @classmethod
    def from_arrow(cls, data: Any, start: Any, end: Any = None, shape: str = "point",
                   id: Any = None, advance: Any = None, name: str | None = None,
                   batch_rows: int = COLUMN_BATCH_ROWS) -> Self:
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

        from topology.building.arrow_reader import TableBatches, arrow_batches, check_times
        from topology.building.times import arrow_clock, known_schema

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
        return cls._batched(batches, start, end, shape, id, advance, name, clock)

    @classmethod
    def _batched(cls, batches: Iterable[Any], start: Any, end: Any, shape: str, id: Any,
                 advance: Any, name: str | None, clock: str | None = None) -> Self:
        """A source of ready batches (row lists or column batches), ingested like rows;
        ``clock`` is the kind of time its schema says it carries
        (:mod:`topology.building.times`)."""
        stream = cls.from_rows((), start=start, end=end, shape=shape, id=id,
                                  advance=advance, name=name)
        node = cast(n.FromRows, stream._node)
        return cls(dataclasses.replace(node, rows=batches, batched=True, clock=clock))

    @classmethod
    def published(cls, query: str, name: str | None = None) -> Self:
        """The output of the running query ``query`` (deployed with :meth:`deploy`): first
        every event still alive at its current CTI, then its live stream."""
        check_query_name(query, "published", "query")
        return cls(n.Published(inputs=(), query=query, name=name))
