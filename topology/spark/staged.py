"""Partition-parallel ingestion: Spark writes N time-sorted parquet files, one source reads each.

``Stream.from_spark(df, ..., sources=N)`` on a batch DataFrame (docs/spark.md):
:class:`StagedTable` is the table Spark writes once, under a staging folder
(:func:`staging_directory`); :class:`StagedPart` is one portable source of it, picklable, that
any process reaching the folder reads with pyarrow (:func:`staged_record_batches`), no row
through the driver. The merge of the parts is :class:`topology.spark.table_parts.UnionOfParts`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from topology.building.arrow_reader import DEFAULT_BATCH_ROWS, arrow_batches
from topology.spark.frames import arrow_schema, fresh_dir, is_local, process_temp_dir, time_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["StagedPart", "StagedTable", "staged_record_batches", "staging_directory"]

#: Prefix of the temporary staging folders of ``from_spark(..., sources=N)`` in local mode.
_STAGING_PREFIX = "cedar-ingest-"


def staging_directory(session: Any, staging: str | None, what: str = "from_spark") -> str:
    """A fresh folder for one staged table: under ``staging`` when given (a folder every node
    of the cluster reaches: a shared mount), else, when Spark runs locally, under this
    process's temp folder (removed when the process exits). A clear error on a cluster
    without ``staging``."""
    if staging is None:
        if not is_local(session):
            raise ValueError(
                f"{what}: sources=N on a Spark cluster needs staging=PATH, a folder that "
                f"Spark's executors write and every node of the Ray cluster reads (a shared "
                f"mount); only a local Spark gets a temporary folder by default")
        staging = process_temp_dir(_STAGING_PREFIX)
    return fresh_dir(staging, "table")


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

        self.key = time_key(df, start, end, shape, what)
        self.by = [F.col(id)] if isinstance(id, str) else []
        self._df: DataFrame | None = df
        self.parts, self.directory = parts, directory
        #: the Arrow schema the sorted reader gives: parts are cast to it (parquet keeps
        #: Spark's timestamps as INT96 without a time zone)
        self.schema = pa.schema([f.with_nullable(True) for f in arrow_schema(df)])
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
    :func:`topology.building.arrow_reader.arrow_batches`). Picklable: any process that reaches the
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
