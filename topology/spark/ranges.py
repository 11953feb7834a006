"""Spark's two ways of reading a batch DataFrame in time order, range of times by range.

What :mod:`topology.spark.source` falls back to when the row groups cannot be merged without
the JVM (:mod:`topology.spark.direct`); the first that applies (:func:`read_in_ranges`):

* **a filtered scan per range, sorted in the driver** (:func:`sorted_ranges`) -- when the
  DataFrame is a deterministic projection and filter of parquet files whose row groups each
  span a narrow stretch of time (a table appended in time order, its files in any order:
  :func:`time_ordered_files`), and the footers' statistics say the scans would read at most
  :data:`_SCAN_FACTOR` times the table (:func:`scan_cost`). Range ``i`` is one Spark job,
  ``df.where(b_i <= key < b_i+1)`` (nulls in the first), which parquet's filter pushdown
  turns into a read of the row groups overlapping it; the driver sorts it with Arrow
  (``pyarrow.compute.sort_indices``, multithreaded C++). No shuffle, no sort in Spark, and
  the first range reaches the query as soon as it is read. A table of one range is read so
  whatever its source (no bounds needed);
* **Spark's distributed sort** (:func:`_sorted_by_spark`) -- otherwise (rows of all times in
  every row group, no statistics, a plan that is more than a scan, edges): range
  partitioning by the key, a sort within each range, then each range as Arrow.

**Bounded driver memory.** Nothing is collected whole. The table is cut into
``ceil(rows / partition_rows)`` ranges (one count first: cheap for files, whose footers hold
it), whose bounds are quantiles of a sample of the key column (:func:`sample_bounds`: one
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

import threading
import time as _time
from collections.abc import Iterator
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from topology.spark.direct import SORTED_BATCH_ROWS, parquet_footer, row_group_times
from topology.spark.frames import KEY_TYPES, arrow_schema, frame_to_arrow, scanned_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["read_in_ranges", "sample_bounds", "sampled_ranges", "scan_cost", "sorted_ranges",
           "time_ordered_files"]

#: The filtered scans may read at most this many times the table's rows (the row groups that
#: overlap a range, by their statistics) before Spark's sort is the cheaper way.
_SCAN_FACTOR = 2.0
#: Logical plan nodes a DataFrame read with one filtered scan per range may consist of: a
#: projection and filters over files (each scan then reads only what its range needs).
_SCAN_NODES = frozenset({"Project", "Filter", "Relation", "LogicalRelation"})
#: Keys sampled per range to place the range bounds (each range is then within a few percent
#: of ``partition_rows``; Spark's own range partitioning samples about 60).
_SAMPLES_PER_RANGE = 1_000


def read_in_ranges(df: DataFrame, key: Any, start: Any, shape: str, partition_rows: int,
                   what: str, watch: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """The rows of ``df`` sorted by ``key`` (the column ``start``, or an edge's time), read
    range by range by Spark: one range sorted in the driver, a filtered scan per range, or
    Spark's sort (see the module's docstring). ``watch`` gets ``path`` (``"one"``,
    ``"scan"`` or ``"sort"``) and ``ranges``, and for the driver's sorts ``held_peak`` and
    ``range_rows`` (:func:`sorted_ranges`)."""
    rows = df.count()
    if rows == 0:
        return
    ranges = -(-rows // partition_rows)
    if shape != "edge" and ranges == 1:  # one range: no bounds, no sample, no shuffle
        watch.update(path="one", ranges=1)
        yield from sorted_ranges(df, start, [None], watch)
        return
    if shape != "edge" and time_ordered_files(df, start):
        bounds = sample_bounds(df, start, ranges, rows)
        if bounds is not None and scan_cost(df, start, bounds) <= _SCAN_FACTOR * rows:
            watch.update(path="scan", ranges=len(bounds) + 1)
            yield from sorted_ranges(df, start, _range_filters(df, start, bounds), watch)
            return
        split = None if bounds is None else _range_labels(df, start, bounds)
    else:
        split = (sampled_ranges(df, start, ranges, rows)
                 if shape != "edge" and ranges > 1 else None)
    watch.update(path="sort", ranges=ranges if split is None else split[0])
    yield from _sorted_by_spark(df, key, start, ranges, split, what)


# -- no shuffle: a filtered scan per range, sorted in the driver ------------------------------
def time_ordered_files(df: DataFrame, name: str) -> bool:
    """Whether ``df`` is a deterministic projection and filter of parquet files with a time
    column ``name`` of a type the sampled bounds take: then a range of times can be read by
    a scan that skips the row groups outside it (parquet's statistics, Spark's filter
    pushdown), and :func:`scan_cost` says how much that saves."""
    if dict(df.dtypes).get(name) not in KEY_TYPES:
        return False
    files = scanned_files(df, _SCAN_NODES)
    return bool(files) and all(f.endswith(".parquet") for f in files or ())


def scan_cost(df: DataFrame, name: str, bounds: list[int]) -> float:
    """Rows the filtered scans of the ranges cut at ``bounds`` read in all: each row group of
    ``df``'s parquet files counts once per range its time statistics (min, max, nulls) overlap,
    every range when it has none (an INT96 timestamp, a file without statistics). Only the
    footers are read. Infinite when a file cannot be read so."""
    import bisect

    total = 0
    ranges = len(bounds) + 1
    for uri in df.inputFiles():
        footer = parquet_footer(uri, name)
        if footer is None:
            return float("inf")
        for g in range(footer.meta.num_row_groups):
            rows = footer.meta.row_group(g).num_rows
            group = row_group_times(footer, 0, g)
            if group is None or group.low is None or group.high is None:
                total += rows * ranges
                continue
            first = bisect.bisect_right(bounds, group.low)
            last = bisect.bisect_right(bounds, group.high)
            touched = last - first + 1 + (1 if first > 0 and group.nulls else 0)
            total += rows * touched
    return total


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


def _time_order(table: pa.Table, name: str) -> np.ndarray:
    """The row order of ``table`` by column ``name``, nulls first (Arrow's sort)."""
    try:  # pyarrow >= 25: null placement per sort key
        order = pc.sort_indices(table, sort_keys=[(name, "ascending", "at_start")])
    except (TypeError, ValueError, pa.ArrowException):
        order = pc.sort_indices(table, sort_keys=[(name, "ascending")],
                                null_placement="at_start")
    return order.to_numpy()


def sorted_ranges(df: DataFrame, name: str, filters: list[Any],
                  watch: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """The ranges ``df.where(f)`` for ``f`` in ``filters`` (None: the whole of ``df``), each
    read whole as Arrow by one Spark job and sorted by ``name`` in the driver (Arrow's sort,
    nulls first), the next one read and sorted in a thread while this one is consumed: the
    driver holds at most two ranges. A closed iterator cancels the Spark job still running.
    ``watch`` gets ``held_peak`` (the most ranges held at once) and ``range_rows``."""
    from concurrent.futures import Future, ThreadPoolExecutor

    sc = df.sparkSession.sparkContext
    group = f"cedar-ranges-{id(watch):x}-{_time.monotonic_ns()}"
    lock = threading.Lock()
    held = [0]
    watch.update(held_peak=0, range_rows=[])

    def fetch(where: Any) -> tuple[pa.Table, np.ndarray]:
        sc.setJobGroup(group, "cedar: a time range of from_spark", interruptOnCancel=True)
        table = frame_to_arrow(df if where is None else df.where(where)).combine_chunks()
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
            for lo in range(0, len(order), SORTED_BATCH_ROWS):
                yield from table.take(order[lo:lo + SORTED_BATCH_ROWS]).to_batches()
            del table, order
            with lock:
                held[0] -= 1
    finally:
        if pending is not None and not pending.done():
            sc.cancelJobGroup(group)
        pool.shutdown(wait=False, cancel_futures=True)


# -- the range bounds: a sample of the key column ---------------------------------------------
def sampled_ranges(df: DataFrame, name: str, ranges: int, rows: int) -> tuple[int, Any] | None:
    """How to cut ``df`` into time ranges without ``repartitionByRange``'s sampling pass: the
    number of ranges and the column to hash-partition by, or None (use
    ``repartitionByRange``) unless the key is the column ``name`` of timestamp (with a time
    zone), date or integer type (:func:`sample_bounds`, :func:`_range_labels`)."""
    bounds = sample_bounds(df, name, ranges, rows)
    return None if bounds is None else _range_labels(df, name, bounds)


def sample_bounds(df: DataFrame, name: str, ranges: int, rows: int) -> list[int] | None:
    """The bounds that cut ``df`` into about ``ranges`` ranges of equal rows: quantiles of a
    Bernoulli sample of the key column ``name`` alone (parquet reads that column only), as
    microseconds, days or integers (the column's type), each range holding some of the
    sample; None unless the column is a timestamp (with a time zone), date or integer, or
    when it holds no time at all."""
    from pyspark.sql import functions as F

    kind = dict(df.dtypes)[name]
    if kind not in KEY_TYPES:
        return None
    fraction = min(1.0, _SAMPLES_PER_RANGE * ranges / rows)
    picked = df.select(F.col(name).alias("t")).where(F.col("t").isNotNull())
    if fraction < 1.0:
        picked = picked.sample(fraction=fraction, seed=ranges)
    keys = frame_to_arrow(picked).column("t")
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


# -- Spark's distributed sort -----------------------------------------------------------------
def _sorted_by_spark(df: DataFrame, key: Any, start: Any, ranges: int,
                     split: tuple[int, Any] | None, what: str) -> Iterator[pa.RecordBatch]:
    """Spark's distributed sort (a shuffle by range, a sort within each), read range by range
    as Arrow record batches (``toArrowBatchRdd`` served to the driver one partition at a
    time)."""
    from pyspark.serializers import NoOpSerializer
    from pyspark.traceback_utils import SCCallSiteSync
    from pyspark.util import _local_iterator_from_socket

    if ranges == 1:
        ordered = df.coalesce(1).sortWithinPartitions(key)
    elif split is None:  # Spark's own range partitioning (it samples by scanning the input)
        ordered = df.repartitionByRange(ranges, key).sortWithinPartitions(key)
    else:
        ordered = df.repartition(split[0], split[1]).sortWithinPartitions(key)
    schema = arrow_schema(ordered)
    sc = ordered.sparkSession.sparkContext
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
                    f"as expected (topology/spark/ranges.py sampled_ranges)")
            latest = latest if high is None else high
        yield batch
