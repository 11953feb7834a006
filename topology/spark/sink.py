"""The Spark sinks: result tables out as DataFrames and files (docs/spark.md).

* **batch sinks** -- :func:`to_spark` and :func:`write` hand the CHT of a result to Spark as
  a table with ``start``, ``end`` timestamp columns plus the payload's fields, built by
  :mod:`topology.spark.arrow` (:func:`~topology.spark.arrow.cht_to_arrow` and the rest, whose
  names are importable from here too) and staged as parquet parts Spark's executors read;
* **streaming sink** -- :class:`FinalRowsSink` appends, at each output CTI, the rows that CTI
  made final, exactly once across restarts (its commit log records the last CTI written).

    >>> table = cht_to_arrow([(0, 5, {"meter": "m1", "kwh": 1.5})])
    >>> table.column_names
    ['start', 'end', 'meter', 'kwh']

Spark is imported lazily: only the functions that take a SparkSession need it, and they take
``None`` for the active one. The builder's ``.to_spark`` / ``.write`` / ``.to_spark_stream``
call these.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from actors.files import TMP_PREFIX, atomic_path, atomic_write, temp_path
from operators.errors import DeadLetter
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Message, Retract
from operators.live import LiveEvents
from topology.spark.arrow import (
    TIME_TYPE,
    cht_batches,
    cht_to_arrow,
    columns_to_arrow,
    conform,
    result_to_arrow,
    unified_schema,
    unify_batches,
    with_times,
)
from topology.spark.frames import fresh_dir, is_local, process_temp_dir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["TIME_TYPE", "WRITE_MODES", "FinalRowsSink", "cht_batches", "cht_to_arrow",
           "columns_to_arrow", "result_to_arrow", "to_spark", "unify_batches", "with_times",
           "write"]

#: Text formats write timestamps to the millisecond unless told otherwise; ticks are µs.
_TEXT_TIMESTAMPS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
#: Spark's save modes :func:`write` takes.
WRITE_MODES = ("error", "errorifexists", "overwrite", "append", "ignore")
#: Rows per parquet part the sinks stage for Spark (one part per Spark read task).
PART_ROWS = 1_048_576


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
    schema = unified_schema([s for _, s in parts])
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

    Given what ``collect()`` returns (:class:`topology.running.inline.Collected`), the DataFrame
    gets its run's report as ``run_report`` (dead letters, late events, accounting), as
    ``Stream.to_spark`` returns it. ``times``: the payload fields that hold ticks (a reading's
    ``ts``: :func:`topology.building.times.time_fields` of the query), as timestamp columns.
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
