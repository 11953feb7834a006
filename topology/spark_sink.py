"""The Spark sinks: result tables out as Arrow tables, DataFrames and files (docs/spark.md).

* **batch sinks** -- :func:`cht_to_arrow`, :func:`to_spark` and :func:`write` turn the CHT of a
  result into a table with ``start``, ``end`` timestamp columns plus the payload's fields;
* **streaming sink** -- :class:`FinalRowsSink` appends, at each output CTI, the rows that CTI
  made final, exactly once across restarts (its commit log records the last CTI written).

    >>> table = cht_to_arrow([(0, 5, {"meter": "m1", "kwh": 1.5})])
    >>> table.column_names
    ['start', 'end', 'meter', 'kwh']
    >>> table.to_pylist()[0]["end"].isoformat()
    '1970-01-01T00:00:00.000005+00:00'

Spark is imported lazily: only the functions that take a SparkSession need it, and they take
``None`` for the active one. The builder's ``.to_spark`` / ``.write`` / ``.to_spark_stream``
call these.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from actors.files import TMP_PREFIX, atomic_path, atomic_write, temp_path
from operators.cht import cht_rows
from operators.columns import Columns, concat
from operators.errors import DeadLetter
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Message, Retract
from operators.live import LiveEvents

from .spark_frames import fresh_dir, is_local, process_temp_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["TIME_TYPE", "WRITE_MODES", "FinalRowsSink", "cht_batches", "cht_to_arrow",
           "columns_to_arrow", "result_to_arrow", "to_spark", "unify_batches", "with_times",
           "write"]

#: The Arrow type of the ``start``/``end`` columns of every sink.
TIME_TYPE = pa.timestamp("us", tz="UTC")
#: Text formats write timestamps to the millisecond unless told otherwise; ticks are µs.
_TEXT_TIMESTAMPS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
#: Spark's save modes :func:`write` takes.
WRITE_MODES = ("error", "errorifexists", "overwrite", "append", "ignore")
_WRITE_MODES = WRITE_MODES  # the name topology/stream.py imports, until it imports WRITE_MODES


def _is_group_pair(payload: Any) -> bool:
    return type(payload) is tuple and len(payload) == 2


def _flatten(payload: Any, fields: dict[str, Any], depth: int = 1) -> None:
    """The payload's fields into ``fields``: see :func:`cht_to_arrow`."""
    if isinstance(payload, dict):
        for k, v in payload.items():
            fields[str(k)] = v
    elif _is_group_pair(payload):
        fields["key" if depth == 1 else f"key{depth}"] = payload[0]
        _flatten(payload[1], fields, depth + 1)
    elif isinstance(payload, tuple) and hasattr(payload, "_asdict"):
        fields.update(payload._asdict())
    elif dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        fields.update({f.name: getattr(payload, f.name) for f in dataclasses.fields(payload)})
    else:
        fields["value"] = payload


def _time_column(ticks: Sequence[int], open_at: int) -> pa.Array:
    values = np.fromiter(ticks, dtype=np.int64, count=len(ticks))
    return pa.array(values, type=pa.int64(), mask=values == open_at).cast(TIME_TYPE)


def cht_to_arrow(rows: Iterable[tuple[int, int, Any]],
                 schema: pa.Schema | None = None) -> pa.Table:
    """CHT rows ``(start, end, payload)`` as an Arrow table.

    Columns: ``start`` and ``end`` as ``timestamp[us, tz=UTC]`` (tick = µs since the epoch);
    an end at ``MAX_TIME`` (∞, an edge still open) and a start at ``MIN_TIME`` become **null**.
    Then the payload's fields:

    * a dict: its keys (the union over all rows, in first-seen order; missing ones are null);
    * a pair ``(key, payload)`` as produced by ``group_apply``: a ``key`` column, then the
      inner payload's fields (a nested group's key is ``key2``, ...);
    * a NamedTuple or a dataclass: its fields;
    * anything else: one ``value`` column.

    A payload field named ``start`` or ``end`` is renamed ``payload_start`` / ``payload_end``.
    With ``schema``, columns are built with its types (a sink uses the schema of its first
    file, so that all files agree); columns it lacks are added, its columns that the rows lack
    are null.

    >>> t = cht_to_arrow([(0, MAX_TIME, ("m1", 3)), (2, 3, ("m2", 1))])
    >>> t.column_names, t.column("end").null_count, t.column("value").to_pylist()
    (['start', 'end', 'key', 'value'], 1, [3, 1])
    """
    rows = list(rows)
    flat: list[dict[str, Any]] = []
    names: dict[str, None] = {}
    if schema is not None:  # the schema's columns first, in its order
        names.update((f.name, None) for f in schema if f.name not in ("start", "end"))
    uniform = _uniform_fields(rows)
    if uniform is not None:  # every payload of one form: each field's values in one pass
        names.update((k, None) for k in uniform)
    for row in rows if uniform is None else ():
        try:
            _, _, payload = row
        except (TypeError, ValueError):
            raise TypeError(f"cht_to_arrow: expected (start, end, payload) rows, got {row!r}; "
                            f"turn messages into rows with operators.cht.to_cht") from None
        fields: dict[str, Any] = {}
        _flatten(payload, fields)
        if "start" in fields or "end" in fields:
            fields = {f"payload_{k}" if k in ("start", "end") else k: v
                      for k, v in fields.items()}
        for k in fields:
            names.setdefault(k, None)
        flat.append(fields)
    columns: dict[str, pa.Array] = {
        "start": _time_column([r[0] for r in rows], MIN_TIME),
        "end": _time_column([r[1] for r in rows], MAX_TIME),
    }
    for name in names:
        if uniform is None:
            values = [fields.get(name) for fields in flat]
        else:
            values = uniform.get(name) or [None] * len(rows)
        kind = None
        if schema is not None and schema.get_field_index(name) >= 0:
            kind = schema.field(name).type
        try:
            columns[name] = pa.array(values, type=kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            want = f" as {kind}" if kind is not None else ""
            raise TypeError(
                f"cht_to_arrow: payload field {name!r} cannot be stored in one column{want} "
                f"({type(exc).__name__}: {exc}); give it one type in every row, e.g. with "
                f".select(...) before the sink"
            ) from None
    return pa.table(columns)


def _uniform_fields(rows: list[tuple[int, int, Any]]) -> dict[str, list[Any]] | None:
    """The payload columns of ``rows`` when every payload is a dict with the first one's keys,
    or a ``group_apply`` pair ``(key, dict)`` of them (the common results), built one field at
    a time (what :func:`_flatten` gives row by row); None for any other mix, which takes the
    row-by-row path. The ``payload_start``/``payload_end`` renaming applies here too."""
    if not rows or not all(type(r) is tuple and len(r) == 3 for r in rows):
        return None
    first = rows[0][2]
    paired = _is_group_pair(first)
    inner = first[1] if paired else first
    if type(inner) is not dict or (paired and _is_group_pair(inner)):
        return None
    keys = inner.keys()
    if paired:
        if not all(type(p) is tuple and len(p) == 2 and type(p[1]) is dict
                   and p[1].keys() == keys for _, _, p in rows):
            return None
        dicts = [p[1] for _, _, p in rows]
    else:
        if not all(type(p) is dict and p.keys() == keys for _, _, p in rows):
            return None
        dicts = [p for _, _, p in rows]
    out: dict[str, list[Any]] = {"key": [p[0] for _, _, p in rows]} if paired else {}
    for k in keys:
        name = str(k)
        if paired and name == "key":
            return None  # the row path lets the payload's "key" win: keep its rule
        out[f"payload_{name}" if name in ("start", "end") else name] = [d[k] for d in dicts]
    return out


# -- the batch sinks at scale: a result's CHT as Arrow record batches -----------------------
#: Rows per record batch built from row messages (the per-row conversion is done in chunks).
ROW_CHUNK = 65_536
#: Rows per parquet part the sinks stage for Spark (one part per Spark read task).
PART_ROWS = 1_048_576
_COLUMN_WISE_DTYPES = "biuf"  # numpy kinds converted column-wise: bool, int, unsigned, float
_FLAT_TYPES = (dict, tuple)  # payload values the row layout flattens into several columns


def _plain_array(values: np.ndarray) -> pa.Array | None:
    """A numpy payload column as the Arrow array the row path gives for its values (Python
    ints are int64, floats double), or None when only the row path can convert it."""
    kind = values.dtype.kind
    if kind in _COLUMN_WISE_DTYPES:
        if values.dtype == np.uint64:
            return None  # Python ints above 2**63 would need the row path's inference
        target = {"b": pa.bool_(), "f": pa.float64()}.get(kind, pa.int64())
        return pa.array(values).cast(target)
    if kind in "USO":
        try:
            return pa.array(values, from_pandas=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None  # mixed types: the row path explains the column
    return None  # datetime64, structured...: the row path


def _scalar_column(values: np.ndarray) -> pa.Array | None:
    """A column of payloads the row layout keeps whole (a ``value`` column), or None when some
    are dicts, tuples or dataclasses, which it flattens into several columns."""
    if values.dtype.kind == "O":
        kinds = set(map(type, values))
        if any(issubclass(k, _FLAT_TYPES) or dataclasses.is_dataclass(k) for k in kinds):
            return None
    return _plain_array(values)


def _columns_fields(payload: Any) -> dict[str, pa.Array] | None:
    """Payload columns in the layout of :func:`cht_to_arrow`, or None (then the row path)."""
    fields: dict[str, pa.Array | None] = {}
    if isinstance(payload, dict):
        for k, v in payload.items():
            fields[str(k)] = _plain_array(v)
    elif isinstance(payload, tuple):
        if len(payload) != 2:
            return None  # a tuple payload is one list-valued column: rare, the row path
        fields["key"] = _plain_array(payload[0])
        fields["value"] = _scalar_column(payload[1])
    else:
        fields["value"] = _scalar_column(payload)
    if any(a is None for a in fields.values()):
        return None
    return {f"payload_{k}" if k in ("start", "end") else k: a
            for k, a in fields.items()}


def _ticks_column(ticks: np.ndarray, open_at: int) -> pa.Array:
    return pa.array(ticks, type=pa.int64(), mask=ticks == open_at).cast(TIME_TYPE)


def columns_to_arrow(cols: Columns) -> pa.RecordBatch | None:
    """A :class:`~operators.columns.Columns` batch of inserts as an Arrow record batch in the
    layout of :func:`cht_to_arrow`, built column-wise (no Python value per row); None when
    its payload columns need the row path (object columns holding dicts or tuples, which the
    layout flattens; datetime64 or uint64 columns).

    >>> c = Columns(np.arange(2), np.array([0, 3]), np.array([2, MAX_TIME]),
    ...             (np.array(["m1", "m2"]), np.array([1.5, 2.0])))
    >>> columns_to_arrow(c).to_pydict()["value"], columns_to_arrow(c).column(1).null_count
    ([1.5, 2.0], 1)
    """
    fields = _columns_fields(cols.payload)
    if fields is None:
        return None
    arrays = {"start": _ticks_column(np.asarray(cols.starts, dtype=np.int64), MIN_TIME),
              "end": _ticks_column(np.asarray(cols.ends, dtype=np.int64), MAX_TIME), **fields}
    return pa.RecordBatch.from_pydict(arrays)


def _ids_hit(ids: np.ndarray, retracted: set[Any]) -> np.ndarray:
    """Which of ``ids`` a retraction names."""
    if ids.dtype.kind in "iu" and all(type(i) is int for i in retracted):
        return np.isin(ids, np.fromiter(retracted, dtype=np.int64, count=len(retracted)))
    return np.fromiter((i in retracted for i in ids.tolist()), dtype=bool, count=len(ids))


def _lifetime(row: tuple[int, int, Any]) -> tuple[int, int]:
    return row[0], row[1]


def _split_stream(items: list[Any]) -> tuple[list[Columns], list[Insert | Retract]]:
    """A physical stream's column batches whose rows no retraction touches, and the other
    messages in order (a column row that a retraction names becomes an Insert where it was,
    so the retraction applies to it as in :func:`operators.cht.to_cht`)."""
    retracted = {m.id for m in items if type(m) is Retract}
    columns: list[Columns] = []
    rows: list[Insert | Retract] = []
    for m in items:
        kind = type(m)
        if kind is Columns:
            if retracted:
                hit = _ids_hit(m.ids, retracted)
                if hit.any():
                    rows.extend(m.take(hit).inserts())
                    m = m.take(~hit)
            if len(m):
                columns.append(m)
        elif kind is Insert or kind is Retract:
            rows.append(m)
    return columns, rows


def _group(columns: list[Columns], rows: int) -> Iterator[Columns]:
    """Consecutive column batches merged up to ``rows`` events (a query's sink may emit many
    small ones); batches of another payload form start a new group."""
    group: list[Columns] = []
    size = 0
    for c in columns:
        if group and size + len(c) > rows:
            yield from _merged(group)
            group, size = [], 0
        group.append(c)
        size += len(c)
    if group:
        yield from _merged(group)


def _merged(group: list[Columns]) -> Iterator[Columns]:
    whole = concat(group) if len(group) > 1 else group[0]
    if whole is not None:
        yield whole
    else:
        yield from group


def with_times(batch: Any, times: Collection[str]) -> Any:
    """``batch`` (an Arrow table or record batch) with its integer columns named in ``times``
    (payload fields that hold ticks: a reading's ``ts``) as ``timestamp[us, tz=UTC]``, as
    ``start`` and ``end`` are (∞ and -∞ as null); other columns as they are.

    >>> with_times(pa.table({"ts": [1_767_225_600_000_000], "n": [7]}), ["ts"]).schema.types
    [TimestampType(timestamp[us, tz=UTC]), DataType(int64)]
    """
    for name in times:
        i = batch.schema.get_field_index(name)
        if i < 0 or not pa.types.is_integer(batch.schema.field(i).type):
            continue
        ticks = batch.column(i)
        if isinstance(ticks, pa.ChunkedArray):
            ticks = ticks.combine_chunks()
        values = ticks.cast(pa.int64())
        outside = pc.or_(pc.greater_equal(values, MAX_TIME), pc.less_equal(values, MIN_TIME))
        shown = pc.if_else(outside, pa.scalar(None, pa.int64()), values)
        batch = batch.set_column(i, pa.field(name, TIME_TYPE), shown.cast(TIME_TYPE))
    return batch


def cht_batches(rows_or_messages: Iterable[Any],
                chunk_rows: int = ROW_CHUNK, times: Collection[str] = ()
                ) -> Iterator[pa.RecordBatch]:
    """The CHT of a result as Arrow record batches in the layout of :func:`cht_to_arrow`:
    column batches (:class:`~operators.columns.Columns`, what the column path of a query
    delivers) are converted column-wise; the rows of row messages -- or CHT rows
    ``(start, end, payload)`` -- through :func:`cht_to_arrow`, ``chunk_rows`` at a time.

    Each batch has the columns and types of its own rows; :func:`unify_batches` (or the sinks)
    give them one schema. Memory beyond the input: one batch. ``times``: payload fields that
    hold ticks, written as timestamps (:func:`with_times`).
    """
    if times:
        for batch in cht_batches(rows_or_messages, chunk_rows):
            yield with_times(batch, times)
        return
    items = rows_or_messages if isinstance(rows_or_messages, list) else list(rows_or_messages)
    if any(type(m) in (Insert, Retract, Cti, Columns) for m in items):
        columns, messages = _split_stream(items)
        # inserts alone are their own CHT (no retraction to apply); in time order, as the
        # column batches come, not in the canonical order of to_cht
        rows = sorted(cht_rows(messages) if any(type(m) is Retract for m in messages) else
                      [(m.start, m.end, m.payload) for m in messages], key=_lifetime)
    else:
        columns, rows = [], items
    for c in _group(columns, chunk_rows):
        batch = columns_to_arrow(c)
        if batch is not None:
            yield batch
        else:
            rows.extend(zip(c.starts.tolist(), c.ends.tolist(), c.payloads()))
    for i in range(0, len(rows), chunk_rows):
        yield from cht_to_arrow(rows[i:i + chunk_rows]).to_batches()


def _unified(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """One schema for record batches with their own: the union of their columns in
    first-seen order, each of the type the row path infers for all the values (an int column
    with floats is double); TypeError like :func:`cht_to_arrow` when values cannot share one."""
    base = [pa.schema([pa.field("start", TIME_TYPE), pa.field("end", TIME_TYPE)])]
    try:
        return pa.unify_schemas(base + list(schemas), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        name = _clash(schemas)
        raise TypeError(
            f"cht_to_arrow: payload field {name!r} cannot be stored in one column "
            f"({type(exc).__name__}: {exc}); give it one type in every row, e.g. with "
            f".select(...) before the sink"
        ) from None


def _clash(schemas: Sequence[pa.Schema]) -> str:
    seen: dict[str, pa.Schema] = {}
    for s in schemas:
        for f in s:
            one = pa.schema([f])
            if f.name in seen:
                try:
                    pa.unify_schemas([seen[f.name], one], promote_options="permissive")
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    return f.name
            seen[f.name] = one
    return "?"


def conform(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> pa.RecordBatch | pa.Table:
    """``batch`` with exactly the columns of ``schema`` (missing ones null), of its types."""
    n = batch.num_rows
    arrays = [batch.column(f.name).cast(f.type) if f.name in batch.schema.names
              else pa.nulls(n, f.type) for f in schema]
    kind = pa.RecordBatch if isinstance(batch, pa.RecordBatch) else pa.Table
    return kind.from_arrays(arrays, schema=schema)


def unify_batches(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """Record batches of :func:`cht_batches` as one table of one schema (see :func:`_unified`).

    >>> from operators.events import Insert
    >>> c = Columns(np.arange(2), np.array([0, 1]), None, {"v": np.array([1, 2])})
    >>> t = unify_batches(cht_batches([c, Insert("x", 5, 6, {"v": 2.5, "w": "a"})]))
    >>> t.column_names, t.column("v").to_pylist(), t.column("w").to_pylist()
    (['start', 'end', 'v', 'w'], [1.0, 2.0, 2.5], [None, None, 'a'])
    """
    batches = list(batches)
    schema = _unified([b.schema for b in batches])
    return pa.Table.from_batches([conform(b, schema) for b in batches], schema=schema)


def result_to_arrow(rows_or_messages: Iterable[Any], times: Collection[str] = ()) -> pa.Table:
    """The CHT of a result (messages, column batches or CHT rows) as one Arrow table: the
    rows of :func:`cht_to_arrow`, built column-wise where the result is columnar; the payload
    fields named in ``times`` as timestamps (:func:`with_times`)."""
    return unify_batches(cht_batches(rows_or_messages, times=times))


# -- staging: parquet parts Spark reads in its executors -------------------------------------


def _stage(batches: Iterable[pa.RecordBatch], directory: str,
           part_rows: int = PART_ROWS) -> pa.Schema:
    """Write ``batches`` as parquet parts of about ``part_rows`` rows into ``directory`` (one
    batch held at a time, plus the part being written), all of one schema; returns it. An
    empty result is one empty part, so that Spark reads its columns."""
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    parts: list[tuple[str, pa.Schema]] = []
    writer: pq.ParquetWriter | None = None
    rows = 0

    def open_part(schema: pa.Schema) -> pq.ParquetWriter:
        path = os.path.join(directory, f"part-{len(parts):05d}.parquet")
        parts.append((path, schema))
        return pq.ParquetWriter(path, schema)

    for batch in batches:
        # a new part when this one is full, or for another schema (conformed below)
        if writer is not None and (rows >= part_rows or batch.schema != parts[-1][1]):
            writer.close()
            writer, rows = None, 0
        if writer is None:
            writer = open_part(batch.schema)
        writer.write_batch(batch)
        rows += batch.num_rows
    if writer is not None:
        writer.close()
    schema = _unified([s for _, s in parts])
    if not parts:
        pq.write_table(schema.empty_table(), os.path.join(directory, "part-00000.parquet"))
    for path, own in parts:
        if own != schema:  # rewritten in the common schema (read one part back)
            pq.write_table(conform(pq.read_table(path, schema=own), schema), path)
    return schema


def _staging_dir(session: SparkSession, staging: str | None, what: str) -> str | None:
    """A fresh directory for a result's parts: under ``staging`` when given, under the
    process's temp directory in local mode (removed when the process exits), else None (no
    staging: the result goes to Spark from driver memory)."""
    if staging is None:
        if not is_local(session):
            return None
        staging = process_temp_dir("cedar-sink-")
    return fresh_dir(staging, what)


def _dataframe(session: SparkSession, rows_or_messages: Iterable[Any],
               staging: str | None, what: str, times: Collection[str] = ()
               ) -> tuple[DataFrame, str | None]:
    directory = _staging_dir(session, staging, what)
    if directory is None:
        table = result_to_arrow(rows_or_messages, times)
        return session.createDataFrame(table), None
    _stage(cht_batches(rows_or_messages, times=times), directory)
    return session.read.parquet(directory), directory


def _session(spark: SparkSession | None, what: str) -> SparkSession:
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        raise RuntimeError(f"{what}: no SparkSession given and none is active; pass one, or "
                           f"start one with SparkSession.builder.getOrCreate()")
    return active


def to_spark(spark: SparkSession | None, rows_or_messages: Iterable[Any],
             staging: str | None = None, times: Collection[str] = ()) -> DataFrame:
    """A result as a Spark DataFrame: CHT rows, or a physical stream (turned into its CHT as
    :func:`operators.cht.to_cht` does), in the layout of :func:`cht_to_arrow` (``start``/``end``
    timestamps, null for ∞, plus the payload's fields). ``spark=None`` uses the active
    SparkSession.

    **At scale** the result never becomes one Python list of rows: column batches are
    converted column-wise (:func:`cht_batches`) and written batch by batch as parquet parts
    that Spark's executors read, so the driver holds one batch beyond the result itself. The
    parts go under ``staging`` (a directory every executor can read: a shared mount); by
    default, in local mode, under this process's temp directory (removed when it exits: the
    DataFrame reads them lazily). Without ``staging`` on a cluster the table goes through the
    driver (``createDataFrame`` of one Arrow table).

    Given what ``collect()`` returns (:class:`topology.inline_runtime.Collected`), the DataFrame
    gets its run's report as ``run_report`` (dead letters, late events, accounting), as
    ``Stream.to_spark`` returns it. ``times``: the payload fields that hold ticks (a reading's
    ``ts``: :func:`topology.times.time_fields` of the query), as timestamp columns.
    """
    session = _session(spark, "to_spark")
    df = _dataframe(session, rows_or_messages, staging, "to_spark", times)[0]
    report = getattr(rows_or_messages, "report", None)
    if report is not None:
        try:
            df.run_report = report  # type: ignore[attr-defined]
        except AttributeError:  # a DataFrame class that takes no attributes: the run warned
            pass
    return df


def write(
    spark: SparkSession | None,
    rows_or_messages: Iterable[Any],
    path: str,
    format: str = "parquet",
    mode: str = "error",
    staging: str | None = None,
    times: Collection[str] = (),
) -> None:
    """Write a result's CHT (see :func:`to_spark`) to ``path`` through Spark's writer.

    Text formats (``"json"``, ``"csv"``) get timestamps with microseconds (Spark's default
    format stops at milliseconds). ``mode`` is Spark's save mode: ``"error"`` (the default:
    fail if ``path`` exists), ``"overwrite"``, ``"append"`` or ``"ignore"``. The result is
    staged as parquet parts as in :func:`to_spark` (``staging``) and removed once written.
    ``times``: the payload fields that hold ticks, written as timestamps (:func:`to_spark`).
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"write(mode={mode!r}): mode must be one of {WRITE_MODES}")
    session = _session(spark, "write")
    df, directory = _dataframe(session, rows_or_messages, staging, "write", times)
    try:
        df.write.format(format).mode(mode).options(**_TEXT_TIMESTAMPS).save(path)
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


# -- the exactly-once streaming sink ---------------------------------------------------------
_LOG_NAME = "_cedar_commits.json"
_EPOCH_PREFIX = "epoch-"


def _epoch_stem(cti: int, run: int | None = None) -> str:
    """A file name stem that sorts like ``(run, CTI)`` (negative CTIs included; the stems of
    a sink without runs sort before every run's)."""
    if run is None:
        return f"{_EPOCH_PREFIX}{cti - MIN_TIME:020d}"
    return f"{_EPOCH_PREFIX}r{run:010d}-{cti - MIN_TIME:020d}"


class FinalRowsSink:
    """Appends, at each output CTI, the result rows that CTI made final, exactly once.

    After ``Cti(c)`` a retraction needs ``min(end, new_end) >= c`` (docs/model.md), so a row whose
    end is before ``c`` can never change again, and every row that ends before ``c`` is already
    in the CHT (a later insert starts at ``c`` or later). ``Cti(MAX_TIME)`` makes every row
    final, open edges included. The rows final at ``Cti(c)`` are therefore exactly the rows of
    the final CHT that end before ``c``, whatever the physical stream looked like.

    Feed the sink with :meth:`on_messages`. It keeps the live rows (those not final yet) in
    memory, and at a CTI that finalises rows it writes them (:func:`cht_to_arrow` layout) as
    one file named after the CTI: written to a hidden temp name, then atomically renamed, then
    recorded in the commit log ``_cedar_commits.json`` (the last committed CTI). Spark ignores
    files starting with ``_`` or ``.``, so ``spark.read.parquet(path)`` reads exactly the
    committed rows.

    **Exactly once across restarts**: a new sink on the same ``path`` reads the log (and
    deletes files written after the last commit by a sink that died before committing).
    Fed the same result stream again -- from the beginning, or from a position whose
    :meth:`snapshot` it was given with :meth:`restore` -- it writes only the rows that end at
    or after the committed CTI, so no row is written twice and none is lost. The CTIs of the
    replayed stream may even differ from the first run's.

    A row that ends exactly at the last CTI can still be extended, so it is not final: the
    end of the input's final CTI (``Ingress.end()``) leaves the rows ending there pending.
    Call :meth:`end` when the result stream is over: it treats the end like ``Cti(MAX_TIME)``
    and writes every pending row.

    **Runs of a resumed source** (``run``): a source that resumes where its last run stopped
    (``Stream.from_spark(streaming_df, checkpoint=...)``) does not replay from the beginning;
    each run is a new stretch of the stream, whose CTIs start again below the last run's end.
    ``run`` is the source's count of committed runs (``SparkStreamFeeder.run``): the log
    records it with the committed CTI, a sink with the logged run skips what that run
    committed (the source replays an unfinished run whole), and a sink with a later run
    starts a new stretch, in files named after the run and the CTI. A sink whose run is
    behind the log is refused (the source's checkpoint is not the one this path was written
    from). The source commits a run only after the sink's :meth:`end`, so the pair is
    exactly once end to end (docs/spark.md).

    ``format="parquet"`` is written with pyarrow (no Spark job per epoch; ``spark`` may be
    None); any other format Spark can write (``"orc"``, ``"json"``, ...) needs ``spark``.

    One sink object writes to a path at a time (the commit log has a single writer).

    Messages that break the rules of physical streams (docs/model.md; a retraction of an
    unknown id or a mismatching lifetime, an insert behind the CTI, a CTI that goes back) are
    not applied: they go to
    :attr:`dead_letters` with a reason.
    """

    def __init__(self, spark: SparkSession | None, path: str, format: str = "parquet",
                 name: str = "sink", run: int | None = None,
                 times: Collection[str] = ()) -> None:
        if format != "parquet" and spark is None:
            raise ValueError(f"FinalRowsSink(format={format!r}) writes through Spark: pass a "
                             f"SparkSession, or use format='parquet' (written with pyarrow)")
        self.spark = spark
        self.path = os.path.abspath(path)
        self.format = format
        self.name = name
        #: The source's run this sink writes (None: the source replays from the beginning).
        self.run = run
        #: payload fields that hold ticks, written as timestamps (:func:`with_times`)
        self.times = tuple(times)
        os.makedirs(self.path, exist_ok=True)
        #: The latest CTI of this run whose final rows are on disk (MIN_TIME: none yet).
        self.committed = MIN_TIME
        #: Files and rows written by this object.
        self.epochs_written = 0
        self.rows_written = 0
        #: Messages that could not be applied, with a reason.
        self.dead_letters: list[DeadLetter] = []
        #: the rows not final yet
        self.events = LiveEvents()
        self._schema: pa.Schema | None = None
        self._recover()

    # -- recovery -----------------------------------------------------------------------------
    def _log_path(self) -> str:
        return os.path.join(self.path, _LOG_NAME)

    def _recover(self) -> None:
        log = self._log_path()
        logged_run = None
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                entry = json.load(f)
            self.committed = int(entry["committed_cti"])
            logged_run = entry.get("run")
            if entry.get("format", self.format) != self.format:
                raise ValueError(f"FinalRowsSink: {self.path} holds {entry['format']!r} files; "
                                 f"open it with format={entry['format']!r} or use a new path")
        if self.run is None:
            self.run = logged_run  # no runs given: the logged run is replayed
        elif logged_run is not None and self.run < logged_run:
            raise ValueError(
                f"FinalRowsSink: {self.path} holds the output of run {logged_run} of its "
                f"source, which is at run {self.run}: the source's checkpoint is not the one "
                f"this output was written from; use the same checkpoint or a new path")
        nothing = os.path.exists(log) is False
        keep = _epoch_stem(self.committed, logged_run)
        for entry_name in sorted(os.listdir(self.path)):
            full = os.path.join(self.path, entry_name)
            if entry_name.startswith(TMP_PREFIX):  # a write that never got renamed
                _remove(full)
            elif entry_name.startswith(_EPOCH_PREFIX):
                stem = entry_name.split(".", 1)[0][:len(keep)]
                if nothing or stem > keep:  # renamed, never committed
                    _remove(full)
                elif self._schema is None and self.format == "parquet":
                    import pyarrow.parquet as pq

                    self._schema = pq.read_schema(full)
        if self.run != logged_run:  # a new run: a new stretch of the stream, nothing of it yet
            self.committed = MIN_TIME

    # -- the message path ---------------------------------------------------------------------
    def on_messages(self, messages: Iterable[Message]) -> None:
        """Apply a batch of result messages; write the rows each CTI makes final."""
        msg: Any  # told apart by type() on this hot path
        for msg in messages:
            kind = type(msg)
            if kind is Insert:
                self._insert(msg)
            elif kind is Retract:
                self._retract(msg)
            elif kind is Cti:
                self._on_cti(msg)
            else:
                self._reject(msg, f"not a physical message ({type(msg).__name__}); send "
                                  f"Insert, Retract or Cti")

    def end(self) -> None:
        """The result stream is over: nothing can change any more, so every pending row is
        final (as at ``Cti(MAX_TIME)``, which is what the commit log records)."""
        self._on_cti(Cti(MAX_TIME))

    def _reject(self, msg: Any, reason: str) -> None:
        self.dead_letters.append(DeadLetter(self.name, reason, msg))

    def _insert(self, msg: Insert) -> None:
        problem = self.events.insert(msg)
        if problem is not None:
            self._reject(msg, f"{problem}; the upstream broke the rules of a physical stream")

    def _retract(self, msg: Retract) -> None:
        problem = self.events.retract(msg)
        if problem is not None:
            self._reject(msg, f"{problem}; the upstream broke the rules of a physical stream")

    def _on_cti(self, msg: Cti) -> None:
        c = msg.time
        if c < self.events.cti:
            return self._reject(msg, f"CTI goes back from {self.events.cti} to {c}")
        final = self.events.drain() if c == MAX_TIME else self.events.advance_to(c)
        if self.committed == MAX_TIME:
            return None
        rows = [(s, e, p) for _, s, e, p in final
                if e >= self.committed]  # rows ending before it are in committed files
        if c > self.committed and rows:
            self._commit(c, rows)
        return None

    def _commit(self, cti: int, rows: list[tuple[int, int, Any]]) -> None:
        from operators.cht import row_key

        rows.sort(key=row_key)
        stem = _epoch_stem(cti, self.run)
        if self.format == "parquet":
            import pyarrow.parquet as pq

            table = with_times(cht_to_arrow(rows, self._schema), self.times)
            with atomic_path(os.path.join(self.path, f"{stem}.parquet")) as tmp:
                pq.write_table(table, tmp)
            if self._schema is None:
                self._schema = table.schema
        else:
            self._commit_with_spark(stem, rows)
        entry: dict[str, Any] = {"committed_cti": cti, "format": self.format}
        if self.run is not None:
            entry["run"] = self.run
        atomic_write(self._log_path(), json.dumps(entry).encode())
        self.committed = cti
        self.epochs_written += 1
        self.rows_written += len(rows)

    def _commit_with_spark(self, stem: str, rows: list[tuple[int, int, Any]]) -> None:
        assert self.spark is not None
        tmp_dir = temp_path(os.path.join(self.path, stem))  # beside the epoch's files
        df = self.spark.createDataFrame(with_times(cht_to_arrow(rows), self.times)).coalesce(1)
        df.write.format(self.format).options(**_TEXT_TIMESTAMPS).save(tmp_dir)
        parts = sorted(p for p in os.listdir(tmp_dir) if p.startswith("part-"))
        for i, part in enumerate(parts):
            ext = part.split(".", 1)[1] if "." in part else self.format
            os.replace(os.path.join(tmp_dir, part),
                       os.path.join(self.path, f"{stem}-{i}.{ext}"))
        shutil.rmtree(tmp_dir, ignore_errors=True)

    # -- checkpoints and checks ---------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The in-memory state (live rows and CTI) at this point of the stream; the committed
        CTI is not part of it: it lives on disk."""
        return pickle.loads(pickle.dumps({"events": self.events}))

    def restore(self, state: dict[str, Any]) -> None:
        """Resume from a :meth:`snapshot`: feed the messages that followed it next."""
        self.events = pickle.loads(pickle.dumps(state["events"]))

    def state_size(self) -> int:
        """Number of live rows held (rows not final yet)."""
        return len(self.events)

    def pending(self) -> list[tuple[int, int, Any]]:
        """The live rows, not final yet, as CHT rows."""
        from operators.cht import row_key

        return sorted(self.events.rows(), key=row_key)

    def _check(self) -> None:
        self.events.check()

    def __repr__(self) -> str:
        return (f"<FinalRowsSink {self.path} committed={self.committed} "
                f"live={len(self.events)}>")


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.remove(path)
