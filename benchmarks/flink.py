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

Timed per job: from submission to the end of its output into a ``blackhole`` sink, best of
``repeat`` runs (each a fresh environment); the JVM's start is reported apart. Flink's bounded
CSV source ends with a watermark at +∞, so (like cedar, unlike Spark's append mode) every
window is output.

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
#: Flink's parallelism: 1 (on 2 cores parallelism 2 measured at best 1.1x faster than 1).
PARALLELISM = 1


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
    delay in ms)``), its query, timed runs, and where its rows go (None: not collected)."""

    name: str
    sql: str
    tables: list[dict[str, Any]]
    repeat: int = 3
    rows_to: str | None = None

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "sql": self.sql, "tables": self.tables,
                "repeat": self.repeat, "rows_to": self.rows_to}


def table_spec(name: str, path: str, columns: list[list[str]], time: str,
               watermark_ms: int = 0) -> dict[str, Any]:
    return {"name": name, "path": path, "columns": columns, "time": time,
            "watermark_ms": watermark_ms}


@dataclass
class Result:
    """What a Flink run gave: JVM start-up seconds, per job the best wall time, Flink's net
    runtime, the error if any, and the rows (dicts) where they were collected."""

    startup_s: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    net_s: dict[str, float | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def run_jobs(jobs: list[Job], python: str | None = None, timeout_s: float = 3600) -> Result:
    """Run ``jobs`` in Flink (one subprocess, one JVM) and read the results back."""
    python = python or flink_python()
    work = tempfile.mkdtemp(prefix="cedar-flink-")
    try:
        spec_path, result_path = os.path.join(work, "spec.json"), os.path.join(work, "out.json")
        with open(spec_path, "w") as f:
            json.dump({"parallelism": PARALLELISM, "jobs": [j.spec() for j in jobs]}, f)
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
        for job in jobs:
            res = out["jobs"].get(job.name)
            if res is None:
                result.errors[job.name] = f"not run (the runner stopped: exit {run.returncode})"
                continue
            if "error" in res:
                result.errors[job.name] = res["error"]
                continue
            result.seconds[job.name] = min(res["runs"])
            nets = [n for n in res["net"] if n is not None]
            result.net_s[job.name] = min(nets) if nets else None
            if job.rows_to and os.path.exists(job.rows_to):
                with open(job.rows_to) as f:
                    data = json.load(f)
                result.rows[job.name] = [dict(zip(data["columns"], r)) for r in data["rows"]]
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
                  repeat: int = 3) -> list[Job]:
    """W1-W3 as Flink jobs: ``inputs[name]`` is the workload's CSV folders with their columns
    (:func:`write_csv`), one for W1 and W2 (table ``w``), two for W3 (``w`` and ``w2``)."""
    delay = -(-wl.JITTER_TICKS // 1000) + 1  # the disorder in whole ms, and one more
    return [Job(name, W_SQL[name],
                [table_spec(table, path, cols, "ts", delay)
                 for table, (path, cols) in zip(("w", "w2"), inputs[name])],
                repeat, os.path.join(rows_dir, f"{name}.json") if rows_dir else None)
            for name in ("W1", "W2", "W3") if name in inputs]
