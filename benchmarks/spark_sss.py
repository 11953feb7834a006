"""Spark's side of the benchmark suite: the same workloads in Spark Structured Streaming, and
cedar fed from (and written back through) Spark.

* :func:`session` -- ``local[2]`` with ``spark.sql.shuffle.partitions`` = :data:`SHUFFLE_PARTITIONS`
  (the default 200 makes a 2-core machine ~8x slower, docs/runtime.md);
* :func:`sss_w1` / :func:`sss_w2` / :func:`sss_w3` -- ``readStream`` of the parquet files,
  ``withWatermark`` (the generator's disorder), ``groupBy(window, key)`` or a time-bounded
  stream-stream join, append mode, ``trigger(availableNow=True)``, the ``noop`` sink;
* :func:`cedar_from_spark` -- ``spark.read.parquet`` →
  :func:`topology.spark_source.spark_row_batches` → a cedar query (inline) →
  :func:`topology.spark_sink.write` (parquet);
* :func:`microbatch_latency` -- W1 on Spark's ``rate`` source at a fixed rate with a
  processing-time trigger; the per-micro-batch ``triggerExecution`` durations.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import workloads as wl

#: ``spark.sql.shuffle.partitions`` for every Spark query of the suite.
SHUFFLE_PARTITIONS = 2
#: The watermark delay: the generator's disorder (2 ms).
WATERMARK = f"{wl.JITTER_TICKS // 1000} milliseconds"


def session() -> Any:
    """A ``local[2]`` SparkSession for the suite (Spark's Python workers use this
    interpreter)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("cedar-benchmarks")
             .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _schema() -> Any:
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType, TimestampType

    return StructType([StructField("ts", TimestampType()), StructField("k", LongType()),
                       StructField("v", DoubleType())])


def _stream(spark: Any, path: str) -> Any:
    return spark.readStream.schema(_schema()).parquet(path)


def _run_available_now(df: Any) -> float:
    """Run a streaming aggregate to the end of its input into the noop sink; seconds."""
    ckpt = tempfile.mkdtemp(prefix="cedar-sss-")
    try:
        t0 = time.perf_counter()
        q = (df.writeStream.format("noop").outputMode("append")
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        q.awaitTermination()
        return time.perf_counter() - t0
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def w1_frame(df: Any) -> Any:
    """W1 in Spark: where → groupBy(tumbling 1 s, k) → count, sum(v)."""
    from pyspark.sql import functions as F

    return (df.where(F.col("v") >= wl.WHERE_CUT).withWatermark("ts", WATERMARK)
            .groupBy(F.window("ts", "1 second"), "k")
            .agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("sum")))


def w2_frame(df: Any) -> Any:
    """W2 in Spark: hopping 10 s / 1 s; the time-weighted average of points (each lives one
    tick) is ``sum(v) / window length in ticks``."""
    from pyspark.sql import functions as F

    return (df.where(F.col("v") >= wl.WHERE_CUT).withWatermark("ts", WATERMARK)
            .groupBy(F.window("ts", "10 seconds", "1 second"), "k")
            .agg((F.sum("v") / float(wl.HOP_SIZE_TICKS)).alias("twa")))


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


def sss(spark: Any, build: Callable[..., Any], *paths: str) -> float:
    """Seconds Spark Structured Streaming takes to run ``build(*streams)`` over the parquet
    directories ``paths`` (availableNow, append, noop sink)."""
    return _run_available_now(build(*(_stream(spark, p) for p in paths)))


def cedar_from_spark(spark: Any, query: Callable[..., Any], paths: list[str],
                     out_path: str) -> tuple[float, list[Any]]:
    """cedar fed by Spark: each parquet directory read by Spark (``spark.read.parquet``)
    through ``Stream.from_spark`` (Arrow column batches), the query run inline, its CHT
    written back with :func:`topology.spark_sink.write` (column batches kept whole, as
    ``Stream.write`` does). Returns (seconds, output messages)."""
    from operators.columns import expand
    from topology import Stream
    from topology.inline import run_inline
    from topology.spark_sink import write

    t0 = time.perf_counter()
    sources = [Stream.from_spark(spark.read.parquet(p), start="ts", advance=wl.advance(),
                                 name=f"spark{i}") for i, p in enumerate(paths)]
    out = run_inline(query(*sources).plan(), columns=True)
    write(spark, out, out_path, mode="overwrite")
    return time.perf_counter() - t0, list(expand(out))


def microbatch_latency(spark: Any, rate_eps: int, seconds: float, workdir: str,
                       min_batches: int = 10, max_seconds: float = 60.0,
                       trigger: str = "500 milliseconds") -> dict[str, Any]:
    """W1 over Spark's ``rate`` source at ``rate_eps`` rows/s with the processing-time trigger
    ``trigger``, for at least ``seconds`` and until ``min_batches`` micro-batches carried rows
    (at most ``max_seconds``): the ``triggerExecution`` duration (ms) of each of them but the
    first (query start-up). A row also waits for its micro-batch to start (up to one trigger
    interval), so end-to-end latency is at least this duration. The checkpoint goes under
    ``workdir``: remove it after the session stops (tasks of the stopped query may still be
    closing their state stores)."""
    from pyspark.sql import functions as F

    df = (spark.readStream.format("rate").option("rowsPerSecond", rate_eps).load()
          .select(F.col("timestamp").alias("ts"), (F.col("value") % 1000).alias("k"),
                  ((F.col("value") * 7919 % 1000) / 1000.0).alias("v")))
    ckpt = tempfile.mkdtemp(prefix="sss-latency-", dir=workdir)
    progress: dict[int, Any] = {}
    q = (w1_frame(df).writeStream.format("noop").outputMode("append")
         .option("checkpointLocation", ckpt).trigger(processingTime=trigger).start())
    t0 = time.monotonic()
    try:
        while True:
            time.sleep(0.5)
            for p in q.recentProgress:
                if p["numInputRows"] > 0:
                    progress[p["batchId"]] = p
            elapsed = time.monotonic() - t0
            if elapsed >= max_seconds or (elapsed >= seconds and len(progress) > min_batches):
                break
    finally:
        q.stop()
    batches = [progress[b] for b in sorted(progress)][1:]
    return {"durations_ms": [p["durationMs"]["triggerExecution"] for p in batches],
            "rows": sum(p["numInputRows"] for p in batches), "trigger": trigger}
