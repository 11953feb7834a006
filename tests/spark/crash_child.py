"""The child process of ``tests/spark/test_crash.py``: one run of a query that writes through
the exactly-once sink, meant to be killed with ``SIGKILL`` and started again.

``python -m tests.spark.crash_child CONFIG.json`` runs one of:

* ``mode="sink"``: seeded rows -> a per-meter tumbling count and sum -> ``to_spark_stream``,
  inline or on a local Ray instance this process starts (``runtime="ray"``, with
  ``checkpoint_dir``);
* ``mode="pair"``: a streaming Spark source over the parquet files of ``input``
  (``Stream.from_spark(..., checkpoint=...)``, one file per micro-batch) -> the same query ->
  ``to_spark_stream``, inline;
* ``mode="collect"``: the same streaming source -> a filter -> ``collect()`` (inline, or on a
  local Ray instance), whose rows the child then delivers as a JSON file of its own in
  ``out`` (written atomically): what a caller of ``collect()`` does with its output; with
  ``ack`` it collects with ``commit=False``, stores the rows under the run's token and then
  commits the run (``out.commit()``).

``kill`` = ``{"point": NAME, "n": N}`` wraps one function of the engine, in this process only,
so that its N-th call ends the process with ``SIGKILL`` at a chosen moment (the points are in
:data:`POINTS`); without it the parent kills the process after a random delay. Exit status 0
means the run finished.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
from collections.abc import Callable
from typing import Any

MINUTE = 60_000_000  # ticks
SCHEMA = "meter INT, ts TIMESTAMP, kwh BIGINT"
#: The child's JVM: short-lived, so no second JIT tier and no parallel collector (start-up cost)
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_on(owner: Any, attr: str, n: int, when: str) -> None:
    """Replace ``owner.attr`` by a wrapper whose ``n``-th call dies ``before`` or ``after``
    the real call."""
    real = getattr(owner, attr)
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == n and when == "before":
            die()
        result = real(*args, **kwargs)
        if calls[0] == n and when == "after":
            die()
        return result

    setattr(owner, attr, wrapper)


def _sink_module() -> Any:
    import topology.spark.sink as sink

    return sink


def _parquet() -> Any:
    import pyarrow.parquet as pq

    return pq


def _feeder() -> Any:
    from topology.spark.source import SparkStreamFeeder

    return SparkStreamFeeder


def _stream() -> Any:
    from topology import Stream

    return Stream


def _stream_module() -> Any:
    import topology.spark.stream as source

    return source


#: name -> (what owns the function, its name, die before or after the call): the moments.
POINTS: dict[str, tuple[Callable[[], Any], str, str]] = {
    # an epoch's parquet file is written under its temporary name, not renamed yet
    "sink.tmp": (_parquet, "write_table", "after"),
    # an epoch's file is in place (renamed), its commit not logged yet
    "sink.file": (_sink_module, "atomic_write", "before"),
    # an epoch is committed (file and log), nothing after it yet
    "sink.log": (_sink_module, "atomic_write", "after"),
    # the feeder saved its state for a micro-batch; Spark has not committed the micro-batch
    "feeder.saved": (_feeder, "_save_state", "after"),
    # the consumer took a micro-batch's messages; neither the feeder nor Spark committed it
    "feeder.before": (_feeder, "_save_state", "before"),
    # Spark committed micro-batch n-1 and runs the next one, not handed over yet
    "spark.next": (_stream_module, "frame_to_arrow", "before"),
    # the sink committed the run's end (or the caller of collect(commit=False) stored the
    # rows); the feeder has not committed the run yet
    "pair.end": (_feeder, "commit_run", "before"),
    # the feeder committed the run (its state written); nothing after it yet
    "feeder.committed": (_feeder, "commit_run", "after"),
    # collect() returned its rows; the caller has not stored them yet
    "collect.returned": (_stream, "collect", "after"),
}


def rows(seed: int, count: int) -> list[dict[str, Any]]:
    """Readings of 4 meters, every ~10 s, with a little disorder (some arrive late)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        ts = i * 10_000_000 + rng.randrange(-30_000_000, 1)
        out.append({"meter": rng.randrange(4), "ts": max(ts, 0), "kwh": rng.randrange(100)})
    return out


def query(source: Any) -> Any:
    """Per meter, the sum of the readings not divisible by 7 in each 5-minute window."""
    from operators.aggregates import Sum

    return (source.where(lambda r: r["kwh"] % 7 != 0)
            .group_apply(lambda r: r["meter"],
                         lambda g: g.tumbling_window(5 * MINUTE).aggregate(Sum("kwh")),
                         partitions=2))


def sink_source(cfg: dict[str, Any]) -> Any:
    from operators.ingress import AdvanceTime
    from topology import Stream

    return Stream.from_rows(rows(cfg["seed"], cfg["events"]), start="ts",
                            advance=AdvanceTime(every=50))


def spark_session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("cedar-crash-child")
               # a child lives for seconds, to be killed: a JVM that compiles with C1 only
               # and collects serially starts in about half the time (~13 s a run, not ~22)
               .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def announce_writing() -> None:
    """Print ``writing`` when the sink gets its first messages: the parent times random
    kills in the writing phase from this line."""
    from topology.spark.sink import FinalRowsSink

    real = FinalRowsSink.on_messages
    said = [False]

    def on_messages(self: Any, messages: Any) -> None:
        if not said[0]:
            said[0] = True
            print("writing", flush=True)
        real(self, messages)

    FinalRowsSink.on_messages = on_messages  # type: ignore[method-assign]


def collect_query(source: Any) -> Any:
    """The readings not divisible by 7 (stateless: the runs' outputs add up)."""
    return source.where(lambda r: r["kwh"] % 7 != 0)


def collect_run(cfg: dict[str, Any]) -> None:
    """One ``collect()`` over the streaming source; its inserts, ``[start, end, meter, kwh]``,
    go to ``out/run-<ns>.json`` once it returned (a temporary name, then a rename)."""
    import time

    from operators.events import Insert
    from operators.ingress import AdvanceTime
    from topology import Stream

    spark = spark_session()
    if cfg["runtime"] == "ray":
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    reader = spark.readStream.schema(SCHEMA)
    if cfg.get("max_files", 1) is not None:  # one file per micro-batch, or as Spark packs
        reader = reader.option("maxFilesPerTrigger", cfg.get("max_files", 1))
    df = reader.parquet(cfg["input"])
    src = Stream.from_spark(df, start="ts",
                            advance=AdvanceTime(every=50, idle_timeout=cfg.get("idle")),
                            checkpoint=cfg["work"])
    ack = bool(cfg.get("ack"))
    out = collect_query(src).collect(runtime=cfg["runtime"], commit=not ack)
    got = [[m.start, m.end, m.payload["meter"], m.payload["kwh"]] for m in out
           if type(m) is Insert]
    os.makedirs(cfg["out"], exist_ok=True)
    # with ``ack`` the caller stores the rows under the run's token (a run delivered again
    # replaces its file), then commits the run
    name = f"run-{out.run:06d}.json" if ack else f"run-{time.time_ns()}.json"
    path = os.path.join(cfg["out"], name)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(got, f)
    os.replace(path + ".tmp", path)
    if ack:
        out.commit()


def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    announce_writing()
    kill = cfg.get("kill")
    if kill:
        owner, attr, when = POINTS[kill["point"]]
        kill_on(owner(), attr, int(kill["n"]), when)
    if cfg["mode"] == "collect":
        collect_run(cfg)
    elif cfg["mode"] == "sink":
        q = query(sink_source(cfg))
        if cfg["runtime"] == "ray":
            import ray

            ray.init(address="local", num_cpus=2, include_dashboard=False,
                     logging_level="ERROR")
            q.to_spark_stream(cfg["out"], runtime="ray", checkpoint_dir=cfg["work"])
        else:
            q.to_spark_stream(cfg["out"], runtime="inline")
    else:
        from operators.ingress import AdvanceTime
        from topology import Stream

        spark = spark_session()
        df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(cfg["input"]))
        src = Stream.from_spark(df, start="ts", advance=AdvanceTime(every=50),
                                checkpoint=cfg["work"])
        query(src).to_spark_stream(cfg["out"], runtime="inline")
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
