"""Spark's side of the benchmark suite: the same workloads in Spark Structured Streaming, and
cedar fed from (and written back through) Spark.

* :func:`session` -- ``local[2]`` with ``spark.sql.shuffle.partitions`` = :data:`SHUFFLE_PARTITIONS`
  (the default 200 makes a 2-core machine ~8x slower, docs/runtime.md);
* :func:`sss_w1` / :func:`sss_w2` / :func:`sss_w3` -- ``readStream`` of the parquet files,
  ``withWatermark`` (the generator's disorder), ``groupBy(window, key)`` or a time-bounded
  stream-stream join, append mode, ``trigger(availableNow=True)``, the ``noop`` sink;
* :func:`cedar_from_spark` -- ``spark.read.parquet`` →
  :func:`topology.spark.source.spark_row_batches` → a cedar query (inline) →
  :func:`topology.spark.sink.write` (parquet);
* :func:`microbatch_latency` -- W1 on Spark's ``rate`` source at a fixed rate with a
  processing-time trigger; the per-micro-batch ``triggerExecution`` durations.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import workloads as wl

#: ``spark.sql.shuffle.partitions`` for every Spark query of the suite.
SHUFFLE_PARTITIONS = 2
#: The watermark delay: the generator's disorder (2 ms).
WATERMARK = f"{wl.JITTER_TICKS // 1000} milliseconds"


def session(driver_memory: str = "8g") -> Any:
    """A ``local[2]`` SparkSession for the suite (Spark's Python workers use this
    interpreter). One JVM per process: the first session's ``driver_memory`` holds for every
    later one until :func:`end_session` ends that JVM (SSS keeps its state in that heap:
    Nexmark's Q5 at 8M events ran out of 2 GB)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("cedar-benchmarks")
             .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", driver_memory)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def end_session(spark: Any) -> None:
    """Stop ``spark`` and its JVM, whose heap would otherwise stay with the process (a
    later :func:`session` then starts a JVM of its own, with its own settings)."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:  # the JVM ends when its stdin closes
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    SparkContext._gateway = SparkContext._jvm = None


def _schema() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType, TimestampType

    return StructType([StructField("ts", TimestampType()), StructField("k", LongType()),
                       StructField("v", DoubleType())])


def _stream(spark: Any, path: str) -> Any:
    return spark.readStream.schema(_schema()).parquet(path)


def _run_available_now(df: Any, out: str | None = None) -> float:
    """Run a streaming query to the end of its input (append mode, ``availableNow``) into
    the ``noop`` sink or, with ``out``, into parquet files there; seconds."""
    ckpt = tempfile.mkdtemp(prefix="cedar-sss-")
    try:
        w = (df.writeStream.format("noop" if out is None else "parquet").outputMode("append")
             .option("checkpointLocation", ckpt).trigger(availableNow=True))
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)  # a fresh sink: no rows of an earlier run
            w = w.option("path", out)
        t0 = time.perf_counter()
        w.start().awaitTermination()
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


# -- the end of the input: a sentinel row ------------------------------------------------------
#: The sentinel row's key: no generated event has it, and its rows are left out of the
#: comparison.
SENTINEL_KEY = -1
#: The sentinel's event time lies this far past the latest event: beyond the end of every
#: window holding an event (W2's windows last 10 s), so the watermark it raises closes them.
SENTINEL_AFTER_TICKS = 60 * 1_000_000


def with_sentinel(path: str, dest: str) -> str:
    """The parquet directory ``path`` as Spark SSS reads it: its files (hard-linked, not
    copied) plus one sentinel row ``(latest + 60 s, key -1, v 0.5)``. cedar's sources end with
    a CTI at ∞ that closes every window; Spark's append mode outputs a window only once the
    watermark passed its end, so without the sentinel its last windows are never output.
    The sentinel passes W1's and W2's ``where`` (the watermark follows the rows after it)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    os.makedirs(dest, exist_ok=True)
    files = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
    latest, kind = None, None
    for f in files:  # the latest event of every file (a table's files hold any times)
        os.link(os.path.join(path, f), os.path.join(dest, f))
        ts = pq.read_table(os.path.join(path, f), columns=["ts"])["ts"]
        top = pc.max(ts).cast(pa.int64()).as_py()
        latest, kind = (top if latest is None else max(latest, top)), ts.type
    sentinel = pa.table({"ts": pa.array([latest + SENTINEL_AFTER_TICKS], kind),
                         "k": pa.array([SENTINEL_KEY], pa.int64()),
                         "v": pa.array([0.5], pa.float64())})
    pq.write_table(sentinel, os.path.join(dest, "sentinel.parquet"))
    return dest


def w1_frame(df: Any) -> Any:
    """W1 in Spark: where → groupBy(tumbling 1 s, k) → count, sum(v)."""
    from pyspark.sql import functions as F

    return (df.where(F.col("v") >= wl.WHERE_CUT).withWatermark("ts", WATERMARK)
            .groupBy(F.window("ts", "1 second"), "k")
            .agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("sum"))
            .select(F.col("window.start").alias("start"), F.col("window.end").alias("end"),
                    "k", "count", "sum"))


def w2_frame(df: Any) -> Any:
    """W2 in Spark: hopping 10 s / 1 s; the time-weighted average of points (each lives one
    tick) is ``sum(v) / window length in ticks``."""
    from pyspark.sql import functions as F

    return (df.where(F.col("v") >= wl.WHERE_CUT).withWatermark("ts", WATERMARK)
            .groupBy(F.window("ts", "10 seconds", "1 second"), "k")
            .agg((F.sum("v") / float(wl.HOP_SIZE_TICKS)).alias("twa"))
            .select(F.col("window.start").alias("start"), F.col("window.end").alias("end"),
                    "k", "twa"))


def w3_frame(left: Any, right: Any) -> Any:
    """W3 in Spark: inner stream-stream join on k with |ts_l - ts_r| below the events'
    lifetime (their lifetimes overlap), both sides watermarked."""
    from pyspark.sql import functions as F

    ms = wl.JOIN_LIFETIME_TICKS // 1000
    lt = left.withWatermark("ts", WATERMARK).select(
        F.col("ts").alias("lts"), F.col("k").alias("lk"), F.col("v").alias("lv"))
    rt = right.withWatermark("ts", WATERMARK).select(
        F.col("ts").alias("rts"), F.col("k").alias("rk"), F.col("v").alias("rv"))
    cond = F.expr(f"lk = rk AND rts > lts - interval {ms} milliseconds "
                  f"AND rts < lts + interval {ms} milliseconds")
    return lt.join(rt, cond, "inner")


def sss(spark: Any, build: Callable[..., Any], *paths: str, out: str | None = None) -> float:
    """Seconds Spark Structured Streaming takes to run ``build(*streams)`` over the parquet
    directories ``paths`` (availableNow, append) into the ``noop`` sink or, with ``out``, into
    parquet files there (:func:`read_back` reads them)."""
    return _run_available_now(build(*(_stream(spark, p) for p in paths)), out)


# -- Spark's output beside cedar's ----------------------------------------------------------------
def read_back(out: str) -> list[dict[str, Any]]:
    """The rows Spark wrote to the parquet sink ``out``, as dicts (timestamps as ticks)."""
    from .common import read_rows

    return read_rows(out)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300)


def compare(workload: str, cht: list[tuple[int, int, Any]],
            spark_rows: list[dict[str, Any]]) -> str:
    """Compare cedar's CHT of ``workload`` with Spark's output rows (the sentinel's left
    out): W1 and W2 row by row on (window start, end, key), floats to 1e-9 relative (the two
    engines add in different orders); W3 as multisets of ``(start, end, key, left v, right
    v)``, Spark's lifetime being the overlap of the two events' (cedar's join output
    lifetime). Returns a one-line summary; raises AssertionError when they differ."""
    rows = [r for r in spark_rows if r.get("k", r.get("lk")) != SENTINEL_KEY]
    if workload == "W3":
        life = wl.JOIN_LIFETIME_TICKS
        a = Counter((s, e, p[0], p[1], p[2]) for s, e, p in cht)
        b = Counter((max(r["lts"], r["rts"]), min(r["lts"], r["rts"]) + life, r["lk"],
                     r["lv"], r["rv"]) for r in rows)
        if a != b:
            raise AssertionError(f"W3: {sum((a - b).values())} rows only in cedar (e.g. "
                                 f"{list(a - b)[:2]}), {sum((b - a).values())} only in Spark "
                                 f"(e.g. {list(b - a)[:2]})")
        return f"W3: equal ({sum(a.values()):,} rows)"
    if workload == "W1":
        mine = {(s, e, p[0]): (p[1]["count"], p[1]["sum"]) for s, e, p in cht}
        theirs = {(r["start"], r["end"], r["k"]): (r["count"], r["sum"]) for r in rows}
        same = [mine[k][0] == v[0] and _close(mine[k][1], v[1])
                for k, v in theirs.items() if k in mine]
    else:
        mine = {(s, e, p[0]): p[1] for s, e, p in cht}
        theirs = {(r["start"], r["end"], r["k"]): r["twa"] for r in rows}
        same = [_close(mine[k], v) for k, v in theirs.items() if k in mine]
    if mine.keys() != theirs.keys() or not all(same):
        only_c, only_s = mine.keys() - theirs.keys(), theirs.keys() - mine.keys()
        raise AssertionError(
            f"{workload}: {len(only_c)} windows only in cedar (e.g. {sorted(only_c)[:2]}), "
            f"{len(only_s)} only in Spark (e.g. {sorted(only_s)[:2]}), "
            f"{same.count(False)} with other values")
    last = max(e for _, e, _ in mine)
    return f"{workload}: equal ({len(mine):,} window rows, the last window ending at {last})"


def cedar_from_spark(spark: Any, query: Callable[..., Any], paths: list[str],
                     out_path: str, expanded: bool = True) -> tuple[float, list[Any]]:
    """cedar fed by Spark: each parquet directory read by Spark (``spark.read.parquet``)
    through ``Stream.from_spark`` (Arrow column batches), the query run inline, its CHT
    written back with :func:`topology.spark.sink.write` (column batches kept whole, as
    ``Stream.write`` does). Returns (seconds, output messages: column batches expanded into
    inserts unless ``expanded`` is false)."""
    from operators.columns import expand
    from topology import Stream
    from topology.running.inline import run_inline
    from topology.spark.sink import write

    t0 = time.perf_counter()
    sources = [Stream.from_spark(spark.read.parquet(p), start="ts", advance=wl.advance(),
                                 name=f"spark{i}") for i, p in enumerate(paths)]
    out = run_inline(query(*sources).plan(), columns=True)
    write(spark, out, out_path, mode="overwrite")
    return time.perf_counter() - t0, list(expand(out)) if expanded else out


def event_to_output_latency(spark: Any, rate_eps: int, seconds: float, workdir: str,
                            trigger: str = "500 milliseconds",
                            every: int = wl.LATENCY_CTI_EVERY, keys: int = 100,
                            max_seconds: float = 90.0) -> dict[str, Any]:
    """W1 in Spark SSS over the ``rate`` source at ``rate_eps`` rows/s, measured as cedar's
    latency run is: from the wall time an event is due to the wall time the window row it
    closes is written. The rate source stamps each row with the wall time it is due
    (``timestamp``, its offered schedule); event time is derived from the row number, one 1 s
    window per ``every`` rows (as cedar's latency run: :data:`~benchmarks.workloads.
    LATENCY_CTI_EVERY`), over ``keys`` keys. A ``foreachBatch`` sink takes each micro-batch's
    rows as Arrow, writes them to parquet under ``workdir`` and records the wall time.

    The window ``[s, e)`` is output once the watermark (latest event time − 2 ms) passes
    ``e``: its closing event is the first at or after ``e + 2 ms``, i.e. (2 events later)
    the first event of the next window, whose due time is that window's ``min(due)`` (the
    aggregate carries it; off by the two events between, 40 µs at 50,000 rows/s). Latency
    per window = written − that due time; windows output by the first micro-batch (query
    start-up) are left out. Runs for at least ``seconds`` and until more than 10
    micro-batches wrote rows, at most ``max_seconds``."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from operators.events import TICKS_PER_SECOND

    step_us = TICKS_PER_SECOND // every
    src = (spark.readStream.format("rate").option("rowsPerSecond", rate_eps).load()
           .select(F.col("timestamp").alias("due"),
                   F.timestamp_micros(F.lit(wl.T0_TICKS) + F.col("value") * step_us).alias("ts"),
                   (F.col("value") % keys).alias("k"),
                   ((F.col("value") * 7919 % 1000) / 1000.0).alias("v")))
    agg = (src.where(F.col("v") >= wl.WHERE_CUT).withWatermark("ts", WATERMARK)
           .groupBy(F.window("ts", "1 second"), "k")
           .agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("sum"),
                F.min("due").alias("due"))
           .select(F.col("window.start").alias("start"), "k", "count", "sum", "due"))
    out_dir = tempfile.mkdtemp(prefix="sss-latency-out-", dir=workdir)
    written: list[tuple[int, float, Any]] = []  # (batch id, wall time written, Arrow table)

    def sink(batch: Any, batch_id: int) -> None:
        table = batch.toArrow()
        if table.num_rows:
            pq.write_table(table, os.path.join(out_dir, f"{batch_id}.parquet"))
            written.append((batch_id, time.time(), table.select(["start", "due"])))

    ckpt = tempfile.mkdtemp(prefix="sss-latency-", dir=workdir)
    q = (agg.writeStream.outputMode("append").foreachBatch(sink)
         .option("checkpointLocation", ckpt).trigger(processingTime=trigger).start())
    t0 = time.monotonic()
    try:
        while True:
            time.sleep(0.5)
            elapsed = time.monotonic() - t0
            if elapsed >= max_seconds or (elapsed >= seconds and len(written) > 10):
                break
    finally:
        q.stop()
    # per window start: the wall time it was written, and the due time of its first event
    wrote: dict[int, float] = {}
    first_due: dict[int, float] = {}
    first_batch = min((b for b, _, _ in written), default=None)
    for b, wall, table in written:
        starts = table["start"].cast("int64").to_pylist()  # µs
        dues = table["due"].cast("int64").to_pylist()
        for s, d in zip(starts, dues):
            first_due[s] = min(first_due.get(s, float("inf")), d / 1e6)
            if b != first_batch:
                wrote[s] = wall
    lat = [(wall - first_due[s + TICKS_PER_SECOND]) * 1000 for s, wall in wrote.items()
           if s + TICKS_PER_SECOND in first_due]
    return {"latencies_ms": lat, "rows": sum(t.num_rows for _, _, t in written),
            "batches": len(written), "trigger": trigger, "keys": keys}
