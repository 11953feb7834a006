"""The direct read: a batch DataFrame's parquet row groups merged in time order by pyarrow.

When a DataFrame is only a selection of columns of parquet files (no filter, computed column,
partition column or cache: :func:`direct_plan`) whose row groups all have statistics of the
time column, Spark plans which files it is (``inputFiles``) and nothing else: not one Spark
job runs, no row passes through the JVM. The row groups are read with pyarrow in the order of
their earliest time (the next one in a thread), cast to the schema Spark's ``toArrow`` gives,
and the rows earlier than the next group's earliest time leave sorted (:func:`merged_groups`).
The footers say in advance how many rows the merge holds; above the limit (twice
``partition_rows``), or for files Spark would read otherwise (legacy dates, INT96 or
nanosecond times, a missing column), :mod:`topology.spark.ranges` reads the DataFrame.

The footers' time statistics (:func:`parquet_footer`, :func:`row_group_times`) also give the
cost of the filtered scans (:func:`topology.spark.ranges.scan_cost`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from topology.spark.frames import KEY_TYPES, arrow_schema, scanned_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["SORTED_BATCH_ROWS", "DirectPlan", "Footer", "RowGroup", "direct_plan",
           "merged_groups", "parquet_footer", "parquet_plan", "row_group_times"]

#: Rows per record batch a sort in the driver hands on (each its own buffers, so that a batch
#: held downstream does not keep its whole range alive).
SORTED_BATCH_ROWS = 65_536
#: Whether the reader may read the row groups of time-ordered parquet files itself
#: (:func:`direct_plan`); tests switch it off to exercise Spark's ways.
_DIRECT = True
#: Logical plan nodes a DataFrame read directly may consist of: files, and column projections.
_DIRECT_NODES = frozenset({"Project", "Relation", "LogicalRelation"})
#: Footer metadata of parquet files whose times Spark would rebase (written by Spark 2 or in
#: its legacy modes): pyarrow would read them as written, so Spark reads those.
_LEGACY_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


# -- the footers ------------------------------------------------------------------------------
class Footer(NamedTuple):
    """A parquet file's footer as the readers see it: where the file is, its metadata, the
    index of its time column, and the factor from its raw statistics to the sampled keys'
    units (None when they cannot be compared: INT96, nanoseconds, anything else)."""

    fs: Any
    path: str
    meta: Any
    column: int
    scale: int | None


def parquet_footer(uri: str, name: str) -> Footer | None:
    """The footer of the parquet file ``uri`` with its time column ``name``; None when the
    file cannot be read or has no such column. Only the footer is read."""
    import pyarrow.parquet as pq

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        meta = pq.read_metadata(path, filesystem=fs)
    except Exception:  # noqa: BLE001 - a file pyarrow cannot read: the caller's fallback
        return None
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    if name not in paths:
        return None
    index = paths.index(name)
    return Footer(fs, path, meta, index, _stat_scale(meta.schema.column(index)))


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


class RowGroup:
    """One parquet row group as the direct reader sees it: where it is, its rows, the range
    of its time key (None when every key is null) and how many keys are null (None when the
    statistics do not say)."""

    __slots__ = ("file", "high", "index", "low", "nulls", "rows")

    def __init__(self, file: int, index: int, rows: int, low: int | None, high: int | None,
                 nulls: int | None) -> None:
        self.file, self.index, self.rows = file, index, rows
        self.low, self.high, self.nulls = low, high, nulls


def row_group_times(footer: Footer, file: int, g: int) -> RowGroup | None:
    """Row group ``g`` of ``footer``'s file (number ``file`` of a plan) with the range of its
    times, from its statistics; None when they do not give it (no comparable statistics, or
    no minimum and maximum while some time is not null)."""
    group = footer.meta.row_group(g)
    stats = group.column(footer.column).statistics
    if footer.scale is None or stats is None:
        return None
    nulls = stats.null_count if stats.has_null_count else None
    if stats.has_min_max:
        low, high = int(stats.min_raw) * footer.scale, int(stats.max_raw) * footer.scale
        return RowGroup(file, g, group.num_rows, low, high, nulls)
    if nulls == group.num_rows:
        return RowGroup(file, g, group.num_rows, None, None, nulls)
    return None


# -- the plan ---------------------------------------------------------------------------------
class DirectPlan:
    """How to read a DataFrame's parquet files directly (:func:`direct_plan`): the files
    (filesystem, path, footer), the row groups in the order of their earliest time, the
    columns and the Arrow schema Spark's ``toArrow`` would give."""

    def __init__(self, files: list[tuple[Any, str, Any]], groups: list[RowGroup],
                 columns: list[str], schema: pa.Schema, held_rows: int) -> None:
        self.files, self.groups, self.columns, self.schema = files, groups, columns, schema
        self.held_rows = held_rows  # the most rows the merge may hold (its bound)

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.groups)

    def read(self, group: RowGroup) -> pa.Table:
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


def direct_plan(df: DataFrame, name: str, limit: int) -> DirectPlan | None:
    """A plan to read ``df`` in time order without Spark moving a row, or None: when ``df``
    is a deterministic projection of columns of parquet files (no filter, no computed
    column, no partition column) whose row groups all have statistics of the time column
    ``name``, and the merge of the row groups in the order of their earliest time
    (:func:`merged_groups`) never holds more than ``limit`` rows. Spark still plans the read
    (which files the DataFrame is: ``inputFiles``); only the footers are read here."""
    if not _DIRECT or dict(df.dtypes).get(name) not in KEY_TYPES:
        return None
    uris = scanned_files(df, _DIRECT_NODES, columns_only=True)
    if uris is None:
        return None
    try:
        schema = arrow_schema(df)
    except Exception:  # noqa: BLE001 - a schema this check cannot convert is read by Spark
        return None
    return parquet_plan(uris, list(df.columns), schema, name, limit)


def parquet_plan(uris: list[str], columns: list[str], schema: pa.Schema, name: str,
                 limit: int) -> DirectPlan | None:
    """The direct read of the parquet files ``uris`` (their ``columns``, as ``schema``) in
    the order of the time column ``name``, or None when a file cannot be read so (no
    statistics of ``name`` in some row group, times pyarrow would read otherwise than Spark,
    a missing column, a type that does not cast) or the merge would hold more than
    ``limit`` rows. Only the footers are read."""
    if not uris or not all(u.endswith(".parquet") for u in uris):
        return None
    if len(set(columns)) != len(columns):
        return None
    files: list[tuple[Any, str, Any]] = []
    groups: list[RowGroup] = []
    for f, uri in enumerate(uris):
        footer = parquet_footer(uri, name)
        if footer is None or footer.scale is None:
            return None
        meta = footer.meta
        try:
            empty = meta.schema.to_arrow_schema().empty_table().select(columns)
            empty.cast(schema)  # the types Spark gives can be had from the file's
        except Exception:  # noqa: BLE001 - a missing column, an odd type: Spark
            return None
        if any(k in (meta.metadata or {}) for k in _LEGACY_KEYS):
            return None
        files.append((footer.fs, footer.path, meta))
        for g in range(meta.num_row_groups):
            if meta.row_group(g).num_rows == 0:
                continue
            group = row_group_times(footer, f, g)
            if group is None or group.nulls is None:
                return None
            groups.append(group)
    timed = sorted((g for g in groups if g.low is not None),
                   key=lambda g: (g.low, g.file, g.index))
    untimed = [g for g in groups if g.low is None]
    held = _merge_bound(timed)
    if held > limit:
        return None
    return DirectPlan(files, untimed + timed, columns, schema, held)


def _merge_bound(timed: list[RowGroup]) -> int:
    """The most rows :func:`merged_groups` may hold at once over ``timed`` (row groups in
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


# -- the merge --------------------------------------------------------------------------------
def _keys(table: pa.Table, name: str) -> np.ndarray:
    column = table.column(name)
    kind = pa.int32() if pa.types.is_date32(column.type) else pa.int64()
    return pc.cast(column, kind).to_numpy()


def merged_groups(plan: DirectPlan, name: str,
                  watch: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    """The rows of ``plan``'s row groups in time order, null times first: the groups are read
    in the order of their earliest time (the next one read in a thread while this one is
    consumed); after reading group ``j`` every held row earlier than group ``j + 1``'s
    earliest time is final (no group still to read holds an earlier one) and leaves, sorted
    (Arrow's sort, skipped when the rows are in order already). Null times are read first,
    from the groups that have any. ``watch`` gets ``held_peak_rows`` (the most rows held)
    and ``sorted_groups`` (the merges that needed a sort)."""
    from concurrent.futures import ThreadPoolExecutor

    groups = plan.groups
    watch.update(held_peak_rows=0, sorted_groups=0)
    pool = ThreadPoolExecutor(1, thread_name_prefix="cedar-parquet-group")
    try:
        for g in groups:  # null times first (a row of a null time is a dead letter)
            if g.nulls:
                t = plan.read(g)
                t = t.filter(pc.is_null(t.column(name)))
                yield from t.to_batches(max_chunksize=SORTED_BATCH_ROWS)
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
            yield from held.slice(0, cut).to_batches(max_chunksize=SORTED_BATCH_ROWS)
            held = held.slice(cut)
            del table, keys
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
