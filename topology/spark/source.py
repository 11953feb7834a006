"""The Spark sources: DataFrames in as events, through Arrow, never row by row (docs/spark.md).

* **batch source** -- :func:`spark_row_batches` reads a batch DataFrame in time order, range by
  range, as Arrow record batches (:func:`ordered_record_batches`, the rule below), turned into
  source batches with ticks in the time columns (:mod:`topology.building.arrow_reader`);
  :func:`ingest_spark` runs them through the same :class:`operators.ingress.Ingress` as
  ``Stream.from_rows``;
* **streaming source** -- :class:`topology.spark.stream.SparkStreamFeeder` reads a streaming
  DataFrame micro-batch by micro-batch, exactly once across restarts (its state beside
  Spark's checkpoint: :mod:`topology.spark.checkpoint`);
* **partition-parallel source** -- :class:`topology.spark.staged.StagedTable`: Spark writes
  the table as N time-sorted parquet files, one source reads each.

This module is the face of the Spark sources: the names above are importable from here.
Spark is imported lazily: only iterating over a DataFrame needs it.

**The rule.** A batch DataFrame has no arrival order: its meaning is its whole table, whatever
the order of its partitions. So it is read *in time order*, range of times by range, and the
driver reads the ranges one after the other. The source therefore sees every row in time
order, and the CTIs its :class:`operators.ingress.AdvanceTime` generates never run ahead of a
row still to come: with ``delay >= 0`` no row is late, and the result is the query over the
whole table -- the same CHT as ``Stream.from_rows`` over the rows sorted by time. Rows with
equal times come in no particular order; only a negative ``delay`` (a CTI past the latest
start) can tell them apart, exactly as it would among sorted rows. Late-event policies keep
their meaning for streaming sources, whose order is the order of arrival.

Three ways of reading, the same rows in the same order (by time; ties as they fall), the first
that applies:

* **the row groups merged by pyarrow in the driver** (:mod:`topology.spark.direct`) -- when
  the DataFrame is a projection of columns of parquet files whose row groups all have
  statistics of the time column, and merging them in the order of their earliest time holds
  at most ``2 * partition_rows`` rows. No row passes through the JVM, not a Spark job runs;
* **a filtered scan per range, sorted in the driver** (:mod:`topology.spark.ranges`) -- when
  the DataFrame is a projection and filter of parquet files whose row groups each span a
  narrow stretch of time, so that each range's scan skips most of them;
* **Spark's distributed sort** (:mod:`topology.spark.ranges`) -- otherwise (edges, plans that
  are more than a scan, row groups holding all times, files without statistics).

The time key is the ``start`` column for points and intervals; for edges, the time a row
happens: its ``end`` when it has one (an end edge), else its ``start``
(:func:`topology.spark.frames.time_key`). The key must be a column of timestamp, date or
integer type; null keys sort first (the ingress sends those rows to its dead letters). The
driver holds at most two ranges of ``partition_rows`` rows at a time, whatever the table's
size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from operators.events import Message
from operators.ingress import AdvanceTime, Ingress
from topology.building.arrow_reader import DEFAULT_BATCH_ROWS, arrow_batches
from topology.spark.checkpoint import stream_records, stream_run
from topology.spark.direct import direct_plan, merged_groups
from topology.spark.frames import check_batch_frame, check_columns, time_key
from topology.spark.ranges import read_in_ranges
from topology.spark.staged import StagedPart, StagedTable, staged_record_batches, staging_directory
from topology.spark.stream import SparkStreamFeeder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "PARTITION_ROWS",
    "SparkStreamFeeder",
    "StagedPart",
    "StagedTable",
    "check_batch_frame",
    "check_columns",
    "coalesced",
    "ingest_spark",
    "ordered_record_batches",
    "spark_row_batches",
    "staged_record_batches",
    "staging_directory",
    "stream_records",
    "stream_run",
    "time_key",
]

#: Rows per range read by one Spark job: what the driver holds at a time is about two ranges
#: (the JVM keeps the next one ready), ~25 MB each for a few narrow columns.
PARTITION_ROWS = 1_000_000

#: The default AdvanceTime (immutable): CTIs only at the end of input and from idle timeouts.
_NO_ADVANCE = AdvanceTime()

def ordered_record_batches(
    df: DataFrame, start: Any, end: Any = None, shape: str = "point",
    partition_rows: int = PARTITION_ROWS, what: str = "from_spark",
    watch: dict[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of a batch DataFrame sorted by their time key, as Arrow record batches read
    range by range (see the module's docstring). Spark runs when iteration starts.

    ``watch``, when given, is filled with what the read did: ``path`` (``"direct"``: the
    parquet row groups merged by pyarrow; ``"one"``: one range sorted in the driver;
    ``"scan"``: one filtered scan per range, each sorted in the driver; ``"sort"``: Spark's
    distributed sort), ``ranges`` (for ``"direct"`` the row groups), for ``"direct"``
    ``held_peak_rows`` (the most rows the merge held) and ``sorted_groups`` (the merges that
    needed a sort), and for ``"one"`` and ``"scan"`` ``held_peak`` (the most ranges the
    driver held at once) and ``range_rows`` (rows per range)."""
    if not (isinstance(partition_rows, int) and not isinstance(partition_rows, bool)
            and partition_rows >= 1):
        raise ValueError(f"{what}: partition_rows={partition_rows!r}: give an int >= 1 (rows "
                         f"per range the driver reads at a time)")
    key = time_key(df, start, end, shape, what)
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        raise TypeError(f"{what}: {type(df).__name__} is not a classic pyspark DataFrame "
                        f"(Spark Connect?); cedar reads batch DataFrames through the JVM of "
                        f"a classic SparkSession")
    watch = {} if watch is None else watch

    def generate() -> Iterator[pa.RecordBatch]:
        direct = direct_plan(df, start, 2 * partition_rows) if shape != "edge" else None
        if direct is not None:  # time-ordered parquet: its row groups merged, no JVM read
            watch.update(path="direct", ranges=len(direct.groups))
            yield from merged_groups(direct, start, watch)
            return
        yield from read_in_ranges(df, key, start, shape, partition_rows, what, watch)

    return generate()


def coalesced(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """Small record batches (Spark's are 10k rows) joined into batches of at least ``rows``
    rows (the last one may be smaller): per-batch costs downstream stay per large batch.

    >>> small = (pa.record_batch({"t": [i, i]}) for i in range(5))
    >>> [b.num_rows for b in coalesced(small, 3)]
    [4, 4, 2]
    """
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        pending.append(batch)
        held += batch.num_rows
        if held >= rows:
            yield _joined(pending)
            pending, held = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def spark_row_batches(
    df: DataFrame, start: Any, end: Any = None, batch_rows: int = DEFAULT_BATCH_ROWS,
    columnar: bool = False, *, shape: str = "point", partition_rows: int = PARTITION_ROWS,
) -> Iterator[Any]:
    """The rows of a batch DataFrame **in time order**, read through Arrow range by range in
    bounded driver memory (:mod:`topology.spark.source`: a batch DataFrame means its whole
    table, whatever the order of its partitions), as lists of at most ``batch_rows`` row
    dicts with the ``start``/``end`` time columns converted to ticks (see
    :func:`arrow_row_batches`); with ``columnar``, column batches where they can be (see
    :func:`arrow_batches`). Rows with a null time are kept (first), so that the Ingress
    dead-letters them. ``shape`` decides the time key (an end edge happens at its end).

    Spark runs when iteration starts: a count, the sort, then one job per range of
    ``partition_rows`` rows, the next computed while this one is consumed.
    """
    check_batch_frame(df, "spark_row_batches")
    check_columns(df, "spark_row_batches", start=start, end=end)
    if not (isinstance(batch_rows, int) and batch_rows >= 1):
        raise ValueError(f"batch_rows={batch_rows!r}: give an int >= 1 (rows per batch)")
    batches = ordered_record_batches(df, start, end, shape, partition_rows, "spark_row_batches")
    return arrow_batches(coalesced(batches, batch_rows), start, end, batch_rows, columnar)


def ingest_spark(
    df: DataFrame,
    start: Any,
    end: Any = None,
    shape: str = "point",
    id: Any = None,
    advance: AdvanceTime = _NO_ADVANCE,
    name: str = "spark",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    partition_rows: int = PARTITION_ROWS,
) -> tuple[list[Message], Ingress]:
    """Ingest a whole batch DataFrame, read in time order (:func:`spark_row_batches`): the
    messages (ending with the final CTI of :meth:`Ingress.end`) and the :class:`Ingress`,
    whose ``late``, ``dead_letters`` and ``stats`` account for every row. The payload of each
    event is its row, with the time columns as ticks.
    """
    ingress = Ingress(start, end=end, shape=shape, id=id, advance=advance, name=name)
    out: list[Message] = []
    for rows in spark_row_batches(df, start, end, batch_rows, shape=shape,
                                  partition_rows=partition_rows):
        out.extend(ingress.push(rows))
    out.extend(ingress.end())
    return out, ingress


