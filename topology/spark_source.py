"""Reading a batch DataFrame as a time-ordered stream of Arrow record batches.

**The rule.** A batch DataFrame has no arrival order: its meaning is its whole table, whatever
the order of its partitions. So it is read *in time order*: Spark sorts it by its time key
(a distributed sort: range partitioning by the key, then a sort within each range), and the
driver reads the ranges one after the other. The source therefore sees every row in time
order, and the CTIs its :class:`operators.ingress.AdvanceTime` generates never run ahead of a
row still to come: with ``delay >= 0`` no row is late, and the result is the query over the
whole table -- the same CHT as ``Stream.from_rows`` over the rows sorted by time. Rows with
equal times come in no particular order (Spark's sort leaves them as they fall); only a
negative ``delay`` (a CTI past the latest start) can tell them apart, exactly as it would
among sorted rows. Late-event policies keep their meaning for streaming sources, whose order
is the order of arrival.

The time key is the ``start`` column for points and intervals; for edges, the time a row
happens: its ``end`` when it has one (an end edge), else its ``start``. The key must be a
column of timestamp, date or integer type; null keys sort first (the ingress sends those
rows to its dead letters).

**Bounded driver memory.** Nothing is collected whole. The table is cut into
``ceil(rows / partition_rows)`` ranges (one count first: cheap for files, whose footers hold
it); each range is one Spark job that ships its rows to the driver as Arrow record batches
(``Dataset.toArrowBatchRdd`` served by ``PythonRDD.toLocalIteratorAndServe``, the machinery
of ``DataFrame.toLocalIterator``, with Arrow instead of pickled rows), and the next range is
computed while the query consumes this one (``prefetch``). The driver holds at most two ranges
(the JVM) plus one batch being converted (Python), whatever the table's size. The sort's
shuffle runs once, before the first range arrives.

Why this path: ``toArrow()`` collects every partition at once; ``toLocalIterator()`` is
partition-wise but pickles rows (~3 s per 1M rows here); ``mapInArrow`` needs pandas in the
driver. The Arrow batch RDD is the same bytes ``toArrow()`` moves, one range at a time, and
needs no Python on the executors at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Rows per range read by one Spark job: what the driver holds at a time is about two ranges
#: (the JVM keeps the next one ready), ~25 MB each for a few narrow columns.
PARTITION_ROWS = 1_000_000

_TIME_TYPES = ("timestamp", "timestamp_ntz", "date", "tinyint", "smallint", "int", "bigint")


def time_key(df: DataFrame, start: Any, end: Any, shape: str, what: str) -> Any:
    """The Spark column a batch DataFrame is sorted by (see the module's rule); a clear error
    when the time columns cannot be sorted on."""
    from pyspark.sql import functions as F

    types = dict(df.dtypes)
    roles = {"start": start, "end": end} if shape == "edge" else {"start": start}
    for role, spec in roles.items():
        if not isinstance(spec, str):
            raise TypeError(
                f"{what}: {role}={spec!r}: a batch DataFrame is read sorted by its time "
                f"column, so {role} must be a column name; compute the time into a column "
                f"first (df.withColumn('{role}', ...))")
        if types[spec] not in _TIME_TYPES:
            raise TypeError(
                f"{what}: {role} column {spec!r} is {types[spec]}; a batch DataFrame is read "
                f"sorted by time, which needs a timestamp, date or integer (ticks) column: "
                f"convert it, e.g. df.withColumn({spec!r}, F.to_timestamp({spec!r}))")
    if shape == "edge":
        return F.coalesce(F.col(end), F.col(start))
    return F.col(start)


def ordered_record_batches(
    df: DataFrame, start: Any, end: Any = None, shape: str = "point",
    partition_rows: int = PARTITION_ROWS, what: str = "from_spark",
) -> Iterator[pa.RecordBatch]:
    """The rows of a batch DataFrame sorted by their time key, as Arrow record batches read
    range by range (see the module's docstring). Spark runs when iteration starts."""
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

    def generate() -> Iterator[pa.RecordBatch]:
        from pyspark.serializers import NoOpSerializer
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.traceback_utils import SCCallSiteSync
        from pyspark.util import _local_iterator_from_socket

        rows = df.count()
        if rows == 0:
            return
        ranges = -(-rows // partition_rows)
        ordered = df.repartitionByRange(ranges, key).sortWithinPartitions(key)
        session = ordered.sparkSession
        large = session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
        schema = to_arrow_schema(ordered.schema, timezone="UTC",
                                 prefers_large_types=large == "true")
        sc = session.sparkContext
        with SCCallSiteSync(sc):
            sock_info = sc._jvm.PythonRDD.toLocalIteratorAndServe(
                ordered._jdf.toArrowBatchRdd(), True)
        for blob in _local_iterator_from_socket(sock_info, NoOpSerializer()):
            yield pa.ipc.read_record_batch(pa.py_buffer(blob), schema)

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
