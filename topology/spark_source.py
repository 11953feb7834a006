"""The Spark sources: DataFrames in as events, through Arrow, never row by row (docs/spark.md).

* **batch source** -- :func:`spark_row_batches` reads a batch DataFrame in time order, range by
  range, as Arrow record batches (:func:`ordered_record_batches`, the rule below), turned into
  source batches with ticks in the time columns (:mod:`topology.arrow_reader`);
  :func:`ingest_spark` runs them through the same :class:`operators.ingress.Ingress` as
  ``Stream.from_rows``;
* **streaming source** -- :class:`SparkStreamFeeder` reads a streaming DataFrame micro-batch
  by micro-batch (``foreachBatch``) in arrival order, replayed micro-batches skipped by
  ``batch_id``; it keeps one Ingress across all micro-batches and, with a checkpoint location,
  commits the Ingress's state and the batch id beside Spark's own checkpoint after each
  micro-batch, so that a restart resumes exactly once. ``Stream.from_spark`` on a streaming
  DataFrame runs through it (:meth:`SparkStreamFeeder.stream`); there is no other streaming
  reader.

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

Three ways of reading, the same rows in the same order (by time; ties as they fall):

* **the row groups merged by pyarrow in the driver** (:func:`_merged_groups`) -- when the
  DataFrame is a projection of columns of parquet files (no filter, no computed or partition
  column: Spark still plans which files it is, ``inputFiles``) whose row groups all have
  statistics of the time column, and merging them in the order of their earliest time holds
  at most ``2 * partition_rows`` rows (:func:`_direct_plan`; a table appended in time order,
  its files in any order). No row passes through the JVM: each row group is read with
  pyarrow (the next one in a thread), cast to the schema Spark's ``toArrow`` gives, and
  the rows before the next group's earliest time leave sorted (Arrow's sort only when they
  are out of order). Not a single Spark job runs, not even the count;
* **a filtered scan per range, sorted in the driver** (:func:`_sorted_ranges`) -- when the
  DataFrame is a deterministic projection and filter of parquet files whose row groups each
  span a narrow stretch of time (a table appended in time order, its files in any order:
  :func:`_time_ordered_files`), and the footers' statistics say the scans would read at most
  :data:`_SCAN_FACTOR` times the table (:func:`_scan_cost`). Range ``i`` is one Spark job,
  ``df.where(b_i <= key < b_i+1)`` (nulls in the first), which parquet's filter pushdown
  turns into a read of the row groups overlapping it; the driver sorts it with Arrow
  (``pyarrow.compute.sort_indices``, multithreaded C++). No shuffle, no sort in Spark, and
  the first range reaches the query as soon as it is read. A table of one range is read so
  whatever its source (no bounds needed), unless it is merged;
* **Spark's distributed sort** (:func:`_sorted_by_spark`) -- otherwise (rows of all times in
  every row group, no statistics, a plan that is more than a scan, edges): range
  partitioning by the key, a sort within each range, then each range as Arrow.

The time key is the ``start`` column for points and intervals; for edges, the time a row
happens: its ``end`` when it has one (an end edge), else its ``start``. The key must be a
column of timestamp, date or integer type; null keys sort first (the ingress sends those
rows to its dead letters).

**Bounded driver memory.** Nothing is collected whole. The table is cut into
``ceil(rows / partition_rows)`` ranges (one count first: cheap for files, whose footers hold
it), whose bounds are quantiles of a sample of the key column (:func:`_sample_bounds`: one
scan of that column instead of ``repartitionByRange``'s scan of every column; edges, whose
key is an expression, and other key types use ``repartitionByRange``). A scanned range is
read whole by one job (``toArrow`` of the filtered DataFrame) and sorted; a range of Spark's
sort ships its rows as Arrow record batches (``Dataset.toArrowBatchRdd`` served by
``PythonRDD.toLocalIteratorAndServe``, the machinery of ``DataFrame.toLocalIterator``, with
Arrow instead of pickled rows). Either way the next range is read while the query consumes
this one (``prefetch``): the driver holds at most two ranges (the JVM, and for scanned ranges
Python) plus one batch being converted, whatever the table's size. Spark's sort runs its
shuffle once, before the first range arrives.

Why this path for Spark's sort: ``toArrow()`` collects every partition at once;
``toLocalIterator()`` is partition-wise but pickles rows (~3 s per 1M rows here);
``mapInArrow`` needs pandas in the driver. The Arrow batch RDD is the same bytes ``toArrow()``
moves, one range at a time, and needs no Python on the executors at all. A scanned range is
one ``toArrow()`` (bounded: it is one range), so its partitions are read in parallel by one
job, not one job per partition.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time as _time
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from actors.checkpoint import load as load_checkpoint
from actors.files import atomic_write
from operators.events import Message
from operators.ingress import AdvanceTime, Ingress

from .arrow_reader import DEFAULT_BATCH_ROWS, arrow_batches, arrow_row_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "PARTITION_ROWS",
    "SparkStreamFeeder",
    "StagedPart",
    "StagedTable",
    "coalesced",
    "ingest_spark",
    "ordered_record_batches",
    "spark_row_batches",
    "staged_record_batches",
    "staging_directory",
    "stream_records",
    "stream_run",
]

#: Rows per range read by one Spark job: what the driver holds at a time is about two ranges
#: (the JVM keeps the next one ready), ~25 MB each for a few narrow columns.
PARTITION_ROWS = 1_000_000

_TIME_TYPES = ("timestamp", "timestamp_ntz", "date", "tinyint", "smallint", "int", "bigint")
#: The default AdvanceTime (immutable): CTIs only at the end of input and from idle timeouts.
_NO_ADVANCE = AdvanceTime()


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
        direct = _direct_plan(df, start, 2 * partition_rows) if shape != "edge" else None
        if direct is not None:  # time-ordered parquet: its row groups merged, no JVM read
            watch.update(path="direct", ranges=len(direct.groups))
            yield from _merged_groups(direct, start, watch)
            return
        rows = df.count()
        if rows == 0:
            return
        ranges = -(-rows // partition_rows)
        if shape != "edge" and ranges == 1:  # one range: no bounds, no sample, no shuffle
            watch.update(path="one", ranges=1)
            yield from _sorted_ranges(df, start, [None], watch)
            return
        if shape != "edge" and _time_ordered_files(df, start):
            bounds = _sample_bounds(df, start, ranges, rows)
            if bounds is not None and _scan_cost(df, start, bounds) <= _SCAN_FACTOR * rows:
                watch.update(path="scan", ranges=len(bounds) + 1)
                yield from _sorted_ranges(df, start, _range_filters(df, start, bounds), watch)
                return
            split = None if bounds is None else _range_labels(df, start, bounds)
        else:
            split = (_sampled_ranges(df, start, ranges, rows)
                     if shape != "edge" and ranges > 1 else None)
        watch.update(path="sort", ranges=ranges if split is None else split[0])
        yield from _sorted_by_spark(df, key, start, ranges, split, what)

    return generate()


def _sorted_by_spark(df: DataFrame, key: Any, start: Any, ranges: int,
                     split: tuple[int, Any] | None, what: str) -> Iterator[pa.RecordBatch]:
    """Spark's distributed sort (a shuffle by range, a sort within each), read range by range
    as Arrow record batches (``toArrowBatchRdd`` served to the driver one partition at a
    time)."""
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.traceback_utils import SCCallSiteSync
    from pyspark.util import _local_iterator_from_socket

    if ranges == 1:
        ordered = df.coalesce(1).sortWithinPartitions(key)
    elif split is None:  # Spark's own range partitioning (it samples by scanning the input)
        ordered = df.repartitionByRange(ranges, key).sortWithinPartitions(key)
    else:
        ordered = df.repartition(split[0], split[1]).sortWithinPartitions(key)
    session = ordered.sparkSession
    large = session.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    schema = to_arrow_schema(ordered.schema, timezone="UTC",
                             prefers_large_types=large == "true")
    sc = session.sparkContext
    with SCCallSiteSync(sc):
        sock_info = sc._jvm.PythonRDD.toLocalIteratorAndServe(  # type: ignore[union-attr]
            ordered._jdf.toArrowBatchRdd(), True)
    column = start if split is not None else None
    latest = None
    for blob in _local_iterator_from_socket(sock_info, NoOpSerializer()):
        batch = pa.ipc.read_record_batch(pa.py_buffer(blob), schema)
        if column is not None and batch.num_rows:  # the ranges came in order (see below)
            low, high = (v.as_py() for v in pc.min_max(batch.column(column)).values())
            if latest is not None and low is not None and low < latest:
                raise RuntimeError(
                    f"{what}: Spark returned the ranges of {column!r} out of order "
                    f"({low} after {latest}): its hash partitioning did not place them "
                    f"as expected (topology/spark_source.py _sampled_ranges)")
            latest = latest if high is None else high
        yield batch


# -- no shuffle: a filtered scan per range, sorted in the driver ------------------------------
#: The filtered scans may read at most this many times the table's rows (the row groups that
#: overlap a range, by their statistics) before Spark's sort is the cheaper way.
_SCAN_FACTOR = 2.0
#: Rows per record batch the driver's sort hands on (each its own buffers, so that a batch
#: held downstream does not keep its whole range alive).
_SORTED_BATCH_ROWS = 65_536
#: Logical plan nodes a DataFrame read with one filtered scan per range may consist of: a
#: projection and filters over files (each scan then reads only what its range needs).
_SCAN_NODES = frozenset({"Project", "Filter", "Relation", "LogicalRelation"})


def _time_ordered_files(df: DataFrame, name: str) -> bool:
    """Whether ``df`` is a deterministic projection and filter of parquet files with a time
    column ``name`` of a type the sampled bounds take: then a range of times can be read by
    a scan that skips the row groups outside it (parquet's statistics, Spark's filter
    pushdown), and :func:`_scan_cost` says how much that saves."""
    if dict(df.dtypes).get(name) not in ("timestamp", "date", "tinyint", "smallint", "int",
                                         "bigint"):
        return False
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        if not plan.deterministic():
            return False
        stack = [plan]
        while stack:
            node = stack.pop()
            if node.nodeName() not in _SCAN_NODES:
                return False
            children = node.children()
            stack.extend(children.apply(i) for i in range(children.size()))
        files = list(df.inputFiles())
    except Exception:  # noqa: BLE001 - a plan this check cannot read is sorted by Spark
        return False
    return bool(files) and all(f.endswith(".parquet") for f in files)


def _scan_cost(df: DataFrame, name: str, bounds: list[int]) -> float:
    """Rows the filtered scans of the ranges cut at ``bounds`` read in all: each row group of
    ``df``'s parquet files counts once per range its time statistics (min, max, nulls) overlap,
    every range when it has none (an INT96 timestamp, a file without statistics). Only the
    footers are read. Infinite when a file cannot be read so."""
    import bisect

    import pyarrow.parquet as pq

    total = 0
    ranges = len(bounds) + 1
    for uri in df.inputFiles():
        try:
            fs, path = pafs.FileSystem.from_uri(uri)
            meta = pq.read_metadata(path, filesystem=fs)
        except (OSError, ValueError, pa.ArrowException):
            return float("inf")
        paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if name not in paths:
            return float("inf")
        index = paths.index(name)
        scale = _stat_scale(meta.schema.column(index))
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            stats = group.column(index).statistics
            if scale is None or stats is None or not stats.has_min_max:
                total += group.num_rows * ranges
                continue
            lo, hi = int(stats.min_raw) * scale, int(stats.max_raw) * scale
            first, last = bisect.bisect_right(bounds, lo), bisect.bisect_right(bounds, hi)
            touched = last - first + 1 + (1 if first > 0 and stats.null_count else 0)
            total += group.num_rows * touched
    return total


def _stat_scale(column: Any) -> int | None:
    """The factor from a parquet column's raw statistics to the sampled keys' units
    (microseconds, days, integers); None when they cannot be compared (INT96, nanoseconds,
    anything else)."""
    import json

    physical = column.physical_type
    if physical not in ("INT32", "INT64"):
        return None
    logical = json.loads(column.logical_type.to_json())
    kind = logical.get("Type")
    if kind in ("None", "Int", "Date"):
        return 1
    if kind == "Timestamp":
        return {"milliseconds": 1_000, "microseconds": 1}.get(logical.get("timeUnit"))
    return None


def _literal(df: DataFrame, name: str, v: int) -> Any:
    """A Spark literal of the type of column ``name`` for the sampled key ``v``."""
    from pyspark.sql import functions as F

    kind = dict(df.dtypes)[name]
    if kind == "timestamp":
        return F.expr(f"timestamp_micros({v})")
    if kind == "date":
        return F.expr(f"date_from_unix_date({v})")
    return F.lit(v).cast(kind)


def _range_filters(df: DataFrame, name: str, bounds: list[int]) -> list[Any]:
    """The Spark conditions of the ranges cut at ``bounds``: nulls and times below the first
    bound, ``[b_i, b_i+1)``, then times from the last bound on. Each row meets exactly one."""
    from pyspark.sql import functions as F

    if not bounds:
        return [None]
    key = F.col(name)
    cuts = [_literal(df, name, b) for b in bounds]
    out = [key.isNull() | (key < cuts[0])]
    out += [(key >= lo) & (key < hi) for lo, hi in pairwise(cuts)]
    out.append(key >= cuts[-1])
    return out


def _range_to_arrow(df: DataFrame) -> pa.Table:
    """One range of a batch DataFrame, whole, as Arrow (one Spark job over its partitions)."""
    return _frame_to_arrow(df)


def _time_order(table: pa.Table, name: str) -> np.ndarray:
    """The row order of ``table`` by column ``name``, nulls first (Arrow's sort)."""
    try:  # pyarrow >= 25: null placement per sort key
        order = pc.sort_indices(table, sort_keys=[(name, "ascending", "at_start")])
    except (TypeError, ValueError, pa.ArrowException):
        order = pc.sort_indices(table, sort_keys=[(name, "ascending")],
                                null_placement="at_start")
    return order.to_numpy()


def _sorted_ranges(df: DataFrame, name: str, filters: list[Any],
                   watch: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """The ranges ``df.where(f)`` for ``f`` in ``filters`` (None: the whole of ``df``), each
    read whole as Arrow by one Spark job and sorted by ``name`` in the driver (Arrow's sort,
    nulls first), the next one read and sorted in a thread while this one is consumed: the
    driver holds at most two ranges. A closed iterator cancels the Spark job still running."""
    from concurrent.futures import Future, ThreadPoolExecutor

    sc = df.sparkSession.sparkContext
    group = f"cedar-ranges-{id(watch):x}-{_time.monotonic_ns()}"
    lock = threading.Lock()
    held = [0]
    watch.update(held_peak=0, range_rows=[])

    def fetch(where: Any) -> tuple[pa.Table, np.ndarray]:
        sc.setJobGroup(group, "cedar: a time range of from_spark", interruptOnCancel=True)
        table = _range_to_arrow(df if where is None else df.where(where)).combine_chunks()
        order = _time_order(table, name)
        with lock:
            held[0] += 1
            watch["held_peak"] = max(watch["held_peak"], held[0])
            watch["range_rows"].append(table.num_rows)
        return table, order

    pool = ThreadPoolExecutor(1, thread_name_prefix="cedar-spark-range")
    pending: Future[tuple[pa.Table, np.ndarray]] | None = pool.submit(fetch, filters[0])
    try:
        for i in range(len(filters)):
            assert pending is not None
            table, order = pending.result()
            pending = pool.submit(fetch, filters[i + 1]) if i + 1 < len(filters) else None
            for lo in range(0, len(order), _SORTED_BATCH_ROWS):
                yield from table.take(order[lo:lo + _SORTED_BATCH_ROWS]).to_batches()
            del table, order
            with lock:
                held[0] -= 1
    finally:
        if pending is not None and not pending.done():
            sc.cancelJobGroup(group)
        pool.shutdown(wait=False, cancel_futures=True)


# -- no JVM at all: time-ordered parquet row groups read with pyarrow in the driver -----------
#: Whether the reader may read the row groups of time-ordered parquet files itself
#: (:func:`_direct_plan`); tests switch it off to exercise Spark's ways.
_DIRECT = True
#: Logical plan nodes a DataFrame read directly may consist of: files, and column projections.
_DIRECT_NODES = frozenset({"Project", "Relation", "LogicalRelation"})
#: Footer metadata of parquet files whose times Spark would rebase (written by Spark 2 or in
#: its legacy modes): pyarrow would read them as written, so Spark reads those.
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


class _Group:
    """One parquet row group as the direct reader sees it: where it is, its rows, the range
    of its time key (None when every key is null) and how many keys are null."""

    __slots__ = ("file", "high", "index", "low", "nulls", "rows")

    def __init__(self, file: int, index: int, rows: int, low: int | None, high: int | None,
                 nulls: int) -> None:
        self.file, self.index, self.rows = file, index, rows
        self.low, self.high, self.nulls = low, high, nulls


class _DirectPlan:
    """How to read a DataFrame's parquet files directly (:func:`_direct_plan`): the files
    (filesystem, path, footer), the row groups in the order of their earliest time, the
    columns and the Arrow schema Spark's ``toArrow`` would give."""

    def __init__(self, files: list[tuple[Any, str, Any]], groups: list[_Group],
                 columns: list[str], schema: pa.Schema, held_rows: int) -> None:
        self.files, self.groups, self.columns, self.schema = files, groups, columns, schema
        self.held_rows = held_rows  # the most rows the merge may hold (its bound)

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)

    def read(self, group: _Group) -> pa.Table:
        """Row group ``group``, its columns in the DataFrame's order, cast to the schema."""
        import pyarrow.parquet as pq

        fs, path, meta = self.files[group.file]
        with fs.open_input_file(path) as source:
            pf = pq.ParquetFile(source, metadata=meta)
            table = pf.read_row_group(group.index, columns=self.columns)
        table = table.select(self.columns)
        if not table.schema.equals(self.schema, check_metadata=False):
            table = table.cast(self.schema)
        return table


def _direct_plan(df: DataFrame, name: str, limit: int) -> _DirectPlan | None:
    """A plan to read ``df`` in time order without Spark moving a row, or None: when ``df``
    is a deterministic projection of columns of parquet files (no filter, no computed
    column, no partition column) whose row groups all have statistics of the time column
    ``name``, and the merge of the row groups in the order of their earliest time
    (:func:`_merged_groups`) never holds more than ``limit`` rows. Spark still plans the read
    (which files the DataFrame is: ``inputFiles``); only the footers are read here."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if not _DIRECT or dict(df.dtypes).get(name) not in ("timestamp", "date", "tinyint",
                                                         "smallint", "int", "bigint"):
        return None
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        if not plan.deterministic():
            return None
        stack = [plan]
        while stack:
            node = stack.pop()
            kind = node.nodeName()
            if kind not in _DIRECT_NODES:
                return None
            if kind == "Project":
                exprs = node.projectList()
                if any(exprs.apply(i).nodeName() != "AttributeReference"
                       for i in range(exprs.size())):
                    return None
            children = node.children()
            stack.extend(children.apply(i) for i in range(children.size()))
        uris = list(df.inputFiles())
        large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
        schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=large == "true")
    except Exception:  # noqa: BLE001 - a plan this check cannot read is read by Spark
        return None
    return _parquet_plan(uris, list(df.columns), schema, name, limit)


def _parquet_plan(uris: list[str], columns: list[str], schema: pa.Schema, name: str,
                  limit: int) -> _DirectPlan | None:
    """The direct read of the parquet files ``uris`` (their ``columns``, as ``schema``) in
    the order of the time column ``name``, or None when a file cannot be read so (no
    statistics of ``name`` in some row group, times pyarrow would read otherwise than Spark,
    a missing column, a type that does not cast) or the merge would hold more than
    ``limit`` rows. Only the footers are read."""
    import pyarrow.parquet as pq

    if not uris or not all(u.endswith(".parquet") for u in uris):
        return None
    if len(set(columns)) != len(columns):
        return None
    files: list[tuple[Any, str, Any]] = []
    groups: list[_Group] = []
    for f, uri in enumerate(uris):
        try:
            fs, path = pafs.FileSystem.from_uri(uri)
            meta = pq.read_metadata(path, filesystem=fs)
            arrow = meta.schema.to_arrow_schema()
            empty = arrow.empty_table().select(columns)
            empty.cast(schema)  # the types Spark gives can be had from the file's
        except Exception:  # noqa: BLE001 - unreadable, a missing column, an odd type: Spark
            return None
        if any(k in (meta.metadata or {}) for k in _LEGACY_KEYS):
            return None
        paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
        if name not in paths:
            return None
        index = paths.index(name)
        scale = _stat_scale(meta.schema.column(index))
        if scale is None:
            return None
        files.append((fs, path, meta))
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            if group.num_rows == 0:
                continue
            stats = group.column(index).statistics
            if stats is None or not stats.has_null_count:
                return None
            low: int | None
            high: int | None
            if stats.has_min_max:
                low, high = int(stats.min_raw) * scale, int(stats.max_raw) * scale
            elif stats.null_count == group.num_rows:
                low = high = None
            else:
                return None
            groups.append(_Group(f, g, group.num_rows, low, high, stats.null_count))
    timed = sorted((g for g in groups if g.low is not None),
                   key=lambda g: (g.low, g.file, g.index))
    untimed = [g for g in groups if g.low is None]
    held = _merge_bound(timed)
    if held > limit:
        return None
    return _DirectPlan(files, untimed + timed, columns, schema, held)


def _merge_bound(timed: list[_Group]) -> int:
    """The most rows :func:`_merged_groups` may hold at once over ``timed`` (row groups in
    the order of their earliest time): after reading group ``j``, the rows it keeps are
    those at or after group ``j + 1``'s earliest time, found only in the groups read so far
    that reach that far."""
    import heapq

    reach: list[tuple[int, int]] = []  # (high, rows) of the groups read that may hold rows
    peak = held = 0
    for j, g in enumerate(timed):
        assert g.high is not None
        heapq.heappush(reach, (g.high, g.rows))
        held += g.rows
        peak = max(peak, held)  # the group just read, with what was kept before
        nxt = timed[j + 1].low if j + 1 < len(timed) else None
        while reach and (nxt is None or reach[0][0] < nxt):
            held -= heapq.heappop(reach)[1]
    return peak


def _keys(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name)
    kind = pa.int32() if pa.types.is_date32(column.type) else pa.int64()
    return pc.cast(column, kind).to_numpy()


def _merged_groups(plan: _DirectPlan, name: str,
                   watch: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """The rows of ``plan``'s row groups in time order, null times first: the groups are read
    in the order of their earliest time (the next one read in a thread while this one is
    consumed); after reading group ``j`` every held row earlier than group ``j + 1``'s
    earliest time is final (no group still to read holds an earlier one) and leaves, sorted
    (Arrow's sort, skipped when the rows are in order already). Null times are read first,
    from the groups that have any."""
    from concurrent.futures import ThreadPoolExecutor

    groups = plan.groups
    watch.update(held_peak_rows=0, sorted_groups=0)
    pool = ThreadPoolExecutor(1, thread_name_prefix="cedar-parquet-group")
    try:
        for g in groups:  # null times first (a row of a null time is a dead letter)
            if g.nulls:
                t = plan.read(g)
                t = t.filter(pc.is_null(t.column(name)))
                yield from t.to_batches(max_chunksize=_SORTED_BATCH_ROWS)
        timed = [g for g in groups if g.low is not None]
        pending = pool.submit(plan.read, timed[0]) if timed else None
        held: pa.Table | None = None
        for j, g in enumerate(timed):
            assert pending is not None
            table = pending.result()
            pending = pool.submit(plan.read, timed[j + 1]) if j + 1 < len(timed) else None
            if g.nulls:
                table = table.filter(pc.is_valid(table.column(name)))
            held = table if held is None else pa.concat_tables([held, table])
            watch["held_peak_rows"] = max(watch["held_peak_rows"], held.num_rows)
            keys = _keys(held, name)
            if len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
                order = np.argsort(keys, kind="stable")
                held, keys = held.take(order), keys[order]
                watch["sorted_groups"] += 1
            nxt = timed[j + 1].low if j + 1 < len(timed) else None
            cut = len(keys) if nxt is None else int(np.searchsorted(keys, nxt, side="left"))
            yield from held.slice(0, cut).to_batches(max_chunksize=_SORTED_BATCH_ROWS)
            held = held.slice(cut)
            del table, keys
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


#: Keys sampled per range to place the range bounds (each range is then within a few percent
#: of ``partition_rows``; Spark's own range partitioning samples about 60).
_SAMPLES_PER_RANGE = 1_000


def _sampled_ranges(df: DataFrame, name: str, ranges: int, rows: int) -> tuple[int, Any] | None:
    """How to cut ``df`` into time ranges without ``repartitionByRange``'s sampling pass: the
    number of ranges and the column to hash-partition by, or None (use
    ``repartitionByRange``) unless the key is the column ``name`` of timestamp (with a time
    zone), date or integer type (:func:`_sample_bounds`, :func:`_range_labels`)."""
    bounds = _sample_bounds(df, name, ranges, rows)
    return None if bounds is None else _range_labels(df, name, bounds)


def _sample_bounds(df: DataFrame, name: str, ranges: int, rows: int) -> list[int] | None:
    """The bounds that cut ``df`` into about ``ranges`` ranges of equal rows: quantiles of a
    Bernoulli sample of the key column ``name`` alone (parquet reads that column only), as
    microseconds, days or integers (the column's type), each range holding some of the
    sample; None unless the column is a timestamp (with a time zone), date or integer, or
    when it holds no time at all."""
    from pyspark.sql import functions as F

    kind = dict(df.dtypes)[name]
    if kind not in ("timestamp", "date", "tinyint", "smallint", "int", "bigint"):
        return None
    fraction = min(1.0, _SAMPLES_PER_RANGE * ranges / rows)
    picked = df.select(F.col(name).alias("t")).where(F.col("t").isNotNull())
    if fraction < 1.0:
        picked = picked.sample(fraction=fraction, seed=ranges)
    keys = _frame_to_arrow(picked).column("t")
    if len(keys) == 0:
        return None
    values = np.sort(keys.cast(pa.int32() if kind == "date" else pa.int64()).to_numpy())
    cuts = values[(np.arange(1, ranges) * len(values)) // ranges] if ranges > 1 else values[:0]
    return sorted(set(cuts.tolist()) - {int(values[0])})  # each range holds some sample


def _range_labels(df: DataFrame, name: str, bounds: list[int]) -> tuple[int, Any] | None:
    """The ranges cut at ``bounds`` as a hash partitioning: their number and, per row, the
    *label* of its range: an integer whose Murmur3 hash modulo the number of ranges is that
    range's index (found by asking Spark to hash 0, 1, 2, ...), so that
    ``repartition(n, label)`` -- Spark's hash partitioning, ``pmod(hash(label), n)`` -- puts
    range ``i`` in partition ``i``. ``repartitionByRange`` would find its bounds by scanning
    every column of the input once before the shuffle scans it again (a third of the sort's
    time on parquet files). The reader checks that the ranges came in order and fails loudly
    if Spark ever partitioned otherwise. None (use ``repartitionByRange``) in the unlikely
    case the labels were not found."""
    from pyspark.sql import functions as F

    n = len(bounds) + 1
    if n == 1:
        return 1, F.lit(0)
    session = df.sparkSession
    found: dict[int, int] = {}
    for i, p in session.range(0, 64 * n).select(
            "id", F.expr(f"pmod(hash(id), {n})")).collect():
        found.setdefault(p, i)
    if len(found) < n:  # 64n integers missed a residue: chance e^-64
        return None
    labels = [F.lit(found[p]).cast("long") for p in range(n)]

    def tree(lo: int, hi: int) -> Any:  # the label of range bisect_right(bounds, key)
        if lo == hi:
            return labels[lo]
        mid = (lo + hi + 1) // 2
        return F.when(F.col(name) < _literal(df, name, bounds[mid - 1]), tree(lo, mid - 1)) \
            .otherwise(tree(mid, hi))

    return n, F.when(F.col(name).isNull(), labels[0]).otherwise(tree(0, n - 1))


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


# -- the sources ------------------------------------------------------------------------------
def _check_batch_frame(df: Any, what: str) -> None:
    if not hasattr(df, "isStreaming") or not hasattr(df, "schema"):
        raise TypeError(f"{what}: expected a pyspark.sql.DataFrame, got {type(df).__name__}")
    if df.isStreaming:
        raise ValueError(f"{what}: this DataFrame is a streaming one; read it with "
                         f"SparkStreamFeeder (foreachBatch), which ingests it micro-batch by "
                         f"micro-batch")


def _check_columns(df: Any, what: str, **specs: Any) -> None:
    columns = set(df.columns)
    for role, spec in specs.items():
        if isinstance(spec, str) and spec not in columns:
            raise ValueError(f"{what}: {role}={spec!r} is not a column of the DataFrame; its "
                             f"columns are {sorted(columns)}")


def _frame_to_arrow(df: DataFrame) -> pa.Table:
    """A micro-batch of a streaming source, whole (a micro-batch is bounded by its trigger)."""
    if hasattr(df, "toArrow"):  # PySpark >= 4
        return df.toArrow()
    # PySpark 3.x (where a DataFrame's unknown attribute reads as a Column)
    return pa.Table.from_batches(df._collect_as_arrow())  # type: ignore[operator]


def spark_row_batches(
    df: DataFrame, start: Any, end: Any = None, batch_rows: int = DEFAULT_BATCH_ROWS,
    columnar: bool = False, *, shape: str = "point", partition_rows: int = PARTITION_ROWS,
) -> Iterator[Any]:
    """The rows of a batch DataFrame **in time order**, read through Arrow range by range in
    bounded driver memory (:mod:`topology.spark_source`: a batch DataFrame means its whole
    table, whatever the order of its partitions), as lists of at most ``batch_rows`` row
    dicts with the ``start``/``end`` time columns converted to ticks (see
    :func:`arrow_row_batches`); with ``columnar``, column batches where they can be (see
    :func:`arrow_batches`). Rows with a null time are kept (first), so that the Ingress
    dead-letters them. ``shape`` decides the time key (an end edge happens at its end).

    Spark runs when iteration starts: a count, the sort, then one job per range of
    ``partition_rows`` rows, the next computed while this one is consumed.
    """
    _check_batch_frame(df, "spark_row_batches")
    _check_columns(df, "spark_row_batches", start=start, end=end)
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


#: What :meth:`SparkStreamFeeder.stream`'s micro-batch function waits for between checks that
#: the consumer is still there (seconds).
_ACK_WAIT_S = 0.5


class _Stopped(RuntimeError):
    """Raised inside ``foreachBatch`` when the consumer stopped: Spark does not commit."""


def _schema_of(df: Any) -> dict[str, str]:
    """Column name -> Spark type (``simpleString``), in order."""
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def _check_time_types(df: Any, what: str, **specs: Any) -> None:
    """A clear error, naming the column, for a time column Spark cannot give as ticks."""
    types = _schema_of(df)
    for role, spec in specs.items():
        if isinstance(spec, str) and types.get(spec) not in _TIME_TYPES:
            raise TypeError(
                f"{what}: {role} column {spec!r} is {types.get(spec)}; a time column must be "
                f"of timestamp, date or integer (ticks) type: convert it, e.g. "
                f"df.withColumn({spec!r}, F.to_timestamp({spec!r}))")


def _drift(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """The columns whose presence or type differs between two schemas, described."""
    out = [f"{c!r} was {saved[c]}, is now {now[c]}" for c in saved
           if c in now and saved[c] != now[c]]
    out += [f"{c!r} ({saved[c]}) is gone" for c in saved if c not in now]
    out += [f"{c!r} ({now[c]}) is new" for c in now if c not in saved]
    return out


class SparkStreamFeeder:
    """Feeds a streaming DataFrame into one :class:`Ingress`, micro-batch by micro-batch.

    :meth:`start` runs ``df.writeStream.foreachBatch(self.process_batch)``; each micro-batch is
    read through Arrow (:func:`arrow_row_batches`), pushed into the same Ingress (so ids, CTIs
    and late handling continue across micro-batches), and the resulting messages are handed to
    ``on_messages(list[Message])`` (nothing is called for a micro-batch that yields none).
    :meth:`stream` is the same, pulled by a consumer (``Stream.from_spark`` runs it).

    ``foreachBatch`` is at-least-once: after a failure Spark runs the last uncommitted
    micro-batch again with the same ``batch_id``. A batch whose id is not above the last one
    processed is skipped and counted in ``replayed``.

    With ``checkpoint_location`` the Spark query keeps its offsets there, and the feeder keeps
    its own state (the Ingress snapshot, the last batch id and the DataFrame's schema) in
    ``<checkpoint_location>/cedar_feeder.pkl``, written atomically after each micro-batch; a new
    feeder on the same checkpoint location resumes from it. Delivery to ``on_messages`` is then
    exactly once, except when the process dies between ``on_messages`` and the state write:
    that one micro-batch is delivered again, as the same messages (the Ingress is
    deterministic). A DataFrame whose columns differ from the checkpoint's (schema drift
    across a restart) is refused with an error naming the columns.

    Time columns given by name must be of timestamp, date or integer type (a clear error
    otherwise); a row whose time is null or off the time axis goes to the Ingress's dead
    letters, whose reason names the column.

    ``end()`` (after the query has stopped) emits the Ingress's final CTI; ``poll()`` the idle
    CTI of ``AdvanceTime(idle_timeout=...)``.

    **A held run** (``stream(hold=True)``, what ``to_spark_stream`` asks for): the consumer's
    output becomes durable only at the end of the run (a sink that commits per output CTI,
    fed by operators that keep state), while Spark commits every micro-batch as it goes. So
    each micro-batch of a held run is also written to a log beside the state
    (``<checkpoint_location>/cedar_run/<batch_id>.pkl``) before Spark may commit it, and
    until the consumer calls :meth:`commit_run` the run is not over: a run that dies is
    replayed whole by the next one -- the Ingress from its state at the run's start, the
    logged micro-batches, then the micro-batches Spark had not committed -- so the consumer
    sees the same stream again, and a sink that skips what it committed (``run`` below)
    writes every row once. :attr:`run` counts the committed runs: the token that tells a
    sink whether it sees a replay of its last run or a new one.
    """

    def __init__(
        self,
        df: DataFrame,
        start: Any,
        end: Any = None,
        shape: str = "point",
        id: Any = None,
        advance: AdvanceTime = _NO_ADVANCE,
        name: str = "spark",
        on_messages: Callable[[list[Message]], Any] | None = None,
        checkpoint_location: str | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> None:
        if not getattr(df, "isStreaming", False):
            raise ValueError("SparkStreamFeeder needs a streaming DataFrame (spark.readStream); "
                             "read a batch DataFrame with ingest_spark or spark_row_batches")
        _check_columns(df, "SparkStreamFeeder", start=start, end=end, id=id)
        _check_time_types(df, "SparkStreamFeeder", start=start, end=end)
        self.df = df
        self.schema = _schema_of(df)
        self.start_col, self.end_col = start, end
        self.ingress = Ingress(start, end=end, shape=shape, id=id, advance=advance, name=name)
        self.on_messages = on_messages
        self.checkpoint_location = checkpoint_location
        self.batch_rows = batch_rows
        #: The id of the last micro-batch processed (-1: none).
        self.last_batch_id = -1
        #: Micro-batches processed, and replayed micro-batches skipped.
        self.batches = 0
        self.replayed = 0
        #: Every message emitted, when no ``on_messages`` callback is given.
        self.messages: list[Message] = []
        self.query: StreamingQuery | None = None
        #: Runs committed with :meth:`commit_run` (a held run's token; see the class doc).
        self.run = 0
        #: The held run not committed yet: the Ingress at its start and its logged batch ids.
        self._held: dict[str, Any] | None = None
        #: The Ingress as last saved (what :meth:`commit_run` commits: not the run's end CTI).
        self._saved_ingress: dict[str, Any] | None = None
        #: What the Ingress recorded during the last run of :meth:`stream` (see
        #: :meth:`run_records`), taken at the run's end; None until a run ended.
        self._run_records: dict[str, Any] | None = None
        if checkpoint_location is not None:
            self._load_state()
        if self._saved_ingress is None:
            self._saved_ingress = self.ingress.snapshot()

    # -- state --------------------------------------------------------------------------------
    def _state_path(self) -> str:
        return _state_path(self.checkpoint_location or "")

    def _load_state(self) -> None:
        try:  # read the way atomic_write wrote it, a storage URI included
            state = load_checkpoint(self._state_path())
        except FileNotFoundError:
            return
        saved = state.get("schema")
        if saved is not None and saved != self.schema:
            changes = "; ".join(_drift(saved, self.schema))
            raise ValueError(
                f"SparkStreamFeeder: the DataFrame's columns differ from those of the stream "
                f"checkpointed at {self.checkpoint_location!r}: {changes}. "
                f"A restart resumes that stream, so it must read the same columns: restore "
                f"them, or start a new stream with a new checkpoint location")
        self.ingress.restore(state["ingress"])
        self.last_batch_id = state["last_batch_id"]
        self.run = state.get("run", 0)
        self._held = state.get("held")
        self._saved_ingress = state["ingress"]

    def _save_state(self) -> None:
        path = self._state_path()
        self._saved_ingress = self.ingress.snapshot()
        state = {"ingress": self._saved_ingress, "last_batch_id": self.last_batch_id,
                 "schema": self.schema, "run": self.run, "held": self._held}
        atomic_write(path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))

    # -- a held run -----------------------------------------------------------------------------
    def _log_batch(self, table: pa.Table, batch_id: int, start: dict[str, Any]) -> None:
        """Log a held run's micro-batch before its id is saved (and so before Spark may
        commit it); ``start`` is the Ingress's state at the run's start."""
        if self._held is None:
            self._held = {"ingress": start, "batches": []}
        atomic_write(_join(self._run_dir(), f"{batch_id}.pkl"),
                     pickle.dumps(table, protocol=pickle.HIGHEST_PROTOCOL))
        self._held["batches"].append(batch_id)

    def _run_dir(self) -> str:
        return _join(self.checkpoint_location or "", "cedar_run")

    def commit_run(self) -> None:
        """The consumer made the held run's output durable: the run is over. The Ingress's
        state after the run's last micro-batch becomes the next run's start (not the run's
        end CTI: the end of a run is not the end of the stream), the log is dropped and
        :attr:`run` counts one more. Without a checkpoint location, nothing to do."""
        if self.checkpoint_location is None:
            return
        try:
            on_disk = load_checkpoint(self._state_path())
        except FileNotFoundError:
            on_disk = {"run": 0, "last_batch_id": -1}
        if (on_disk.get("run", 0), on_disk["last_batch_id"]) != (self.run, self.last_batch_id):
            raise RuntimeError(
                f"SparkStreamFeeder.commit_run: the stream checkpointed at "
                f"{self.checkpoint_location!r} went on after this run (a later run over it "
                f"replayed or committed it); this run's commit would undo that")
        if self._saved_ingress is not None:
            self.ingress.restore(self._saved_ingress)
        self._held = None
        self.run += 1
        self._save_state()  # the commit (one atomic write); the log is no longer needed
        # (a kill before it is deleted leaves it to the next run: :meth:`_clean_log`)
        _delete_dir(self._run_dir())

    def _clean_log(self) -> None:
        """Delete the micro-batch logs no held run replays: those a run left when it was
        killed after its commit and before it deleted them (never read again, they were
        only leaked)."""
        if self.checkpoint_location is None:
            return
        keep = set() if self._held is None else {f"{b}.pkl" for b in self._held["batches"]}
        if keep:
            _delete_files_but(self._run_dir(), keep)
        else:
            _delete_dir(self._run_dir())

    # -- one micro-batch ----------------------------------------------------------------------
    def ingest(self, table: pa.Table, now: float | None = None) -> list[Message]:
        """Push one micro-batch (an Arrow table) into the Ingress; its messages. Nothing is
        committed until :meth:`commit`."""
        if table.column_names != list(self.schema):
            raise ValueError(
                f"SparkStreamFeeder: a micro-batch has columns {table.column_names}, the "
                f"stream {list(self.schema)}; its schema must not change between micro-batches")
        out: list[Message] = []
        push = self.ingress.push
        now = _time.monotonic() if now is None else now
        for rows in arrow_row_batches([table], self.start_col, self.end_col, self.batch_rows):
            out.extend(push(rows, now=now))
        return out

    def commit(self, batch_id: int) -> None:
        """Record micro-batch ``batch_id`` as done: with a checkpoint location, the Ingress's
        state and the batch id are written (atomically) before Spark commits the batch."""
        self.last_batch_id = batch_id
        self.batches += 1
        if self.checkpoint_location is not None:
            self._save_state()

    def process_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` function: ingest one micro-batch unless it is a replay."""
        if batch_id <= self.last_batch_id:
            self.replayed += 1
            return
        self._deliver(self.ingest(_frame_to_arrow(batch_df)))
        self.commit(batch_id)

    def _deliver(self, out: list[Message]) -> None:
        if not out:
            return
        if self.on_messages is None:
            self.messages.extend(out)
        else:
            self.on_messages(out)

    # -- pulled by a consumer -------------------------------------------------------------------
    def stream(self, trigger: dict[str, Any] | None = None,
               hold: bool = False) -> Iterator[list[Message]]:
        """Run the Spark query and yield each micro-batch's messages (a non-empty list) as
        the consumer asks for them; ``trigger`` as in :meth:`start` (default
        ``{"availableNow": True}``: every input available now, then the run ends).

        A micro-batch is committed -- the feeder's state, then Spark's -- only once the
        consumer asks for more after taking its messages; if the consumer stops (closes the
        generator, or fails) first, the micro-batch is committed by neither, and the next run
        on the same checkpoint reads it again. So a run over a checkpoint location resumes
        where the last one stopped: no event twice, none lost.

        At the end of the run the Ingress's final CTI is yielded, so that the run's results
        are final; it is not committed: the end of a run is not the end of the stream, and
        the next run continues the stream from the last micro-batch. All Ingress work
        happens in the consumer's thread (the idle CTI of ``AdvanceTime(idle_timeout=...)``
        included, checked while no micro-batch arrives).

        With ``hold`` (and a checkpoint location) the run is held (see the class doc): its
        micro-batches are logged, and it ends only with :meth:`commit_run`, which the
        consumer calls once the run's output is durable; a run that died held is replayed
        first, from its start, whatever ``hold`` is (without ``hold`` the replayed run is
        committed when this one ends).
        """
        held = self.checkpoint_location is not None and (hold or self._held is not None)
        self._clean_log()
        start = self.ingress.snapshot()
        replay: list[int] = []
        if self._held is not None:  # a held run died: the same stream again, from its start
            start = self._held["ingress"]
            self.ingress.restore(start)
            replay = list(self._held["batches"])
        self._run_records = None
        before = self._counts()
        handoff: queue.Queue[Any] = queue.Queue()
        acks: queue.Queue[bool] = queue.Queue()
        closed = threading.Event()
        done = object()

        def on_batch(batch_df: DataFrame, batch_id: int) -> None:
            if closed.is_set():
                raise _Stopped("cedar: the consumer of this stream stopped")
            if batch_id <= self.last_batch_id:
                self.replayed += 1
                return
            handoff.put((_frame_to_arrow(batch_df), batch_id))
            while True:  # until the consumer took the messages and committed (or stopped)
                try:
                    ok = acks.get(timeout=_ACK_WAIT_S)
                except queue.Empty:
                    if closed.is_set():
                        ok = False
                    else:
                        continue
                if not ok:
                    raise _Stopped(f"cedar: the consumer stopped before micro-batch "
                                   f"{batch_id} was committed; it will be read again")
                return

        writer = self.df.writeStream.foreachBatch(on_batch)
        if self.checkpoint_location is not None:
            writer = writer.option("checkpointLocation", self.checkpoint_location)
        query = writer.trigger(**(trigger or {"availableNow": True})).start()
        self.query = query

        def wait() -> None:
            try:
                query.awaitTermination()
            except Exception as exc:  # noqa: BLE001 - any failure surfaces in the consumer
                handoff.put(exc)
            finally:
                handoff.put(done)

        threading.Thread(target=wait, name="cedar-spark-stream", daemon=True).start()
        idle = self.ingress.advance.idle_timeout
        every = None if idle is None else min(0.05, idle / 4)
        try:
            for batch_id in replay:
                out = self.ingest(load_checkpoint(_join(self._run_dir(), f"{batch_id}.pkl")))
                if out:
                    yield out
            while True:
                try:
                    item = handoff.get(timeout=every)
                except queue.Empty:
                    out = self.ingress.poll(_time.monotonic())
                    if out:
                        if self.checkpoint_location is not None:
                            self._save_state()
                        yield out
                    continue
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                table, batch_id = item
                out = self.ingest(table)
                if out:
                    yield out
                if held:
                    self._log_batch(table, batch_id, start)
                self.commit(batch_id)
                acks.put(True)
            final = self.ingress.end()  # this run's end: not committed
            self._run_records = self._records_since(before)
            if final:
                yield final
            if held and not hold:
                self.commit_run()
        finally:
            closed.set()
            acks.put(False)
            if query.isActive:
                query.stop()

    def _counts(self) -> tuple[int, int, dict[str, int]]:
        ing = self.ingress
        return len(ing.dead_letters), len(ing.late), dict(ing.stats)

    def _records_since(self, before: tuple[int, int, dict[str, int]]) -> dict[str, Any]:
        dead, late, stats = before
        ing = self.ingress
        return {"dead_letters": list(ing.dead_letters[dead:]), "late": list(ing.late[late:]),
                "stats": {k: v - stats.get(k, 0) for k, v in ing.stats.items()}}

    def run_records(self) -> dict[str, Any] | None:
        """What the Ingress did with the rows of the last run of :meth:`stream` (a held run
        that died and was replayed included, from its start): ``dead_letters``, ``late`` and
        ``stats`` (its counters, ``received == processed + dropped + adjusted +
        dead_lettered``), counted over that run only; None until a run ended. The records of
        the whole stream are :func:`stream_records`."""
        return self._run_records

    # -- driving the query --------------------------------------------------------------------
    def start(self, trigger: dict[str, Any] | None = None,
              query_name: str | None = None) -> StreamingQuery:
        """Start the Spark streaming query; ``trigger`` is passed to
        ``DataStreamWriter.trigger`` (e.g. ``{"availableNow": True}``,
        ``{"processingTime": "1 second"}``)."""
        if self.query is not None and self.query.isActive:
            raise RuntimeError("SparkStreamFeeder.start(): the query is already running; "
                               "stop() it first")
        writer = self.df.writeStream.foreachBatch(self.process_batch)
        if self.checkpoint_location is not None:
            writer = writer.option("checkpointLocation", self.checkpoint_location)
        if trigger:
            writer = writer.trigger(**trigger)
        if query_name:
            writer = writer.queryName(query_name)
        self.query = writer.start()
        return self.query

    def process_all_available(self) -> None:
        """Block until every input available now has been processed."""
        self._running().processAllAvailable()

    def await_termination(self, timeout_s: float | None = None) -> bool | None:
        """Block until the query stops (e.g. a ``availableNow`` trigger ran out of input)."""
        q = self._running()
        if timeout_s is None:
            return q.awaitTermination()
        return q.awaitTermination(timeout_s)  # type: ignore[arg-type]  # (Spark takes a float)

    def stop(self) -> None:
        """Stop the Spark query (the Ingress keeps its state; :meth:`start` resumes)."""
        if self.query is not None:
            self.query.stop()

    def poll(self, now: float | None = None) -> list[Message]:
        """The idle CTI (``AdvanceTime(idle_timeout=...)``) if the source has been quiet long
        enough; the messages are delivered as well as returned."""
        out = self.ingress.poll(_time.monotonic() if now is None else now)
        self._deliver(out)
        return out

    def end(self) -> list[Message]:
        """End of input: the Ingress's final CTI, delivered as well as returned."""
        self.stop()
        out = self.ingress.end()
        self._deliver(out)
        if self.checkpoint_location is not None:
            self._save_state()
        return out

    def _running(self) -> StreamingQuery:
        if self.query is None:
            raise RuntimeError("SparkStreamFeeder: call start() first")
        return self.query


def _join(location: str, *parts: str) -> str:
    """``location/part/...`` for a local path or a storage URI (its ``?options`` kept last).

    >>> _join("s3://bucket/ckpt/?endpoint_override=localhost:9000", "cedar_feeder.pkl")
    's3://bucket/ckpt/cedar_feeder.pkl?endpoint_override=localhost:9000'
    """
    base, sep, options = location.partition("?")
    if "://" in base:
        return "/".join([base.rstrip("/"), *parts]) + sep + options
    return os.path.join(base, *parts) + sep + options


def _delete_dir(location: str) -> None:
    if "://" in location:
        fs, where = pafs.FileSystem.from_uri(location)
    else:
        fs, where = pafs.LocalFileSystem(), os.path.abspath(location)
    try:
        fs.delete_dir(where)
    except (FileNotFoundError, OSError):
        pass  # nothing logged


def _fs_of(location: str) -> tuple[Any, str]:
    if "://" in location:
        return pafs.FileSystem.from_uri(location)
    return pafs.LocalFileSystem(), os.path.abspath(location)


def _delete_files_but(location: str, keep: set[str]) -> None:
    """Delete the files directly in folder ``location`` (a path or storage URI) whose names
    are not in ``keep``; nothing when it does not exist."""
    fs, where = _fs_of(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(where, allow_not_found=True))
    except (FileNotFoundError, OSError):
        return
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name not in keep:
            try:
                fs.delete_file(info.path)
            except (FileNotFoundError, OSError):
                pass


def _state_path(checkpoint: str) -> str:
    return _join(checkpoint, "cedar_feeder.pkl")


def stream_run(checkpoint: str | None) -> int:
    """The number of held runs committed on the stream checkpointed at ``checkpoint`` (0 when
    nothing was, or without a checkpoint): the run token a sink keys its commits by."""
    if checkpoint is None:
        return 0
    try:
        return int(load_checkpoint(_state_path(checkpoint)).get("run", 0))
    except FileNotFoundError:
        return 0


def stream_records(checkpoint: str) -> dict[str, Any]:
    """What the source of a stream checkpointed at ``checkpoint`` recorded, as of its last
    committed micro-batch: ``dead_letters`` (rows that could not become events, with the
    reason), ``late`` (late events dropped or adjusted), ``stats`` (the Ingress's counters)
    and ``last_batch_id``. Empty records if nothing was committed there yet."""
    try:
        state = load_checkpoint(_state_path(checkpoint))
    except FileNotFoundError:
        return {"dead_letters": [], "late": [], "stats": {}, "last_batch_id": -1}
    ingress = state["ingress"]
    return {"dead_letters": list(ingress["dead_letters"]), "late": list(ingress["late"]),
            "stats": dict(ingress["stats"]), "last_batch_id": state["last_batch_id"]}


# -- partition-parallel ingestion: Spark writes sorted files, each source reads its own -------
#: Prefix of the temporary staging folders of ``from_spark(..., sources=N)`` in local mode.
_STAGING_PREFIX = "cedar-ingest-"
_STAGING_ROOT: list[str] = []  # this process's temp folder of staged tables, if any


def staging_directory(session: Any, staging: str | None, what: str = "from_spark") -> str:
    """A fresh folder for one staged table: under ``staging`` when given (a folder every node
    of the cluster reaches: a shared mount), else, when Spark runs locally, under this
    process's temp folder (removed when the process exits). A clear error on a cluster
    without ``staging``."""
    import atexit
    import shutil
    import tempfile
    import uuid

    from .spark_sink import _local

    if staging is None:
        if not _local(session):
            raise ValueError(
                f"{what}: sources=N on a Spark cluster needs staging=PATH, a folder that "
                f"Spark's executors write and every node of the Ray cluster reads (a shared "
                f"mount); only a local Spark gets a temporary folder by default")
        if not _STAGING_ROOT:
            root = tempfile.mkdtemp(prefix=_STAGING_PREFIX)
            _STAGING_ROOT.append(root)
            atexit.register(shutil.rmtree, root, ignore_errors=True)
        staging = _STAGING_ROOT[0]
    return os.path.join(os.fspath(staging), f"table-{uuid.uuid4().hex[:12]}")


class StagedTable:
    """A batch DataFrame written by Spark as ``parts`` parquet files, each sorted by time.

    ``df.repartition(parts[, id]).sortWithinPartitions(<time key>).write.parquet(directory)``:
    the executors write in parallel and nothing passes through the driver. Rows go to the
    files by a hash of the ``id`` column when there is one (so that an edge's end row meets
    its start row, and a duplicate id its first use, in the same file), else round robin.
    Each file is sorted by the same time key as :func:`ordered_record_batches` (an end edge
    at its end), so a source reading one file sees its rows in time order.

    The table is written once, when it is first read (:meth:`files`) or first pickled (sent
    to another process of the cluster); a pickled copy holds only the folder and reads what
    the driver wrote. Part ``i`` is every file Spark's task ``i`` wrote (a task writes
    several, in order, under ``spark.sql.files.maxRecordsPerFile``; none when its partition
    is empty).
    """

    def __init__(self, df: DataFrame, start: Any, end: Any, shape: str, id: Any, parts: int,
                 directory: str, what: str = "from_spark") -> None:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_schema

        self.key = time_key(df, start, end, shape, what)
        self.by = [F.col(id)] if isinstance(id, str) else []
        self._df: DataFrame | None = df
        self.parts, self.directory = parts, directory
        large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
        #: the Arrow schema the sorted reader gives: parts are cast to it (parquet keeps
        #: Spark's timestamps as INT96 without a time zone)
        schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=large == "true")
        self.schema = pa.schema([f.with_nullable(True) for f in schema])
        self._lock = threading.Lock()

    def write(self) -> None:
        """Have Spark write the table (once; later calls return at once)."""
        with self._lock:
            df, self._df = self._df, None
            if df is None:
                return
            df.repartition(self.parts, *self.by).sortWithinPartitions(self.key) \
                .write.mode("errorifexists").parquet(self.directory)

    def files(self, part: int) -> list[str]:
        """The files of part ``part``, in the order their rows come."""
        import re

        self.write()
        if not os.path.exists(os.path.join(self.directory, "_SUCCESS")):
            raise FileNotFoundError(
                f"from_spark: the staged table {self.directory!r} is missing or incomplete "
                f"(no _SUCCESS): the staging folder must be reachable from every node of the "
                f"cluster, and live as long as the query reads it")
        pattern = re.compile(r"part-(\d+)-.*\.parquet$")
        mine = [f for f in os.listdir(self.directory)
                if (m := pattern.match(f)) is not None and int(m.group(1)) == part]
        return [os.path.join(self.directory, f) for f in sorted(mine)]

    def __getstate__(self) -> dict[str, Any]:
        self.write()  # another process reads the files: they must exist first
        return {"parts": self.parts, "directory": self.directory, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _df=None, _lock=threading.Lock(), key=None, by=[])

    def __repr__(self) -> str:
        return f"StagedTable({self.directory!r}, parts={self.parts})"


def staged_record_batches(table: StagedTable, part: int,
                          batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The rows of part ``part`` of a :class:`StagedTable` in time order, read with pyarrow
    batch by batch (one row group's batches at a time), in the schema the sorted reader
    (:func:`ordered_record_batches`) gives."""
    import pyarrow.parquet as pq

    schema = table.schema
    for path in table.files(part):
        with pq.ParquetFile(path, coerce_int96_timestamp_unit="us") as f:
            for batch in f.iter_batches(batch_size=batch_rows):
                if not batch.schema.equals(schema, check_metadata=False):
                    batch = batch.cast(schema)
                yield batch


class StagedPart:
    """``make`` of one portable source of ``from_spark(..., sources=N)``: part ``part`` of a
    :class:`StagedTable` as source batches (column batches where they can be, see
    :func:`topology.arrow_reader.arrow_batches`). Picklable: any process that reaches the
    staging folder reads it."""

    def __init__(self, table: StagedTable, part: int, start: Any, end: Any,
                 batch_rows: int) -> None:
        self.table, self.part = table, part
        self.start, self.end, self.batch_rows = start, end, batch_rows

    def __call__(self) -> Iterator[Any]:
        return arrow_batches(staged_record_batches(self.table, self.part, self.batch_rows),
                             self.start, self.end, self.batch_rows, columnar=True)

    def __repr__(self) -> str:
        return f"part {self.part} of {self.table.directory}"
