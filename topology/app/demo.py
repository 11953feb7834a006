"""``cedar demo``: the main job — smart meters, end to end, on local Ray and local Spark.

It generates readings like the power-meter example of the event-model page (docs/model.md):
point readings of every meter (a few late, a few broken), edge events for the meters' states
(a fault opens an edge that a repair closes later, and an edge is corrected by a retraction
of its end), and the meters' metadata. Spark writes the readings to parquet and reads them back
(its row groups merged by pyarrow in time order, no row through the JVM) as the source of five
queries that run on Ray, each chain of single-input steps one stage (``fuse="chains"``), the
stages of all five in a few shared step hosts (:mod:`topology.running.step_hosts`):

* ``meter_averages``  — per meter, a tumbling 5-minute ``Avg`` of the consumption;
* ``anomalies``       — per meter, a spike-detecting UDO over hopping 5-minute windows;
* ``regional_load``   — readings joined with the meters' metadata, summed per region;
* ``peaks``           — per meter, the ``Max`` reading over count windows of 30 readings;
* ``faults``          — how many meters are in fault, over snapshot windows of edge events.

The results go back through Spark to parquet; the run ends with a summary table. One meter's
clock is 10 minutes behind the others' (:data:`SKEWED_METER`): fed as they arrived, its
readings are all late by one CTI for all the meters, and per-key progress
(``AdvanceTime(per_key="meter", low_watermark=...)``) keeps them while the other meters'
windows are final as soon as before (:mod:`topology.app.demo_skew`, a table in the report and
a picture). The data and the queries are :mod:`topology.app.demo_data`'s, the live feed that
``cedar demo --keep`` leaves running is :mod:`topology.app.demo_live`'s, and the pictures are
:mod:`topology.app.demo_pictures`'; this module runs them and reports.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from operators.aggregates import Avg
from operators.ticks import format_duration
from topology.app.demo_data import (
    DELAY_TICKS,
    EPOCH_TICKS,
    LATE_BY_TICKS,
    READING_EVERY_S,
    SKEW_TICKS,
    SKEWED_METER,
    TICKS_PER_S,
    DemoData,
    SpikeDetector,
    generate,
    queries,
    reading_queries,
    readings_advance,
)
from topology.app.demo_live import (
    LIVE_SPEED,
    LiveReadings,
    keep_live,
    keep_running,
    live_queries,
    print_kept,
    without_stopped_step_errors,
)
from topology.app.demo_skew import SkewRun, print_skew, skew_runs

__all__ = ["DELAY_TICKS", "EPOCH_TICKS", "LATE_BY_TICKS", "LIVE_SPEED", "READING_EVERY_S",
           "SKEWED_METER", "SKEW_TICKS", "TICKS_PER_S", "DemoData", "LiveReadings", "Progress",
           "SkewRun", "SpikeDetector", "Startup", "demo_hosts", "deploy_held", "explain",
           "first_spike", "generate", "keep_live", "keep_running", "live_queries", "local_spark",
           "meter_pictures", "print_kept", "print_next_steps", "print_skew", "print_summary",
           "queries", "reading_queries", "readings_advance", "run", "run_held", "skew_runs",
           "write_readings"]


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total, self.width, self.shown, self.label = max(total, 1), width, -1, ""
        self.tty = sys.stderr.isatty()

    def update(self, done: int, label: str, last: bool = False) -> None:
        """Show ``done`` readings (read by every query) and ``label``; ``last``: the final
        line (the queries have ended; the readings all read may come before that)."""
        pct = min(100, int(100 * done / self.total))
        step = 1 if self.tty else 25  # without a terminal, one line per quarter
        if (self.shown >= 0 and pct // step == self.shown // step and not last
                and (label == self.label or not self.tty)):
            return
        self.shown, self.label = pct, label
        filled = self.width * pct // 100
        bar = "█" * filled + "░" * (self.width - filled)
        end = "\n" if last or not self.tty else ""
        sys.stderr.write(f"\r  [{bar}] {pct:3d}%  {done:,}/{self.total:,} readings  {label:<22}"
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
    """The rows every source has taken (the fewest of them), asking each without waiting
    for it: a source busy with a batch answers after it, so its count ``last`` seen stands
    meanwhile."""
    import ray

    refs = [h.stats.remote() for h in sources]
    answered, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05)
    for i, ref in enumerate(refs):
        if ref in answered:
            last[i] = ray.get(ref)
    if len(last) < len(sources):
        return 0
    # the rows every query has read: one read of the table, however many queries share it
    return min(_readings_received({"one": s}) for s in last.values())


def _finished_at(live: Any) -> float:
    """When a query's sink saw the end of its input (``time.time()``): the end of its run,
    whenever the loop that waits for it looks."""
    import ray

    return float(ray.get(live.handles[live.sink_step].stats.remote())["finished_wall"])


def deploy_held(topologies: dict[str, Any], fuse: bool | str = "chains",
                libraries_s: float = 0.0, hosts: Any = None) -> tuple[dict[str, Any], Startup]:
    """Deploy ``topologies`` held: their actors started and configured, their sources opened,
    nothing fed yet (:meth:`run_held` starts them); returns the queries (the caller stops
    them) and the start-up. ``hosts``: the :class:`~topology.running.step_hosts.StepHosts` their
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
    bar = Progress(readings)
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
        address: str | None = None, fuse: bool | str = "chains", keep: bool = False,
        speed: float = LIVE_SPEED) -> list[dict[str, Any]]:
    """Run the demo; return the summary rows (also printed).

    Start-up is timed apart from the run: Spark and Ray start, the readings are written, and
    every query's actors are started and configured with their sources held
    (``deploy(..., hold=True)``); then all five queries start together and the clock runs
    until every one has its final output.

    ``keep``: then deploy the four reading queries again over a live feed of readings
    (:func:`live_queries`, ``speed`` times faster than the meters) and keep them running,
    with what to type to watch them (``cedar ui``, ``status``, ``why``), until each is stopped
    (``cedar stop NAME``) or Ctrl-C (:func:`keep_running`)."""
    from topology.building.times import time_fields
    from topology.running.deploy import ensure_ray
    from topology.spark.sink import write

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
                # a payload's ts, a reading's time, is written as a timestamp as it was read
                write(spark, rows, path, mode="overwrite",
                      times=time_fields(topologies[name]._node))
                summary.append({"output": name, "rows": len(rows), "late": len(live.late()),
                                "dead_letters": len(live.dead_letters()), "path": path})
        finally:
            # pushes in flight as a stop came are refused then, or whenever Ray collects
            # their results, up to this process's exit: no traceback for them from now on
            without_stopped_step_errors()
            for live in running.values():
                live.stop()
        _report_and_keep(data, out, summary, outputs, elapsed, setup, keep, meters, speed,
                         fuse, hosts)
    return summary


def _report_and_keep(data: DemoData, out: str, summary: list[dict[str, Any]],
                     outputs: dict[str, list[Any]], elapsed: float, setup: Startup,
                     keep: bool, meters: int, speed: float, fuse: bool | str,
                     hosts: Any) -> None:
    """The end of :func:`run`: the summary, the pictures, and what to try next, or with
    ``keep`` the queries left running live."""
    print_summary(summary, data, elapsed, setup)
    skew = skew_runs(data)
    print_skew(skew)
    pictures = explain(data, out, outputs["anomalies"])
    pictures.update(meter_pictures(data, outputs, out, skew))
    if pictures:
        print("\n  one anomaly traced and drawn (cedar debug / cedar timeline read the traces)"
              + (", and the meter\n  whose clock is behind:" if skew else ":"))
        for label, path in pictures.items():
            print(f"  {label:<50} {path}")
    elif importlib.util.find_spec("matplotlib") is None:
        print("\n  (the pictures and the anomaly's root cause need matplotlib: "
              "pip install -e '.[viz]')")
    if not keep:
        print_next_steps(out, pictures)
        return
    kept = keep_live(meters, speed, fuse, hosts)
    print_kept(kept, speed, meters)
    keep_running(kept)


def demo_hosts() -> Any:
    """The step hosts the demo's queries run in: one process per core and one more (at most
    8). Their 13 steps in actors of their own were 15 processes on this 2-core machine, and
    Ray's own work per process and per call, not the queries', bounded the rate (``python
    -m benchmarks.demo_rate --hosts N`` compares)."""
    from topology.running.step_hosts import StepHosts

    return StepHosts(count=min((os.cpu_count() or 2) + 1, 8), capacity=16, name="demo")


def write_readings(spark: Any, data: DemoData, path: str) -> Any:
    """Have Spark write the readings, as they arrived, to the parquet table ``path``, and
    return the DataFrame that reads it. The table is one file (a row group's statistics say
    which times it holds), so that ``from_spark`` reads its row groups with pyarrow, no row
    through the JVM (:func:`topology.spark.direct.direct_plan`)."""
    import pyarrow as pa

    table = pa.Table.from_pylist(data.readings, schema=pa.schema(
        [("meter", pa.string()), ("ts", pa.int64()), ("kwh", pa.float64())]))
    # ts is a time: a UTC timestamp column (ticks are µs since the epoch), so the queries'
    # clock is timestamps and their outputs hold it as a time (times.time_fields)
    ts = table.column("ts").cast(pa.timestamp("us", tz="UTC"))
    table = table.set_column(table.schema.get_field_index("ts"), "ts", ts)
    # (as microseconds with statistics, not Spark's default INT96: pyarrow reads the row
    # groups in time order by their statistics)
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
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


def meter_pictures(data: DemoData, outputs: dict[str, list[Any]], out: str,
                   skew: list[SkewRun] | None = None) -> dict[str, str]:
    """The picture a person wants of one meter (see :mod:`topology.app.demo_pictures`): the
    meter with the first anomaly, drawn from the demo's own outputs, and with ``skew``
    (:func:`skew_runs`) the meter whose clock is behind, its readings that one CTI loses
    marked. Nothing without matplotlib; no first picture without an anomaly."""
    if importlib.util.find_spec("matplotlib") is None:
        return {}
    from topology.app.demo_pictures import ClockBehind, meter_picture

    behind = None if not skew else ClockBehind(skew[0].skewed, SKEW_TICKS, skew[0].lost)
    drawn = {}
    path = os.path.join(out, "meter-readings.svg")
    meter = meter_picture(data.readings, outputs["meter_averages"], outputs["anomalies"], path,
                          clock_behind=behind)
    if meter is not None:
        drawn[f"{meter}: readings, 5-minute averages, anomaly"] = path
    if behind is not None and behind.meter != meter:
        path = os.path.join(out, "meter-clock-behind.svg")
        if meter_picture(data.readings, outputs["meter_averages"], outputs["anomalies"], path,
                         meter=behind.meter, clock_behind=behind) is not None:
            drawn[f"{behind.meter}: clock {format_duration(SKEW_TICKS)} behind, late with one "
                  f"CTI"] = path
    return drawn


def print_next_steps(out: str, pictures: dict[str, str]) -> None:
    """The short 'what to try next' the demo ends with."""
    print("\n  what to try next:")
    print("    cedar demo --keep   the same queries left running on a live feed, to watch:")
    print("      cedar ui          a live web page of the queries deployed on the cluster")
    print("      cedar why NAME    why a deployed query's output is missing or not final")
    if pictures:
        print(f"    the pictures        {out}/*.svg")
        print(f"    cedar timeline      {out}/trace-anomalies --step anomalies -o more.svg")
    print(f"    Spark's own log     {out}/spark.log")


def _reading_time(row: dict[str, Any]) -> datetime.datetime:
    """A reading's time (ticks) as the timestamp it is: a source whose times are timestamps
    shows them as times in traces and pictures (:mod:`topology.building.times`)."""
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(
        microseconds=row["ts"])


def first_spike(data: DemoData) -> tuple[str, int] | None:
    """The meter and time of the earliest reading the ``anomalies`` query finds in ``data``
    (run inline over the readings as the demo reads them: in time order), the one the
    demo's main picture marks; None without one."""
    from topology import Stream, to_cht
    from topology.app.demo_pictures import first_anomaly

    rows = sorted((r for r in data.readings if r["ts"] is not None), key=lambda r: r["ts"])
    minute = 60 * TICKS_PER_S
    found = Stream.from_rows(rows, start="ts", advance=readings_advance()).group_apply(
        lambda r: r["meter"],
        lambda g: g.hopping_window(5 * minute, minute).apply(SpikeDetector()))
    return first_anomaly(to_cht(found.collect(runtime="inline")))


def explain(data: DemoData, out: str, anomalies: list[tuple[int, int, Any]] | None = None
            ) -> dict[str, str]:
    """Trace the anomaly the main picture (``meter-readings.svg``) shows, the earliest one of
    ``anomalies`` (the ``anomalies`` query's output rows; None: found in ``data`` by
    :func:`first_spike`), through ``meter_averages`` and ``anomalies`` (inline, its meter's
    readings only, in time order as the demo reads them), and write what a reader needs to
    see why: the root cause of that anomaly (the readings of the window that judged it) as
    text, the window as a picture, and the meter's 5-minute windows around it, the anomalous
    reading marked in each. Returns what was written, by label (nothing without matplotlib
    or without an anomaly)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return {}
    from topology import Stream
    from topology.app.demo_pictures import first_anomaly
    from topology.building.times import show_time
    from topology.seeing.debug import Recording
    from topology.seeing.timeline import timeline

    spike = first_spike(data) if anomalies is None else first_anomaly(anomalies)
    if spike is None:
        return {}
    meter, ts = spike
    minute = 60 * TICKS_PER_S
    rows = sorted((r for r in data.readings if r["meter"] == meter and r["ts"] is not None),
                  key=lambda r: r["ts"])
    # its readings' times read as timestamps, so that the traces show times, not ticks
    readings = Stream.from_rows(rows, start=_reading_time, advance=readings_advance(),
                                name="readings")
    traced = readings.group_apply(
        lambda r: r["meter"],
        lambda g: g.hopping_window(5 * minute, minute).apply(SpikeDetector()),
        name="anomalies")
    trace = os.path.join(out, "trace-anomalies")
    traced.collect(runtime="inline", trace=trace)
    rec = Recording.open(trace)
    judged = [e for e in rec.events(step="sink", direction="out", kind="insert")
              if _spike_of(e) == ts]
    if not judged:
        return {}
    first = min(judged, key=lambda e: e["start"])  # the first window that judged it
    reading = next(r for r in rows if r["ts"] == ts)
    mean = json.loads(first["payload"])[1]["mean"]
    cause = rec.root_cause("sink", first["id"])
    at = show_time(ts, rec.clock)
    written = {"anomaly root cause (text)": os.path.join(out, "anomaly-root-cause.txt"),
               f"anomaly at {at} (picture)": os.path.join(out, "anomaly-window.svg"),
               f"{meter} 5-minute windows": os.path.join(out, "meter-windows.svg"),
               "traces": os.path.join(out, "trace-*")}
    said = (f"the anomaly: {reading['kwh']:.2f} kWh at {at}, the window's mean "
            f"{mean:.2f} kWh")
    with open(written["anomaly root cause (text)"], "w", encoding="utf-8") as f:
        f.write(textwrap.fill(
            f"The anomaly the picture meter-readings.svg marks: meter {meter}'s reading at "
            f"{at}, {reading['kwh']:.2f} kWh, more than 3 standard deviations above the "
            f"mean of its 5-minute window ({mean:.2f} kWh). Below, the output row and, step "
            f"by step, the readings that made it; '<==' marks that reading.", 100) + "\n\n")
        f.write(_mark_reading_line(cause, ts, said) + "\n")
    figure = timeline(rec, "anomalies", start=first["start"], end=first["end"])
    _mark_reading(figure, ts, said)
    figure.savefig(written[f"anomaly at {at} (picture)"])
    averages = readings.group_apply(
        lambda r: r["meter"], lambda g: g.tumbling_window(5 * minute).aggregate(Avg("kwh")),
        name="meter_averages")
    trace = os.path.join(out, "trace-meter-averages")
    averages.collect(runtime="inline", trace=trace)
    lo = ts - (ts - EPOCH_TICKS) % (5 * minute)  # ten minutes: the anomaly's window, the next
    figure = timeline(trace, "meter_averages", start=lo, end=lo + 10 * minute, limit=60,
                      label="kwh")
    _mark_reading(figure, ts, said)
    figure.savefig(written[f"{meter} 5-minute windows"])
    return written


def _spike_of(event: dict[str, Any]) -> int | None:
    """The time of the reading an ``anomalies`` output event (a trace row) reports."""
    try:
        return int(json.loads(event["payload"])[1]["ts"])
    except (TypeError, ValueError, KeyError, IndexError):
        return None


def _mark_reading_line(cause: Any, ts: int, said: str) -> str:
    """``cause`` rendered, the readings' ``ts`` fields as times, and its line of the reading
    at ``ts`` marked ``<== said``."""
    from topology.building.times import TIMESTAMPS, show_time

    ids = {str(leaf["id"]) for leaf in cause.leaves() if _reading_ts(leaf) == ts}
    # the readings' own "ts" field as the time it is, as their lifetimes show
    text = re.sub(r"'ts': (\d{13,})",
                  lambda m: f"'ts': {show_time(int(m.group(1)), TIMESTAMPS)}", cause.render())
    lines = text.splitlines()
    for i, line in enumerate(lines):
        words = line.split()
        if len(words) > 2 and words[0] == "readings" and words[2].removeprefix("id=") in ids:
            lines[i] = f"{line}   <== {said}"
    return "\n".join(lines)


def _reading_ts(row: dict[str, Any]) -> int | None:
    try:
        return int(json.loads(row["payload"])["ts"])
    except (TypeError, ValueError, KeyError):
        return None


def _mark_reading(figure: Any, ts: int, said: str) -> None:
    """Mark the reading at ``ts`` (ticks, the pictures' time axis) on every panel of a
    timeline ``figure``: a red line across each (SVG ids ``anomaly-reading-N``), labelled
    ``said`` on the first (``anomaly-reading-label``)."""
    for i, ax in enumerate(figure.axes):
        ax.axvline(ts, color="#c0392b", linewidth=1.4, linestyle="--", zorder=6,
                   gid=f"anomaly-reading-{i}")
    if figure.axes:
        ax = figure.axes[0]
        ax.annotate(said, (ts, 1.0), xycoords=("data", "axes fraction"), xytext=(4, -2),
                    textcoords="offset points", fontsize=7, color="#c0392b", va="top",
                    gid="anomaly-reading-label",
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none",
                          "alpha": 0.85})


def print_summary(summary: list[dict[str, Any]], data: DemoData, elapsed: float,
                  setup: Startup | None = None) -> None:
    """The demo's result: what went in (rows, the broken and the late ones said once, not
    once per query), each query's output rows, and the time from the start to the last
    query's results."""
    readings = len(data.readings)
    reading_queries = [s for s in summary if s["output"] != "faults"]
    meters = len({r["meter"] for r in data.readings})
    broken = sum(r["ts"] is None for r in data.readings)
    dropped = max((s["late"] for s in reading_queries), default=0)
    dead = max((s["dead_letters"] for s in reading_queries), default=0)
    behind = format_duration(LATE_BY_TICKS)
    print(f"\n  input: {readings:,} readings of {meters} meters, read once for the "
          f"{len(reading_queries)} queries over them,\n    and {len(data.states):,} meter-state "
          f"edges for faults")
    print(f"    {broken:,} without a time: set aside as dead letters ({dead:,} reported by each "
          f"reading query)")
    if dropped:
        print(f"    {dropped:,} late: dropped and recorded (Query.late())")
    else:
        print(f"    {data.late:,} taken {behind} before they arrived: none is late here, as a "
              f"table read in batch has no\n    arrival order (Spark sorts it by time and "
              f"each takes its place); cedar demo --keep feeds\n    readings as they arrive, "
              f"and there such a reading is late")
    print()
    print(f"  {'query':<16}{'output rows':>12}  parquet")
    print(f"  {'-' * 14}  {'-' * 12}  {'-' * 30}")
    for s in summary:
        print(f"  {s['output']:<16}{s['rows']:>12,}  {s['path']}")
    print(f"\n  {len(summary)} queries started together: all their results {elapsed:.1f} s after "
          f"the start ({readings / elapsed:,.0f} readings/s)")
    if setup is not None:
        print(f"  start-up before that: {setup.libraries_s:.1f} s starting Spark and Ray, "
              f"{setup.actors_s:.1f} s starting the queries' {setup.actors} actors"
              + (f"\n   {setup.detail}" if setup.detail else ""))


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
