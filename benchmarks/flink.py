"""Apache Flink beside cedar: the same workloads as Flink SQL on a local MiniCluster.

PyFlink pins its own pyarrow and pandas, which differ from cedar's, so Flink runs in a Python
of its own: :func:`flink_python` finds one that imports ``pyflink`` (``CEDAR_FLINK_PYTHON``,
or the benchmark's own venv ``.flink-venv`` at the repository's root), or makes that venv
once with ``pip install apache-flink`` (Java 17 runs it). :func:`run_jobs` writes a spec,
runs :mod:`benchmarks.flink_job` there as a subprocess and reads its timings and rows back.

Flink has no parquet format in its bundled jars and none can be downloaded here, so it reads
the same generated rows as CSV (:func:`write_csv`: time columns as ``BIGINT`` µs, turned into
a millisecond rowtime by the job; Flink's event time has millisecond precision). Every window
of the suite is a whole number of milliseconds, so windows hold the same events; a predicate
finer than a millisecond (W3's 50 ms band) is written on the µs columns.

Flink runs as Nexmark's users run it (:data:`benchmarks.flink_job.NEXMARK_CONF`: object
reuse, mini-batch of 2 s / 50,000 rows, split distinct aggregation, heap state), in one warm
``TableEnvironment`` for all the jobs of a run; the JVM's start is reported apart. Each job
runs once untimed on a small input where it has one (``warm_tables``: as cedar warms each
query up), then ``repeat`` times at parallelism 1 and ``repeat`` times at 2
(:data:`PARALLELISMS`) into a ``blackhole`` sink; its figure is the shortest **net** job
runtime over all of them (Flink's ``JobExecutionResult.getNetRuntime``: the job from its
start to its end, without compiling the plan and starting the local cluster), the wall time
from submission to the end shown beside it. Flink's bounded CSV source ends with a watermark
at +∞, so (like cedar, unlike Spark's append mode) every window is output.

    >>> sql = W_SQL["W1"]
    >>> "TUMBLE" in sql and "GROUP BY" in sql
    True
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from . import workloads as wl

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The benchmark's own venv for PyFlink (made on first use).
FLINK_VENV = os.path.join(REPO, ".flink-venv")
JOB_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flink_job.py")
#: Every job runs at each of these parallelisms; the better counts (on 2 cores, 2 was at best
#: 1.1x faster than 1 before the Nexmark configuration; either may win a query).
PARALLELISMS = (1, 2)


class FlinkUnavailable(RuntimeError):
    """Flink cannot run here; the message says why (the benchmark reports it and goes on)."""


def _has_pyflink(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import pyflink.table"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def flink_python(install: bool = True) -> str:
    """A Python interpreter that imports PyFlink: ``$CEDAR_FLINK_PYTHON``, the venv
    :data:`FLINK_VENV`, or (with ``install``) that venv made now. Raises
    :class:`FlinkUnavailable` with the reason."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise FlinkUnavailable("Flink needs Java 17 (java not found, JAVA_HOME unset)")
    given = os.environ.get("CEDAR_FLINK_PYTHON")
    if given:
        if _has_pyflink(given):
            return given
        raise FlinkUnavailable(f"CEDAR_FLINK_PYTHON={given} does not import pyflink")
    python = os.path.join(FLINK_VENV, "bin", "python")
    if os.path.exists(python) and _has_pyflink(python):
        return python
    if not install:
        raise FlinkUnavailable(f"no PyFlink: {FLINK_VENV} does not exist (run the benchmark "
                               "once with installing allowed, or set CEDAR_FLINK_PYTHON)")
    try:
        subprocess.run([sys.executable, "-m", "venv", FLINK_VENV], check=True,
                       capture_output=True, timeout=300)
        subprocess.run([python, "-m", "pip", "install", "-q", "apache-flink"], check=True,
                       capture_output=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        raise FlinkUnavailable(f"could not install apache-flink into {FLINK_VENV}: {exc} "
                               f"{err.decode(errors='replace')[-300:]}") from exc
    if not _has_pyflink(python):
        raise FlinkUnavailable(f"apache-flink installed into {FLINK_VENV} but does not import")
    return python


# -- the data --------------------------------------------------------------------------------------
def write_csv(table: Any, path: str) -> list[list[str]]:
    """``table`` (Arrow) as a header-less CSV file at ``path``, timestamps as int64 µs;
    returns its Flink columns ``[[name, SQL type], ...]``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    cols, kinds = [], []
    for name in table.column_names:
        col = table[name]
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
        cols.append(col)
        kinds.append([name, _sql_type(col.type)])
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pcsv.write_csv(pa.table(cols, names=table.column_names), path,
                   pcsv.WriteOptions(include_header=False))
    return kinds


def _sql_type(kind: Any) -> str:
    import pyarrow as pa

    if pa.types.is_integer(kind):
        return "BIGINT"
    if pa.types.is_floating(kind):
        return "DOUBLE"
    if pa.types.is_boolean(kind):
        return "BOOLEAN"
    return "STRING"


@dataclass
class Job:
    """One Flink SQL job: its sources (``name -> (csv path, columns, time column, watermark
    delay in ms)``), its query, its timed runs at each parallelism, and where its rows go
    (None: not collected); optionally the same tables over a small input to warm the query
    on (untimed)."""

    name: str
    sql: str
    tables: list[dict[str, Any]]
    repeat: int = 3
    rows_to: str | None = None
    #: the same tables over a small input: the query runs there once first, untimed
    warm_tables: list[dict[str, Any]] | None = None

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "sql": self.sql, "tables": self.tables,
                "repeat": self.repeat, "rows_to": self.rows_to,
                "warm_tables": self.warm_tables}


def table_spec(name: str, path: str, columns: list[list[str]], time: str,
               watermark_ms: int = 0) -> dict[str, Any]:
    return {"name": name, "path": path, "columns": columns, "time": time,
            "watermark_ms": watermark_ms}


@dataclass(frozen=True)
class Timing:
    """A job's runs at one parallelism: the shortest net runtime (None if Flink did not say)
    and the shortest wall time, in seconds, and how many runs."""

    net_s: float | None
    wall_s: float
    runs: int


@dataclass
class Result:
    """What a Flink run gave: JVM start-up seconds, the configuration, per job its figure
    (``seconds``: the shortest net runtime over every parallelism, or the shortest wall time
    where Flink gave no net runtime), the parallelism that gave it, the wall time beside it
    (``wall_s``: the shortest at that parallelism), each parallelism's :class:`Timing`, the
    error if any, and where the rows are where they were collected (:meth:`rows`)."""

    startup_s: float | None = None
    conf: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)
    net_s: dict[str, float | None] = field(default_factory=dict)
    best_parallelism: dict[str, int] = field(default_factory=dict)
    by_parallelism: dict[str, dict[int, Timing]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: where each job's rows are (read by :meth:`rows`, one job at a time: millions of rows
    #: of every job at once would not fit in memory)
    rows_at: dict[str, str] = field(default_factory=dict)

    def rows(self, name: str) -> list[dict[str, Any]]:
        """The rows of job ``name`` (dicts; none if they were not collected)."""
        path = self.rows_at.get(name)
        return read_rows(path) if path else []

    def describe(self, name: str) -> str:
        """``net 5.12 s (wall 6.30 s) at parallelism 2; p1 net 6.01 / wall 7.20 s`` ..."""
        parts = []
        for p, t in sorted(self.by_parallelism.get(name, {}).items()):
            net = "n/a" if t.net_s is None else f"{t.net_s:.2f}"
            parts.append(f"p{p} net {net} / wall {t.wall_s:.2f} s")
        return "; ".join(parts)


def timings(res: dict[str, Any]) -> dict[int, Timing]:
    """A job's runs as the runner wrote them (per parallelism, every run's wall and net
    seconds) as one :class:`Timing` per parallelism."""
    out = {}
    for p, walls in res["runs"].items():
        nets = [n for n in res["net"].get(p, []) if n is not None]
        if walls:
            out[int(p)] = Timing(min(nets) if nets else None, min(walls), len(walls))
    return out


def run_jobs(jobs: list[Job], python: str | None = None, timeout_s: float = 3600,
             parallelisms: tuple[int, ...] = PARALLELISMS) -> Result:
    """Run ``jobs`` in Flink (one subprocess, one JVM, one warm environment) at each of
    ``parallelisms`` and read the results back."""
    python = python or flink_python()
    work = tempfile.mkdtemp(prefix="cedar-flink-")
    try:
        spec_path, result_path = os.path.join(work, "spec.json"), os.path.join(work, "out.json")
        with open(spec_path, "w") as f:
            json.dump({"parallelisms": list(parallelisms),
                       "jobs": [j.spec() for j in jobs]}, f)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        run = subprocess.run([python, JOB_SCRIPT, spec_path, result_path], env=env,
                             capture_output=True, text=True, timeout=timeout_s)
        result = Result()
        if not os.path.exists(result_path):
            raise FlinkUnavailable(f"the Flink job runner failed (exit {run.returncode}): "
                                   f"{run.stderr.strip()[-500:]}")
        with open(result_path) as f:
            out = json.load(f)
        result.startup_s = out.get("startup_s")
        result.conf = out.get("conf", {})
        for job in jobs:
            res = out["jobs"].get(job.name)
            if res is None:
                result.errors[job.name] = f"not run (the runner stopped: exit {run.returncode})"
                continue
            if "error" in res:
                result.errors[job.name] = res["error"]
                continue
            by_p = timings(res)
            if not by_p:
                result.errors[job.name] = "no timed run"
                continue
            result.by_parallelism[job.name] = by_p
            nets = {p: t.net_s for p, t in by_p.items() if t.net_s is not None}
            best = (min(nets, key=nets.__getitem__) if nets else
                    min(by_p, key=lambda p: by_p[p].wall_s))
            result.best_parallelism[job.name] = best
            result.net_s[job.name] = nets[best] if nets else None
            result.seconds[job.name] = nets[best] if nets else by_p[best].wall_s
            result.wall_s[job.name] = by_p[best].wall_s
            if job.rows_to and os.path.exists(job.rows_to):
                result.rows_at[job.name] = job.rows_to
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows :mod:`benchmarks.flink_job` gave for a job (``final_rows``) as dicts, a
    timestamp as µs since the epoch (UTC): listed in ``path``, or in the JSON-lines files
    Flink wrote (read with Arrow, which parses millions of lines in seconds; the folder is
    deleted after)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    with open(path) as f:
        data = json.load(f)
    names = data["columns"]
    if "rows" in data:
        return [dict(zip(names, r)) for r in data["rows"]]
    # the types Flink declared, where Arrow's inference could guess otherwise (a string that
    # reads as a date, a double column of whole numbers); the rest inferred
    known = {"VarCharType": pa.string(), "CharType": pa.string(), "BigIntType": pa.int64(),
             "DoubleType": pa.float64(), "LocalZonedTimestampType": pa.string(),
             "TimestampType": pa.string(), "BooleanType": pa.bool_()}
    schema = pa.schema([(n, known[k]) for n, k in zip(names, data["kinds"]) if k in known])
    options = pj.ParseOptions(explicit_schema=schema)
    parts = [pj.read_json(p, parse_options=options) for p in data["json_files"]
             if os.path.getsize(p) > 0]
    shutil.rmtree(path + ".d", ignore_errors=True)
    if not parts:
        return []
    table = pa.concat_tables(parts, promote_options="default")
    cols: dict[str, list[Any]] = {}
    for name, kind in zip(names, data["kinds"]):
        if name not in table.column_names:  # every value null: the JSON had none
            cols[name] = [None] * table.num_rows
            continue
        col = table[name]
        if "Timestamp" in kind and pa.types.is_string(col.type):
            # written as 2024-01-01 00:00:00.000, with a Z where the type has a time zone
            col = pc.cast(pc.replace_substring(col, "Z", ""), pa.timestamp("us"))
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        cols[name] = col.to_pylist()
    return [dict(zip(cols, values)) for values in zip(*cols.values())]


# -- W1-W3 -----------------------------------------------------------------------------------------
#: W1-W3 in Flink SQL over a table ``w`` (and ``w2`` for W3's right side) of ``ts`` (µs),
#: ``k``, ``v``, with the rowtime ``rt``.
W_SQL = {
    "W1": f"""
SELECT window_start AS `start`, window_end AS `end`, k, COUNT(*) AS `count`, SUM(v) AS `sum`
FROM TABLE(TUMBLE(TABLE w, DESCRIPTOR(rt), INTERVAL '1' SECOND))
WHERE v >= {wl.WHERE_CUT}
GROUP BY window_start, window_end, k""",
    "W2": f"""
SELECT window_start AS `start`, window_end AS `end`, k, SUM(v) / {float(wl.HOP_SIZE_TICKS)} AS twa
FROM TABLE(HOP(TABLE w, DESCRIPTOR(rt), INTERVAL '1' SECOND, INTERVAL '10' SECOND))
WHERE v >= {wl.WHERE_CUT}
GROUP BY window_start, window_end, k""",
    # the interval join's bound on the rowtimes (ms) lets Flink free its state; the exact
    # band (lifetimes overlap: |ts_l - ts_r| < 50 ms) is written on the µs columns
    "W3": f"""
SELECT l.ts AS lts, l.k AS lk, l.v AS lv, r.ts AS rts, r.k AS rk, r.v AS rv
FROM w l, w2 r
WHERE l.k = r.k
  AND r.rt BETWEEN l.rt - INTERVAL '{(wl.JOIN_LIFETIME_TICKS // 1000 + 1) / 1000}' SECOND
               AND l.rt + INTERVAL '{(wl.JOIN_LIFETIME_TICKS // 1000 + 1) / 1000}' SECOND
  AND r.ts > l.ts - {wl.JOIN_LIFETIME_TICKS} AND r.ts < l.ts + {wl.JOIN_LIFETIME_TICKS}""",
}


def workload_jobs(inputs: dict[str, list[tuple[str, list[list[str]]]]], rows_dir: str | None,
                  repeat: int = 1,
                  warm: dict[str, list[tuple[str, list[list[str]]]]] | None = None) -> list[Job]:
    """W1-W3 as Flink jobs: ``inputs[name]`` is the workload's CSV folders with their columns
    (:func:`write_csv`), one for W1 and W2 (table ``w``), two for W3 (``w`` and ``w2``);
    ``warm[name]`` the same over a small input (run first, untimed)."""
    delay = -(-wl.JITTER_TICKS // 1000) + 1  # the disorder in whole ms, and one more

    def tables(folders: list[tuple[str, list[list[str]]]]) -> list[dict[str, Any]]:
        return [table_spec(table, path, cols, "ts", delay)
                for table, (path, cols) in zip(("w", "w2"), folders)]

    return [Job(name, W_SQL[name], tables(inputs[name]), repeat,
                os.path.join(rows_dir, f"{name}.json") if rows_dir else None,
                tables(warm[name]) if warm and name in warm else None)
            for name in ("W1", "W2", "W3") if name in inputs]
