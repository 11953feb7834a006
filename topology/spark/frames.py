"""What the Spark readers and writers ask of a DataFrame and its session, in one place.

The checks at the boundary (a batch DataFrame, columns that exist, time columns Spark can give
as ticks), a DataFrame's schema (as Spark's type names, and as the Arrow schema Spark's
``toArrow`` gives), a DataFrame whole as Arrow, the time key a batch DataFrame is read sorted
by, which files a plain scan reads, and where a local Spark's staged files go. Used by the
sources (:mod:`topology.spark.source`, :mod:`topology.spark.ranges`,
:mod:`topology.spark.direct`, :mod:`topology.spark.stream`, :mod:`topology.spark.staged`) and
the sinks (:mod:`topology.spark.sink`). Spark is imported lazily.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["KEY_TYPES", "TIME_TYPES", "arrow_schema", "check_batch_frame", "check_columns",
           "check_time_types", "frame_to_arrow", "fresh_dir", "is_local", "process_temp_dir",
           "scanned_files", "schema_of", "time_key"]

#: Spark types a time column may have: Spark gives them as ticks (:mod:`operators.ticks`).
TIME_TYPES = ("timestamp", "timestamp_ntz", "date", "tinyint", "smallint", "int", "bigint")
#: The time types whose sampled values and parquet statistics are plain integers the range
#: bounds compare (microseconds, days, integers): all but ``timestamp_ntz``.
KEY_TYPES = ("timestamp", "date", "tinyint", "smallint", "int", "bigint")


def check_batch_frame(df: Any, what: str) -> None:
    """A clear error unless ``df`` is a batch (not streaming) pyspark DataFrame."""
    if not hasattr(df, "isStreaming") or not hasattr(df, "schema"):
        raise TypeError(f"{what}: expected a pyspark.sql.DataFrame, got {type(df).__name__}")
    if df.isStreaming:
        raise ValueError(f"{what}: this DataFrame is a streaming one; read it with "
                         f"SparkStreamFeeder (foreachBatch), which ingests it micro-batch by "
                         f"micro-batch")


def check_columns(df: Any, what: str, **specs: Any) -> None:
    """A clear error for a role (``start=``, ``end=``, ``id=``) naming a missing column."""
    columns = set(df.columns)
    for role, spec in specs.items():
        if isinstance(spec, str) and spec not in columns:
            raise ValueError(f"{what}: {role}={spec!r} is not a column of the DataFrame; its "
                             f"columns are {sorted(columns)}")


def schema_of(df: Any) -> dict[str, str]:
    """Column name -> Spark type (``simpleString``), in order."""
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def check_time_types(df: Any, what: str, **specs: Any) -> None:
    """A clear error, naming the column, for a time column Spark cannot give as ticks."""
    types = schema_of(df)
    for role, spec in specs.items():
        if isinstance(spec, str) and types.get(spec) not in TIME_TYPES:
            raise TypeError(
                f"{what}: {role} column {spec!r} is {types.get(spec)}; a time column must be "
                f"of timestamp, date or integer (ticks) type: convert it, e.g. "
                f"df.withColumn({spec!r}, F.to_timestamp({spec!r}))")


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema Spark's ``toArrow`` gives ``df`` (UTC timestamps; large string and
    binary types when the session asks for them)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
    return to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=large == "true")


def frame_to_arrow(df: DataFrame) -> pa.Table:
    """``df`` whole as Arrow: one Spark job over its partitions (a micro-batch, bounded by its
    trigger, or one range of a batch DataFrame)."""
    if hasattr(df, "toArrow"):  # PySpark >= 4
        return df.toArrow()
    # PySpark 3.x (where a DataFrame's unknown attribute reads as a Column)
    return pa.Table.from_batches(df._collect_as_arrow())  # type: ignore[operator]


def time_key(df: DataFrame, start: Any, end: Any, shape: str, what: str) -> Any:
    """The Spark column a batch DataFrame is sorted by (:mod:`topology.spark.source`: the
    ``start`` column, an edge's ``end`` when it has one); a clear error when the time columns
    cannot be sorted on."""
    from pyspark.sql import functions as F

    types = dict(df.dtypes)
    roles = {"start": start, "end": end} if shape == "edge" else {"start": start}
    for role, spec in roles.items():
        if not isinstance(spec, str):
            raise TypeError(
                f"{what}: {role}={spec!r}: a batch DataFrame is read sorted by its time "
                f"column, so {role} must be a column name; compute the time into a column "
                f"first (df.withColumn('{role}', ...))")
        if types[spec] not in TIME_TYPES:
            raise TypeError(
                f"{what}: {role} column {spec!r} is {types[spec]}; a batch DataFrame is read "
                f"sorted by time, which needs a timestamp, date or integer (ticks) column: "
                f"convert it, e.g. df.withColumn({spec!r}, F.to_timestamp({spec!r}))")
    if shape == "edge":
        return F.coalesce(F.col(end), F.col(start))
    return F.col(start)


def scanned_files(df: DataFrame, nodes: frozenset[str],
                  columns_only: bool = False) -> list[str] | None:
    """The files ``df`` reads (``inputFiles``) when its optimized logical plan is
    deterministic and made of ``nodes`` alone (with ``columns_only``, projections that pick
    columns and compute none); None otherwise, or when the plan cannot be read."""
    try:
        plan = df._jdf.queryExecution().optimizedPlan()
        if not plan.deterministic():
            return None
        stack = [plan]
        while stack:
            node = stack.pop()
            kind = node.nodeName()
            if kind not in nodes:
                return None
            if columns_only and kind == "Project":
                exprs = node.projectList()
                if any(exprs.apply(i).nodeName() != "AttributeReference"
                       for i in range(exprs.size())):
                    return None
            children = node.children()
            stack.extend(children.apply(i) for i in range(children.size()))
        return list(df.inputFiles())
    except Exception:  # noqa: BLE001 - a plan this check cannot read is read by Spark
        return None


def is_local(session: SparkSession) -> bool:
    """Whether Spark's executors run on this machine (local mode), so that they read files
    the driver stages in its temp directory, and the driver reads what they write there."""
    try:
        master = session.sparkContext.master
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: not local
        return False
    return master is not None and master.startswith("local")


_TEMP_DIRS: dict[str, str] = {}  # prefix -> this process's temp folder of that name


def process_temp_dir(prefix: str) -> str:
    """This process's temp folder named ``prefix...``: made at the first call, the same one
    after, removed when the process exits."""
    import atexit
    import shutil
    import tempfile

    if prefix not in _TEMP_DIRS:
        root = tempfile.mkdtemp(prefix=prefix)
        _TEMP_DIRS[prefix] = root
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    return _TEMP_DIRS[prefix]


def fresh_dir(root: str | os.PathLike[str], name: str) -> str:
    """A new folder's path under ``root``: ``name-<12 random hex digits>`` (not created)."""
    import uuid

    return os.path.join(os.fspath(root), f"{name}-{uuid.uuid4().hex[:12]}")
