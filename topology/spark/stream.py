"""The streaming Spark source: a streaming DataFrame fed into one Ingress, exactly once.

:class:`SparkStreamFeeder` reads a streaming DataFrame micro-batch by micro-batch
(``foreachBatch``) in arrival order, replayed micro-batches skipped by ``batch_id``; it keeps
one :class:`operators.ingress.Ingress` across all micro-batches and, with a checkpoint
location, commits the Ingress's state and the batch id beside Spark's own checkpoint after
each micro-batch (:mod:`topology.spark.checkpoint`), so that a restart resumes exactly once.
``Stream.from_spark`` on a streaming DataFrame runs through it
(:meth:`SparkStreamFeeder.stream`); there is no other streaming reader (docs/spark.md).
Spark is imported lazily.
"""

from __future__ import annotations

import functools
import pickle
import queue
import threading
import time as _time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from actors.checkpoint import load as load_checkpoint
from actors.files import atomic_write
from operators.events import Message
from operators.ingress import AdvanceTime, Ingress
from topology.building.arrow_reader import DEFAULT_BATCH_ROWS, arrow_row_batches
from topology.spark.checkpoint import HeldRun, join_location
from topology.spark.frames import check_columns, check_time_types, frame_to_arrow, schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

__all__ = ["SparkStreamFeeder"]

#: The default AdvanceTime (immutable): CTIs only at the end of input and from idle timeouts.
_NO_ADVANCE = AdvanceTime()
#: Handed over in place of a micro-batch by :meth:`SparkStreamFeeder.wake`.
_WAKE = object()
#: What :meth:`SparkStreamFeeder.stream`'s micro-batch function waits for between checks that
#: the consumer is still there (seconds).
_ACK_WAIT_S = 0.5


class _Stopped(RuntimeError):
    """Raised inside ``foreachBatch`` when the consumer stopped: Spark does not commit."""


def _drift(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """The columns whose presence or type differs between two schemas, described."""
    out = [f"{c!r} was {saved[c]}, is now {now[c]}" for c in saved
           if c in now and saved[c] != now[c]]
    out += [f"{c!r} ({saved[c]}) is gone" for c in saved if c not in now]
    out += [f"{c!r} ({now[c]}) is new" for c in now if c not in saved]
    return out


class SparkStreamFeeder(HeldRun):
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
        check_columns(df, "SparkStreamFeeder", start=start, end=end, id=id)
        check_time_types(df, "SparkStreamFeeder", start=start, end=end)
        self.df = df
        self.schema = schema_of(df)
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
        #: The queue of the run under way, its micro-batches handed over (wake()).
        self._handoff: queue.Queue[Any] | None = None
        #: The commit of the micro-batch last yielded, until the consumer took it (settle()).
        self._taken: Callable[[], None] | None = None
        if checkpoint_location is not None:
            self._load_state()
        if self._saved_ingress is None:
            self._saved_ingress = self.ingress.snapshot()

    # -- state --------------------------------------------------------------------------------
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
        self._deliver(self.ingest(frame_to_arrow(batch_df)))
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
        the consumer asks for them (or an empty list, once per :meth:`wake`); ``trigger`` as
        in :meth:`start` (default ``{"availableNow": True}``: every input available now,
        then the run ends).

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
        self._handoff = handoff
        acks: queue.Queue[bool] = queue.Queue()
        closed = threading.Event()
        done = object()

        def on_batch(batch_df: DataFrame, batch_id: int) -> None:
            if closed.is_set():
                raise _Stopped("cedar: the consumer of this stream stopped")
            if batch_id <= self.last_batch_id:
                self.replayed += 1
                return
            handoff.put((frame_to_arrow(batch_df), batch_id))
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

        query = self._writer(on_batch).trigger(**(trigger or {"availableNow": True})).start()
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
                logged = join_location(self._run_dir(), f"{batch_id}.pkl")
                out = self.ingest(load_checkpoint(logged))
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
                if item is _WAKE:  # a consumer that must act between batches (wake())
                    yield []
                    continue
                if isinstance(item, BaseException):
                    raise item
                table, batch_id = item
                out = self.ingest(table)
                self._taken = functools.partial(self._commit_taken, table, batch_id,
                                                start if held else None, acks)
                if out:
                    yield out
                self.settle()
            final = self.ingress.end()  # this run's end: not committed
            self._run_records = self._records_since(before)
            if final:
                yield final
            if held and not hold:
                self.commit_run()
        finally:
            self._taken = None  # a micro-batch yielded and not taken: read again next run
            closed.set()
            acks.put(False)
            if query.isActive:
                query.stop()

    def settle(self) -> None:
        """The consumer took the messages of the micro-batch :meth:`stream` yielded last:
        commit it now (logged first in a held run), not only when the consumer asks for more.
        A savepoint's cut calls it (every batch yielded before the cut was fed), so that the
        next run over the checkpoint continues after that micro-batch. Nothing when there is
        none to commit."""
        taken, self._taken = self._taken, None
        if taken is not None:
            taken()

    def wake(self) -> None:
        """Make the run of :meth:`stream` under way yield an empty list as soon as it waits
        for a micro-batch, for a consumer that must act between batches while the stream is
        quiet (a savepoint's cut); nothing when no run is under way. Any thread may call
        it."""
        if self._handoff is not None:
            self._handoff.put(_WAKE)

    def _commit_taken(self, table: pa.Table, batch_id: int, held_start: dict[str, Any] | None,
                      acks: queue.Queue[bool]) -> None:
        if held_start is not None:
            self._log_batch(table, batch_id, held_start)
        self.commit(batch_id)
        acks.put(True)

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
        writer = self._writer(self.process_batch)
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

    def _writer(self, on_batch: Callable[[DataFrame, int], None]) -> DataStreamWriter:
        """The DataFrame's stream writer calling ``on_batch`` per micro-batch, its offsets kept
        under the checkpoint location when there is one."""
        writer = self.df.writeStream.foreachBatch(on_batch)
        if self.checkpoint_location is not None:
            writer = writer.option("checkpointLocation", self.checkpoint_location)
        return writer

    def _running(self) -> StreamingQuery:
        if self.query is None:
            raise RuntimeError("SparkStreamFeeder: call start() first")
        return self.query
