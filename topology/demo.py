"""``cedar demo``: the main job — smart meters, end to end, on local Ray and local Spark.

It generates readings like the power-meter example of the event-model page (docs/model.md):
point readings of every meter (a few late, a few broken), edge events for the meters' states
(a fault opens an edge that a repair closes later, and an edge is corrected by a retraction
of its end), and the meters' metadata. Spark writes the readings to parquet and reads them back
(its row groups merged by pyarrow in time order, no row through the JVM) as the source of five
queries that run on Ray, each chain of single-input steps one stage (``fuse="chains"``), the
stages of all five in a few shared step hosts (:mod:`topology.step_hosts`):

* ``meter_averages``  — per meter, a tumbling 5-minute ``Avg`` of the consumption;
* ``anomalies``       — per meter, a spike-detecting UDO over hopping 5-minute windows;
* ``regional_load``   — readings joined with the meters' metadata, summed per region;
* ``peaks``           — per meter, the ``Max`` reading over count windows of 30 readings;
* ``faults``          — how many meters are in fault, over snapshot windows of edge events.

The results go back through Spark to parquet; the run ends with a summary table.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from operators.aggregates import Avg, Count, Max, Sum
from operators.ingress import AdvanceTime
from operators.udm import Operator

TICKS_PER_S = 1_000_000
READING_EVERY_S = 10
EPOCH_TICKS = 1_767_225_600 * TICKS_PER_S  # 2026-01-01T00:00:00Z


class SpikeDetector(Operator):
    """A time-insensitive UDO: the readings more than ``k`` standard deviations above the
    window's mean (at least ``min_readings`` readings to judge)."""

    def __init__(self, k: float = 3.0, min_readings: int = 10) -> None:
        self.k = k
        self.min_readings = min_readings

    def compute(self, values: list[Any]) -> list[Any]:
        if len(values) < self.min_readings:
            return []
        kwh = [v["kwh"] for v in values]
        mean = sum(kwh) / len(kwh)
        sd = math.sqrt(sum((x - mean) ** 2 for x in kwh) / len(kwh))
        spikes = [v for v in values if sd > 0 and v["kwh"] > mean + self.k * sd]
        return [{"ts": v["ts"], "kwh": v["kwh"], "mean": round(mean, 4)}
                for v in sorted(spikes, key=lambda v: v["ts"])]


@dataclass
class DemoData:
    readings: list[dict[str, Any]]
    states: list[dict[str, Any]]
    meters: list[dict[str, Any]]


def generate(meters: int = 40, minutes: int = 60, seed: int = 7) -> DemoData:
    """Deterministic smart-meter data: readings every 10 s per meter, in arrival order."""
    rng = random.Random(seed)
    regions = ["north", "south", "east", "west"]
    info: list[dict[str, Any]] = [{"meter": f"m{m:03d}", "region": regions[m % len(regions)],
             "base": 0.2 + 0.8 * rng.random(), "ts": EPOCH_TICKS} for m in range(meters)]
    readings: list[dict[str, Any]] = []
    states: list[dict[str, Any]] = []
    for m in info:
        t = EPOCH_TICKS + rng.randrange(READING_EVERY_S * TICKS_PER_S)
        end = EPOCH_TICKS + minutes * 60 * TICKS_PER_S
        while t < end:
            kwh = m["base"] * (1 + 0.1 * rng.gauss(0, 1))
            if rng.random() < 0.004:
                kwh *= 6  # a spike for the anomaly detector
            readings.append({"meter": m["meter"], "ts": t, "kwh": round(max(kwh, 0.0), 4)})
            t += READING_EVERY_S * TICKS_PER_S
        # meter states: online from the start; some faults, repaired later (an edge closed)
        fault_at = EPOCH_TICKS + rng.randrange(minutes * 60) * TICKS_PER_S
        if rng.random() < 0.3:
            states.append({"meter": m["meter"], "id": f"{m['meter']}-fault", "ts": fault_at,
                           "end": None, "state": "fault"})
            repair = fault_at + rng.randrange(60, 900) * TICKS_PER_S
            states.append({"meter": m["meter"], "id": f"{m['meter']}-fault", "ts": fault_at,
                           "end": repair, "state": "fault"})
    # arrival order: by time, with light disorder (a reading overtakes up to ~20 others)
    readings.sort(key=lambda r: r["ts"] + rng.randrange(30 * TICKS_PER_S))
    for i in rng.sample(range(len(readings)), k=max(1, len(readings) // 400)):
        readings[i]["ts"] -= 20 * 60 * TICKS_PER_S  # a late reading, 20 minutes behind
    for i in rng.sample(range(len(readings)), k=max(1, len(readings) // 2000)):
        readings[i]["ts"] = None  # a broken reading: no time
    states.sort(key=lambda r: r["ts"] if r["end"] is None else r["end"])
    for m in info:
        del m["base"]
    return DemoData(readings, states, info)


def queries(df: Any, data: DemoData) -> dict[str, Any]:
    """The demo's five topologies. The four over the readings are built on one
    ``from_spark`` stream of the DataFrame ``df``: started together, they share one read of
    it (Spark sorts the table once, :mod:`topology.shared_read`)."""
    from topology import Stream

    advance = AdvanceTime(every=2_000, delay=60 * TICKS_PER_S, policy="drop")
    minute = 60 * TICKS_PER_S
    source = Stream.from_spark(df, start="ts", advance=advance, name="readings")

    def readings() -> Stream:
        return source

    meta = Stream.from_rows(data.meters, start="ts", id="meter", shape="edge", name="meters")
    states = Stream.from_rows(data.states, start="ts", end="end", id="id", shape="edge",
                              name="meter_states")
    return {
        "meter_averages": readings().group_apply(
            lambda r: r["meter"], lambda g: g.tumbling_window(5 * minute).aggregate(Avg("kwh"))),
        "anomalies": readings().group_apply(
            lambda r: r["meter"],
            lambda g: g.hopping_window(5 * minute, minute).apply(SpikeDetector())),
        "regional_load": readings()
            .join(meta, on=("meter", "meter"),
                  select=lambda r, m: {"region": m["region"], "kwh": r["kwh"]})
            .group_apply(lambda r: r["region"],
                         lambda g: g.tumbling_window(15 * minute).aggregate(Sum("kwh"))),
        "peaks": readings().group_apply(
            lambda r: r["meter"], lambda g: g.count_window(30).aggregate(Max("kwh"))),
        "faults": states.where(lambda s: s["state"] == "fault")
            .snapshot_window().aggregate(Count()),
    }


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total, self.width, self.shown, self.label = max(total, 1), width, -1, ""
        self.tty = sys.stderr.isatty()

    def update(self, done: int, label: str, last: bool = False) -> None:
        """Show ``done`` events and ``label``; ``last``: the final line (the queries have
        ended; events all read may come before that)."""
        pct = min(100, int(100 * done / self.total))
        step = 1 if self.tty else 25  # without a terminal, one line per quarter
        if (self.shown >= 0 and pct // step == self.shown // step and not last
                and (label == self.label or not self.tty)):
            return
        self.shown, self.label = pct, label
        filled = self.width * pct // 100
        bar = "█" * filled + "░" * (self.width - filled)
        end = "\n" if last or not self.tty else ""
        sys.stderr.write(f"\r  [{bar}] {pct:3d}%  {done:,}/{self.total:,} events  {label:<22}"
                         + end)
        sys.stderr.flush()


def _readings_received(stats: dict[str, dict[str, Any]]) -> int:
    """Rows the ``readings`` source of a query has taken in so far."""
    return sum(s["source"].get("received", 0) for s in stats.values()
               if s.get("source") and "readings" in s["step"])


def _readings_sources(running: dict[str, Any]) -> list[Any]:
    """The actors of the queries' ``readings`` sources, which the progress bar asks: asking
    every actor of every query (``Query.stats()``) twenty times a second took CPU from the
    queries on a small machine."""
    found = []
    for live in running.values():
        for step, stats in live.stats().items():
            if stats.get("source") and "readings" in stats["step"]:
                found.append(live.handles[step])
    return found


def _received(sources: list[Any], last: dict[int, dict[str, Any]]) -> int:
    """The rows the sources have taken, asking each without waiting for it: a source busy
    with a batch answers after it, so its count ``last`` seen stands meanwhile."""
    import ray

    refs = [h.stats.remote() for h in sources]
    answered, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05)
    for i, ref in enumerate(refs):
        if ref in answered:
            last[i] = ray.get(ref)
    return _readings_received({str(i): s for i, s in last.items()})


def _finished_at(live: Any) -> float:
    """When a query's sink saw the end of its input (``time.time()``): the end of its run,
    whenever the loop that waits for it looks."""
    import ray

    return float(ray.get(live.handles[live.sink_step].stats.remote())["finished_wall"])


def deploy_held(topologies: dict[str, Any], fuse: bool | str = "chains",
                libraries_s: float = 0.0, hosts: Any = None) -> tuple[dict[str, Any], Startup]:
    """Deploy ``topologies`` held: their actors started and configured, their sources opened,
    nothing fed yet (:meth:`run_held` starts them); returns the queries (the caller stops
    them) and the start-up. ``hosts``: the :class:`~topology.step_hosts.StepHosts` their
    steps run in (None: an actor per stage)."""
    t_actors = time.perf_counter()
    running: dict[str, Any] = {}
    try:
        for name, q in topologies.items():
            running[name] = q.deploy(f"demo-{name}", fuse=fuse, history=True, detached=False,
                                     hold=True, hosts=hosts)
    except BaseException:
        for live in running.values():
            live.stop()
        raise
    steps = sum(len(live.handles) for live in running.values())
    actors = sum(live.host is not None for live in running.values()) + (
        hosts.count if hosts is not None else steps)
    detail = "" if hosts is None else f" (their {steps} stages in {hosts.count} step hosts)"
    return running, Startup(libraries_s, time.perf_counter() - t_actors, actors, detail)


def run_held(running: dict[str, Any], readings: int, progress: bool = True) -> float:
    """Start the held queries together and wait for every one to end; returns the seconds
    from the start to the last query's end, as its sink saw it. ``readings``: the rows of
    the readings source (for the progress bar)."""
    bar = Progress(readings * sum(1 for name in running if name != "faults"))
    sources = _readings_sources(running)
    seen: dict[int, dict[str, Any]] = {}
    t0 = time.time()
    for live in running.values():
        live.start()
    done_names: set[str] = set()
    while len(done_names) < len(running):
        for name, live in running.items():
            if name not in done_names and live.wait(timeout_s=0):
                done_names.add(name)
        ended = len(done_names) == len(running)
        if progress:
            bar.update(_received(sources, seen), f"{len(done_names)}/{len(running)} queries "
                       "done", last=ended)
        if not ended:
            time.sleep(0.1)
    return max(_finished_at(live) for live in running.values()) - t0


def run(meters: int = 40, minutes: int = 60, out: str = "cedar-demo-output",
        address: str | None = None, fuse: bool | str = "chains") -> list[dict[str, Any]]:
    """Run the demo; return the summary rows (also printed).

    Start-up is timed apart from the run: Spark and Ray start, the readings are written, and
    every query's actors are started and configured with their sources held
    (``deploy(..., hold=True)``); then all five queries start together and the clock runs
    until every one has its final output."""
    from topology.deploy import ensure_ray
    from topology.spark_sink import write

    print(f"cedar demo: {meters} meters, {minutes} minutes of readings every "
          f"{READING_EVERY_S} s; output in {out}/")
    data = generate(meters, minutes)
    print(f"  generated {len(data.readings):,} readings and {len(data.states):,} meter-state "
          f"edges; starting Spark and Ray ...")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    t_setup = time.perf_counter()
    with _quiet_libraries():
        with _stderr_to(os.path.join(out, "spark.log")):
            spark = local_spark(quiet=True)
        ensure_ray(address, quiet=True)
    libraries_s = time.perf_counter() - t_setup
    df = write_readings(spark, data, os.path.join(out, "input", "readings.parquet"))

    summary = []
    topologies = queries(df, data)
    with demo_hosts() as hosts:
        running, setup = deploy_held(topologies, fuse, libraries_s, hosts)
        try:
            elapsed = run_held(running, len(data.readings))
            outputs = {}
            for name, live in running.items():
                rows = live.snapshot()
                outputs[name] = rows
                path = os.path.join(out, name)
                write(spark, rows, path, mode="overwrite")
                summary.append({"output": name, "rows": len(rows), "late": len(live.late()),
                                "dead_letters": len(live.dead_letters()), "path": path})
        finally:
            for live in running.values():
                live.stop()
    events = len(data.readings) * (len(topologies) - 1) + len(data.states)
    print_summary(summary, events, elapsed, setup)
    pictures = explain(data, out)
    pictures.update(meter_pictures(data, outputs, out))
    if pictures:
        print("\n  one meter, traced and drawn (cedar debug / cedar timeline read the traces):")
        for label, path in pictures.items():
            print(f"  {label:<44} {path}")
    elif importlib.util.find_spec("matplotlib") is None:
        print("\n  (the pictures and the anomaly's root cause need matplotlib: "
              "pip install -e '.[viz]')")
    print_next_steps(out, pictures)
    return summary


def demo_hosts() -> Any:
    """The step hosts the demo's queries run in: one process per core and one more (at most
    8). Their 13 steps in actors of their own were 15 processes on this 2-core machine, and
    Ray's own work per process and per call, not the queries', bounded the rate (``python
    -m benchmarks.demo_rate --hosts N`` compares)."""
    from .step_hosts import StepHosts

    return StepHosts(count=min((os.cpu_count() or 2) + 1, 8), capacity=16, name="demo")


def write_readings(spark: Any, data: DemoData, path: str) -> Any:
    """Have Spark write the readings, as they arrived, to the parquet table ``path``, and
    return the DataFrame that reads it. The table is one file (a row group's statistics say
    which times it holds), so that ``from_spark`` reads its row groups with pyarrow, no row
    through the JVM (:func:`topology.spark_source._direct_plan`)."""
    import pyarrow as pa

    table = pa.Table.from_pylist(data.readings, schema=pa.schema(
        [("meter", pa.string()), ("ts", pa.int64()), ("kwh", pa.float64())]))
    spark.createDataFrame(table).coalesce(1).write.parquet(path)
    return spark.read.parquet(path)


@dataclass(frozen=True)
class Startup:
    """What the demo spent before its queries ran: starting Spark and Ray (``libraries_s``)
    and starting and configuring the queries' ``actors`` (``actors_s``)."""

    libraries_s: float
    actors_s: float
    actors: int
    detail: str = ""  # where the queries' stages run, when not an actor each


def meter_pictures(data: DemoData, outputs: dict[str, list[Any]], out: str) -> dict[str, str]:
    """The picture a person wants of one meter (see :mod:`topology.demo_pictures`): the
    meter with the first anomaly, drawn from the demo's own outputs. Nothing without
    matplotlib or without an anomaly."""
    if importlib.util.find_spec("matplotlib") is None:
        return {}
    from .demo_pictures import meter_picture

    path = os.path.join(out, "meter-readings.svg")
    meter = meter_picture(data.readings, outputs["meter_averages"], outputs["anomalies"], path)
    return {} if meter is None else {f"{meter}: readings, 5-minute averages, anomaly": path}


def print_next_steps(out: str, pictures: dict[str, str]) -> None:
    """The short 'what to try next' the demo ends with."""
    print("\n  what to try next:")
    print("    cedar ui            a live web page of the queries deployed on the cluster")
    print("    cedar why NAME      why a deployed query's output is missing or not final")
    if pictures:
        print(f"    the pictures        {out}/*.svg")
        print(f"    cedar timeline      {out}/trace-anomalies --step anomalies -o more.svg")
    print(f"    Spark's own log     {out}/spark.log")


def _reading_time(row: dict[str, Any]) -> datetime.datetime:
    """A reading's time (ticks) as the timestamp it is: a source whose times are timestamps
    shows them as times in traces and pictures (:mod:`topology.times`)."""
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=row["ts"])


def explain(data: DemoData, out: str) -> dict[str, str]:
    """Trace the first meter with an anomaly through ``meter_averages`` and ``anomalies``
    (inline, its readings only) and write what a reader needs to see why: a timeline picture
    of its 5-minute windows, the root cause of its first anomaly (the readings of that
    window) as text and as a picture. Returns what was written, by label (nothing without
    matplotlib or without an anomaly)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}
    from topology import Stream

    from .debug import Recording
    from .timeline import timeline
    from .times import show_time

    minute = 60 * TICKS_PER_S
    advance = AdvanceTime(every=2_000, delay=60 * TICKS_PER_S, policy="drop")
    by_meter: dict[str, list[dict[str, Any]]] = {}
    for r in data.readings:
        if r["ts"] is not None:
            by_meter.setdefault(r["meter"], []).append(r)
    for meter, rows in sorted(by_meter.items()):  # noqa: B007 - the found meter is used below
        # its readings' times read as timestamps, so that the traces show times, not ticks
        readings = Stream.from_rows(rows, start=_reading_time, advance=advance,
                                    name="readings")
        anomalies = readings.group_apply(
            lambda r: r["meter"],
            lambda g: g.hopping_window(5 * minute, minute).apply(SpikeDetector()),
            name="anomalies")
        trace = os.path.join(out, "trace-anomalies")
        anomalies.collect(runtime="inline", trace=trace)
        rec = Recording.open(trace)
        found = rec.events(step="sink", direction="out", kind="insert")
        if found:
            break
    else:
        return {}
    first = found[0]
    cause = rec.root_cause("sink", first["id"])
    at = show_time(first["start"], rec.clock)
    written = {"anomaly root cause (text)": os.path.join(out, "anomaly-root-cause.txt"),
               f"anomaly at {at} (picture)": os.path.join(out, "anomaly-window.svg"),
               f"{meter} 5-minute windows": os.path.join(out, "meter-windows.svg"),
               "traces": os.path.join(out, "trace-*")}
    with open(written["anomaly root cause (text)"], "w", encoding="utf-8") as f:
        f.write(cause.render() + "\n")
    timeline(rec, "anomalies", out=written[f"anomaly at {at} (picture)"],
             start=first["start"], end=first["end"])
    averages = readings.group_apply(
        lambda r: r["meter"], lambda g: g.tumbling_window(5 * minute).aggregate(Avg("kwh")),
        name="meter_averages")
    trace = os.path.join(out, "trace-meter-averages")
    averages.collect(runtime="inline", trace=trace)
    first_ts = min(r["ts"] for r in rows)  # ten minutes: 60 readings, two windows
    timeline(trace, "meter_averages", out=written[f"{meter} 5-minute windows"],
             start=first_ts, end=first_ts + 10 * minute, limit=60, label="kwh")
    return written


def print_summary(summary: list[dict[str, Any]], events: int, elapsed: float,
                  setup: Startup | None = None) -> None:
    print()
    print(f"  {'output':<16}{'rows':>8}{'late':>8}{'dead letters':>14}  parquet")
    print(f"  {'-' * 16}{'-' * 8}{'-' * 8}{'-' * 14}  {'-' * 30}")
    for s in summary:
        print(f"  {s['output']:<16}{s['rows']:>8,}{s['late']:>8,}{s['dead_letters']:>14,}"
              f"  {s['path']}")
    print(f"\n  {events:,} input events through {len(summary)} queries in {elapsed:.1f} s "
          f"({events / elapsed:,.0f} events/s, all queries together)")
    if setup is not None:
        print(f"  start-up before that: {setup.libraries_s:.1f} s starting Spark and Ray, "
              f"{setup.actors_s:.1f} s starting the queries' {setup.actors} actors"
              f"{setup.detail}")


#: Spark's log4j2 settings while the demo runs: errors only.
_LOG4J2 = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """Spark's and Ray's start-up chatter off the demo's output, their settings restored
    after: Spark binds to localhost (no "resolves to a loopback address" warning), and Ray's
    notes that it started many worker processes at once (one per actor: the demo means to)
    are not printed (:func:`_without_worker_notes`)."""
    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP",)}
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _without_worker_notes()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _stderr_to(log: str) -> Iterator[None]:
    """Processes started inside write their stderr to the file ``log``: Spark's JVM, which
    inherits file descriptor 2 when it starts, keeps its own lines (the JDK's incubator-module
    note, log4j's default level) and any later error there instead of on the terminal. This
    process's stderr is itself again after."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


#: The note Ray's raylet sends to the driver when it starts more worker processes at once than
#: it has CPUs (every actor is a process: the demo starts ~20 on 2 CPUs on purpose).
_WORKER_NOTE = "worker processes have been started on node"


def _without_worker_notes() -> None:
    """Drop Ray's worker-start notes from this driver's output. Ray prints the messages its
    raylet sends with ``ray._private.worker.print_to_stdstream`` (no setting turns that one
    off); this wraps it, once, to skip lines holding :data:`_WORKER_NOTE`. Other messages,
    errors included, print as before; without that function (another Ray) nothing changes."""
    from ray._private import worker

    show = getattr(worker, "print_to_stdstream", None)
    if show is None or getattr(show, "cedar_quiet", False):
        return

    def print_to_stdstream(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        lines = [line for line in data.get("lines", []) if _WORKER_NOTE not in str(line)]
        if lines:
            show({**data, "lines": lines}, *args, **kwargs)

    print_to_stdstream.cedar_quiet = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream


def local_spark(quiet: bool = False) -> Any:
    """A local Spark session (``local[2]``) that runs Python workers with this interpreter;
    ``quiet``: log errors only, and no console progress bars."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("cedar-demo")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    if quiet:
        conf = os.path.join(tempfile.mkdtemp(prefix="cedar-log4j2-"), "log4j2.properties")
        with open(conf, "w") as f:
            f.write(_LOG4J2)
        builder = (builder.config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.extraJavaOptions",
                           f"-Dlog4j2.configurationFile=file:{conf}"))
    return builder.getOrCreate()
