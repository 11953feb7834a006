"""The Spark bridge: DataFrames in as events, result tables out as DataFrames (docs/spark.md).

Data crosses between Spark and cedar through Arrow, never row by row:

* **batch source** -- :func:`spark_row_batches` reads a DataFrame in time order, range by
  range, as Arrow record batches (:mod:`topology.spark_source`: a batch DataFrame means its
  whole table, whatever the order of its partitions, and is never collected whole), turns
  the time columns into integer ticks (1 tick = 1 µs since 1970-01-01 UTC) with one
  vectorised cast per batch, and yields row lists or column batches; :func:`ingest_spark`
  runs them through the same :class:`operators.ingress.Ingress` as ``Stream.from_rows``;
* **streaming source** -- :class:`SparkStreamFeeder` reads a streaming DataFrame micro-batch
  by micro-batch (``foreachBatch``), one Ingress across all micro-batches, replayed
  micro-batches skipped by ``batch_id``;
* **batch sinks** -- :func:`cht_to_arrow`, :func:`to_spark` and :func:`write` turn the CHT of a
  result into a table with ``start``, ``end`` timestamp columns plus the payload's fields;
* **streaming sink** -- :class:`FinalRowsSink` appends, at each output CTI, the rows that CTI
  made final, exactly once across restarts.

    >>> table = cht_to_arrow([(0, 5, {"meter": "m1", "kwh": 1.5})])
    >>> table.column_names
    ['start', 'end', 'meter', 'kwh']
    >>> table.to_pylist()[0]["end"].isoformat()
    '1970-01-01T00:00:00.000005+00:00'

Spark is imported lazily: only the functions that take a DataFrame or a SparkSession need it.
The builder's ``Stream.from_spark`` / ``.to_spark`` / ``.write`` are meant to call these
functions; the sinks take a SparkSession, or ``None`` for the active one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import queue
import shutil
import threading
import time as _time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from actors.checkpoint import load as load_checkpoint
from actors.files import TMP_PREFIX, atomic_path, atomic_write, temp_path
from operators.cht import to_cht
from operators.errors import DeadLetter
from operators.events import MAX_TIME, MIN_TIME, TICKS_PER_SECOND, Cti, Insert, Message, Retract
from operators.ingress import AdvanceTime, Ingress
from operators.live import LiveEvents

from .spark_source import PARTITION_ROWS, coalesced, ordered_record_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "FinalRowsSink",
    "SparkStreamFeeder",
    "arrow_row_batches",
    "cht_to_arrow",
    "ingest_spark",
    "spark_row_batches",
    "to_spark",
    "write",
]

#: Rows per list handed to the Ingress (and per Arrow record batch read from Spark).
DEFAULT_BATCH_ROWS = 10_000
_TICKS_PER_DAY = 86_400 * TICKS_PER_SECOND
#: Ticks per unit of an Arrow timestamp; a negative number floor-divides.
_ARROW_UNITS = {"s": TICKS_PER_SECOND, "ms": 1_000, "us": 1, "ns": -1_000}
#: The Arrow type of the ``start``/``end`` columns of every sink.
TIME_TYPE = pa.timestamp("us", tz="UTC")
#: The default AdvanceTime (immutable): CTIs only at the end of input and from idle timeouts.
_NO_ADVANCE = AdvanceTime()
#: Text formats write timestamps to the millisecond unless told otherwise; ticks are µs.
_TEXT_TIMESTAMPS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
_WRITE_MODES = ("error", "errorifexists", "overwrite", "append", "ignore")


# -- sources ----------------------------------------------------------------------------------
def _ticks(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, list[Any]] | None:
    """A timestamp, date or integer column as int64 ticks: ``(ticks, good, bad)`` where
    ``good`` marks the values that are present and fit int64 ticks, and ``bad`` holds, for the
    others in order, the value the ingress should judge: ``None`` for a null, the exact ticks
    as a Python int for a time too far out (which the ingress rejects as outside the time
    axis, instead of numpy wrapping it round). None for a column of another type.

    Timestamps with a time zone hold UTC instants; timestamps without one (Spark's
    ``TIMESTAMP_NTZ``) are read as UTC wall times, as :func:`operators.ingress.to_ticks` reads
    naive datetimes.

    >>> t, good, bad = _ticks(pa.array([1, None, 10**13], pa.timestamp("s")))
    >>> t.tolist(), good.tolist(), bad
    ([1000000, 0, 0], [True, False, False], [None, 10000000000000000000])
    """
    kind = column.type
    if pa.types.is_timestamp(kind):
        factor = _ARROW_UNITS[kind.unit]
    elif pa.types.is_date32(kind):
        factor = _TICKS_PER_DAY
    elif pa.types.is_date64(kind):  # milliseconds
        factor = 1_000
    elif pa.types.is_integer(kind):
        factor = 1
    else:
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    raw = column.cast(pa.int32() if pa.types.is_date32(kind) else pa.int64())
    values = raw.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    good = ~nulls
    if factor > 1:
        limit = MAX_TIME // factor
        good &= (values <= limit) & (values >= -limit)
        ticks = np.where(good, values, 0) * factor
    else:
        ticks = values if factor == 1 else values // -factor
    bad = [None if nulls[i] else int(values[i]) * factor for i in np.flatnonzero(~good)]
    return ticks, good, bad


def _time_columns(*specs: Any) -> list[str]:
    return [s for s in specs if isinstance(s, str)]


def _column_array(column: pa.Array) -> np.ndarray:
    """A payload column as numpy: numbers and bools without nulls as they are, anything
    else as an object array of the Python values a row would hold."""
    kind = column.type
    if column.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                   or pa.types.is_boolean(kind)):
        return column.to_numpy(zero_copy_only=False)
    values = np.empty(len(column), dtype=object)
    values[:] = column.to_pylist()
    return values


def _piece(piece: pa.RecordBatch, names: list[str], columnar: bool) -> Any:
    """One record batch as a column batch ``{name: array}`` (when ``columnar`` and every
    time is good) or as a list of row dicts, with ticks in the time columns ``names``."""
    times = {}
    for name in names:
        i = piece.schema.get_field_index(name)
        converted = _ticks(piece.column(i)) if i >= 0 else None
        if converted is not None:
            times[name] = converted
    if columnar and all(good.all() for _, good, _ in times.values()):
        return {name: times[name][0] if name in times else _column_array(column)
                for name, column in zip(piece.schema.names, piece.columns)}
    for name, (ticks, _, _) in times.items():  # Arrow cannot make datetimes of every value
        piece = piece.set_column(piece.schema.get_field_index(name), name, pa.array(ticks))
    rows = piece.to_pylist()
    for name, (ticks, good, bad) in times.items():
        values = ticks.tolist()
        for i, value in zip(np.flatnonzero(~good).tolist(), bad):
            values[i] = value
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def arrow_batches(
    batches: Iterable[pa.RecordBatch | pa.Table],
    start: Any,
    end: Any = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    columnar: bool = True,
) -> Iterator[Any]:
    """Arrow batches (or tables) cut into source batches of at most ``batch_rows`` rows:
    column batches ``{name: numpy array}`` that the ingress takes vectorised, or, when
    ``columnar`` is false or a time is null or out of range, lists of row dicts.

    The ``start`` and ``end`` columns (when they are column names of timestamp, date or
    integer type) hold int64 ticks; a null time is ``None`` in its row so that the Ingress
    sends the row to its dead letters. Other columns keep their Python values (timestamps as
    aware ``datetime`` objects; in a column batch, numbers and bools without nulls as numpy
    arrays, anything else as object arrays).

    >>> t = pa.table({"ts": pa.array([1_000_000, None], pa.timestamp("us", tz="UTC")),
    ...               "kwh": [1.5, 2.0]})
    >>> next(arrow_batches([t], start="ts"))
    [{'ts': 1000000, 'kwh': 1.5}, {'ts': None, 'kwh': 2.0}]
    >>> next(arrow_batches([t.slice(0, 1)], start="ts"))
    {'ts': array([1000000]), 'kwh': array([1.5])}
    """
    if not (isinstance(batch_rows, int) and batch_rows >= 1):
        raise ValueError(f"batch_rows={batch_rows!r}: give an int >= 1 (rows per batch)")
    names = _time_columns(start, end)
    for batch in batches:
        pieces = batch.to_batches(max_chunksize=batch_rows) if isinstance(batch, pa.Table) \
            else [batch.slice(i, batch_rows) for i in range(0, batch.num_rows, batch_rows)]
        for piece in pieces:
            if piece.num_rows:
                yield _piece(piece, names, columnar)


def arrow_row_batches(
    batches: Iterable[pa.RecordBatch | pa.Table],
    start: Any,
    end: Any = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[list[dict[str, Any]]]:
    """:func:`arrow_batches` as lists of row dicts only.

    >>> t = pa.table({"ts": pa.array([1_000_000, None], pa.timestamp("us", tz="UTC")),
    ...               "kwh": [1.5, 2.0]})
    >>> next(arrow_row_batches([t], start="ts"))
    [{'ts': 1000000, 'kwh': 1.5}, {'ts': None, 'kwh': 2.0}]
    """
    return arrow_batches(batches, start, end, batch_rows, columnar=False)


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
    return pa.Table.from_batches(df._collect_as_arrow())  # PySpark 3.x


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


def spark_stream_rows(
    df: DataFrame, start: Any, end: Any = None, trigger: dict[str, Any] | None = None,
    checkpoint_location: str | None = None, batch_rows: int = DEFAULT_BATCH_ROWS,
    max_batches: int = 4, columnar: bool = False,
) -> Iterator[Any]:
    """The rows of a *streaming* DataFrame, micro-batch by micro-batch, as lists of row dicts
    with ticks in the time columns (see :func:`arrow_row_batches`).

    Iteration starts ``df.writeStream.foreachBatch(...)`` with ``trigger`` (default
    ``{"availableNow": True}``: every input available now, then the generator ends; with
    ``{"processingTime": ...}`` it runs until the query is stopped). A micro-batch that Spark
    replays with an id already seen is skipped. At most ``max_batches`` row lists wait for the
    consumer: a slow query holds Spark back instead of filling memory. For exactly-once input
    across driver restarts use :class:`SparkStreamFeeder` with a checkpoint location.
    """
    if not getattr(df, "isStreaming", False):
        raise ValueError("spark_stream_rows needs a streaming DataFrame (spark.readStream); "
                         "read a batch DataFrame with spark_row_batches")
    _check_columns(df, "spark_stream_rows", start=start, end=end)

    def generate() -> Iterator[list[dict[str, Any]]]:
        pending: queue.Queue[Any] = queue.Queue(maxsize=max_batches)
        done = object()
        last = [-1]

        def on_batch(batch_df: DataFrame, batch_id: int) -> None:
            if batch_id <= last[0]:
                return
            for rows in arrow_batches([_frame_to_arrow(batch_df)], start, end, batch_rows,
                                      columnar):
                pending.put(rows)
            last[0] = batch_id

        writer = df.writeStream.foreachBatch(on_batch)
        if checkpoint_location is not None:
            writer = writer.option("checkpointLocation", checkpoint_location)
        query = writer.trigger(**(trigger or {"availableNow": True})).start()

        def wait() -> None:
            try:
                query.awaitTermination()
            except Exception as exc:  # surfaces in the consumer
                pending.put(exc)
            finally:
                pending.put(done)

        threading.Thread(target=wait, name="cedar-spark-stream", daemon=True).start()
        try:
            while True:
                item = pending.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if query.isActive:
                query.stop()

    return generate()


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


class SparkStreamFeeder:
    """Feeds a streaming DataFrame into one :class:`Ingress`, micro-batch by micro-batch.

    :meth:`start` runs ``df.writeStream.foreachBatch(self.process_batch)``; each micro-batch is
    read through Arrow (:func:`arrow_row_batches`), pushed into the same Ingress (so ids, CTIs
    and late handling continue across micro-batches), and the resulting messages are handed to
    ``on_messages(list[Message])`` (nothing is called for a micro-batch that yields none).

    ``foreachBatch`` is at-least-once: after a failure Spark runs the last uncommitted
    micro-batch again with the same ``batch_id``. A batch whose id is not above the last one
    processed is skipped and counted in ``replayed``.

    With ``checkpoint_location`` the Spark query keeps its offsets there, and the feeder keeps
    its own state (the Ingress snapshot and the last batch id) in
    ``<checkpoint_location>/cedar_feeder.pkl``, written atomically after each micro-batch; a new
    feeder on the same checkpoint location resumes from it. Delivery to ``on_messages`` is then
    exactly once, except when the process dies between ``on_messages`` and the state write:
    that one micro-batch is delivered again, as the same messages (the Ingress is
    deterministic).

    ``end()`` (after the query has stopped) emits the Ingress's final CTI; ``poll()`` the idle
    CTI of ``AdvanceTime(idle_timeout=...)``.
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
        _check_columns(df, "SparkStreamFeeder", start=start, end=end)
        self.df = df
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
        if checkpoint_location is not None:
            self._load_state()

    # -- state --------------------------------------------------------------------------------
    def _state_path(self) -> str:
        return os.path.join(self.checkpoint_location or "", "cedar_feeder.pkl")

    def _load_state(self) -> None:
        try:  # read the way atomic_write wrote it, a storage URI included
            state = load_checkpoint(self._state_path())
        except FileNotFoundError:
            return
        self.ingress.restore(state["ingress"])
        self.last_batch_id = state["last_batch_id"]

    def _save_state(self) -> None:
        path = self._state_path()
        state = {"ingress": self.ingress.snapshot(), "last_batch_id": self.last_batch_id}
        atomic_write(path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))

    # -- the micro-batch function -----------------------------------------------------------
    def process_batch(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` function: ingest one micro-batch unless it is a replay."""
        if batch_id <= self.last_batch_id:
            self.replayed += 1
            return
        out: list[Message] = []
        push = self.ingress.push
        now = _time.monotonic()
        table = _frame_to_arrow(batch_df)
        for rows in arrow_row_batches([table], self.start_col, self.end_col, self.batch_rows):
            out.extend(push(rows, now=now))
        self._deliver(out)
        self.last_batch_id = batch_id
        self.batches += 1
        if self.checkpoint_location is not None:
            self._save_state()

    def _deliver(self, out: list[Message]) -> None:
        if not out:
            return
        if self.on_messages is None:
            self.messages.extend(out)
        else:
            self.on_messages(out)

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
        return q.awaitTermination(timeout_s) if timeout_s is not None else q.awaitTermination()

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


# -- sinks ------------------------------------------------------------------------------------
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
    for row in rows:
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
        values = [fields.get(name) for fields in flat]
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


def _as_rows(rows_or_messages: Iterable[Any]) -> list[tuple[int, int, Any]]:
    items = list(rows_or_messages)
    if any(isinstance(m, (Insert, Retract, Cti)) for m in items):
        return to_cht(items)
    return items


def _session(spark: SparkSession | None, what: str) -> SparkSession:
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is None:
        raise RuntimeError(f"{what}: no SparkSession given and none is active; pass one, or "
                           f"start one with SparkSession.builder.getOrCreate()")
    return active


def to_spark(spark: SparkSession | None, rows_or_messages: Iterable[Any]) -> DataFrame:
    """A result as a Spark DataFrame: CHT rows, or a physical stream (turned into its CHT
    with :func:`operators.cht.to_cht`), converted by :func:`cht_to_arrow` (``start``/``end``
    timestamps, null for ∞, plus the payload's fields) and handed to Spark as Arrow.
    ``spark=None`` uses the active SparkSession."""
    session = _session(spark, "to_spark")
    return session.createDataFrame(cht_to_arrow(_as_rows(rows_or_messages)))


def write(
    spark: SparkSession | None,
    rows_or_messages: Iterable[Any],
    path: str,
    format: str = "parquet",
    mode: str = "error",
) -> None:
    """Write a result's CHT (see :func:`to_spark`) to ``path`` through Spark's writer.

    Text formats (``"json"``, ``"csv"``) get timestamps with microseconds (Spark's default
    format stops at milliseconds). ``mode`` is Spark's save mode: ``"error"`` (the default: fail if ``path`` exists),
    ``"overwrite"``, ``"append"`` or ``"ignore"``.
    """
    if mode not in _WRITE_MODES:
        raise ValueError(f"write(mode={mode!r}): mode must be one of {_WRITE_MODES}")
    (to_spark(spark, rows_or_messages).write.format(format).mode(mode)
     .options(**_TEXT_TIMESTAMPS).save(path))


# -- the exactly-once streaming sink ---------------------------------------------------------
_LOG_NAME = "_cedar_commits.json"
_EPOCH_PREFIX = "epoch-"


def _epoch_stem(cti: int) -> str:
    """A file name stem that sorts like the CTI (negative CTIs included)."""
    return f"{_EPOCH_PREFIX}{cti - MIN_TIME:020d}"


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

    ``format="parquet"`` is written with pyarrow (no Spark job per epoch; ``spark`` may be
    None); any other format Spark can write (``"orc"``, ``"json"``, ...) needs ``spark``.

    One sink object writes to a path at a time (the commit log has a single writer).

    Messages that break the rules of physical streams (docs/model.md; a retraction of an
    unknown id or a mismatching lifetime, an insert behind the CTI, a CTI that goes back) are
    not applied: they go to
    :attr:`dead_letters` with a reason.
    """

    def __init__(self, spark: SparkSession | None, path: str, format: str = "parquet",
                 name: str = "sink") -> None:
        if format != "parquet" and spark is None:
            raise ValueError(f"FinalRowsSink(format={format!r}) writes through Spark: pass a "
                             f"SparkSession, or use format='parquet' (written with pyarrow)")
        self.spark = spark
        self.path = os.path.abspath(path)
        self.format = format
        self.name = name
        os.makedirs(self.path, exist_ok=True)
        #: The latest CTI whose final rows are on disk (MIN_TIME: nothing committed yet).
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
        if os.path.exists(log):
            with open(log, encoding="utf-8") as f:
                entry = json.load(f)
            self.committed = int(entry["committed_cti"])
            if entry.get("format", self.format) != self.format:
                raise ValueError(f"FinalRowsSink: {self.path} holds {entry['format']!r} files; "
                                 f"open it with format={entry['format']!r} or use a new path")
        keep = _epoch_stem(self.committed)
        for entry_name in sorted(os.listdir(self.path)):
            full = os.path.join(self.path, entry_name)
            if entry_name.startswith(TMP_PREFIX):  # a write that never got renamed
                _remove(full)
            elif entry_name.startswith(_EPOCH_PREFIX):
                stem = entry_name[:len(keep)]
                if self.committed == MIN_TIME or stem > keep:  # renamed, never committed
                    _remove(full)
                elif self._schema is None and self.format == "parquet":
                    import pyarrow.parquet as pq

                    self._schema = pq.read_schema(full)

    # -- the message path ---------------------------------------------------------------------
    def on_messages(self, messages: Iterable[Message]) -> None:
        """Apply a batch of result messages; write the rows each CTI makes final."""
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
        stem = _epoch_stem(cti)
        if self.format == "parquet":
            import pyarrow.parquet as pq

            table = cht_to_arrow(rows, self._schema)
            with atomic_path(os.path.join(self.path, f"{stem}.parquet")) as tmp:
                pq.write_table(table, tmp)
            if self._schema is None:
                self._schema = table.schema
        else:
            self._commit_with_spark(stem, rows)
        atomic_write(self._log_path(), json.dumps(
            {"committed_cti": cti, "format": self.format}).encode())
        self.committed = cti
        self.epochs_written += 1
        self.rows_written += len(rows)

    def _commit_with_spark(self, stem: str, rows: list[tuple[int, int, Any]]) -> None:
        assert self.spark is not None
        tmp_dir = temp_path(os.path.join(self.path, stem))  # beside the epoch's files
        df = self.spark.createDataFrame(cht_to_arrow(rows)).coalesce(1)
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
