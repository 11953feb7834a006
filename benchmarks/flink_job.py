"""Flink's side of the benchmark, run by :mod:`benchmarks.flink` in a Python of its own (the
one PyFlink is installed in: its pinned pyarrow and pandas differ from cedar's). It imports
nothing of cedar: ``python flink_job.py SPEC.json RESULT.json``.

The spec lists jobs: per job its source tables (CSV files, one ``CREATE TABLE`` each, the
time column ``BIGINT`` µs turned into a ``TIMESTAMP_LTZ(3)`` rowtime with a ``WATERMARK``),
a SQL query, how many timed runs, and optionally a file to write the query's final rows to.
Each timed run inserts the query into a ``blackhole`` sink and waits for the job to end: the
wall time from submission to the end of the output, and Flink's own net job runtime. The
first ``TableEnvironment`` (the JVM's start) is timed apart. The rows for the comparison come
from a separate, untimed run (see :func:`final_rows`).
"""

from __future__ import annotations

import calendar
import datetime as dt
import decimal
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any


def environment(parallelism: int) -> Any:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("table.local-time-zone", "UTC")
    conf.set("table.exec.resource.default-parallelism", str(parallelism))
    return env


def create_tables(env: Any, tables: list[dict[str, Any]]) -> None:
    for t in tables:
        cols = ",\n  ".join(f"`{name}` {kind}" for name, kind in t["columns"])
        delay = t.get("watermark_ms", 0)
        env.execute_sql(f"""
CREATE TEMPORARY TABLE `{t['name']}` (
  {cols},
  `rt` AS TO_TIMESTAMP_LTZ(CAST(`{t['time']}` / 1000 AS BIGINT), 3),
  WATERMARK FOR `rt` AS `rt` - INTERVAL '{delay / 1000:.3f}' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '{t['path']}',
  'format' = 'csv'
)""")


def plain(value: Any) -> Any:
    """A value JSON can carry: a timestamp as µs since the epoch (UTC), a decimal as float."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return calendar.timegm(value.timetuple()) * 1_000_000 + value.microsecond
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def final_rows(env: Any, sql: str, scratch: str) -> tuple[list[str], list[list[Any]]]:
    """The query's rows once its changelog is applied. An insert-only query writes them as
    JSON lines through the filesystem connector, read back here; an updating one (which that
    sink refuses) comes through ``to_pandas``, which applies the changelog in the JVM. Both
    move the rows in bulk: ``collect()``'s iterator costs a py4j round trip per row (minutes
    for a million rows)."""
    from pyflink.table import Schema, TableDescriptor

    table = env.sql_query(sql)
    schema = table.get_schema()
    names = list(schema.get_field_names())
    kinds = [type(t).__name__ for t in schema.get_field_data_types()]
    try:
        env.create_temporary_table("cedar_rows", TableDescriptor.for_connector("filesystem")
                                   .schema(Schema.new_builder().from_row_data_type(
                                       schema.to_row_data_type()).build())
                                   .option("path", scratch).format("json").build())
        table.execute_insert("cedar_rows").wait()
    except Exception as exc:
        if "support consuming update" not in str(exc):
            raise
        frame = table.to_pandas()
        rows = frame.astype(object).where(frame.notna(), None).values.tolist()
        return names, [[plain(v) for v in row] for row in rows]
    rows = []
    for root, _, files in os.walk(scratch):
        for name in sorted(files):
            if name.startswith("."):
                continue
            with open(os.path.join(root, name)) as f:
                for line in f:
                    record = json.loads(line)
                    rows.append([from_json(record.get(n), k) for n, k in zip(names, kinds)])
    return names, rows


def from_json(value: Any, kind: str) -> Any:
    """A value of the JSON format as :func:`plain` gives it: a timestamp (written as
    ``2024-01-01 00:00:00.000[Z]``) as µs since the epoch, UTC."""
    if value is None or "Timestamp" not in kind:
        return value
    return plain(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))


def timed_run(env: Any, sql: str) -> tuple[float, float | None]:
    """Seconds from submission to the end of the job's output into a blackhole sink, and the
    job's net runtime as Flink reports it."""
    table = env.sql_query(sql)
    from pyflink.table import TableDescriptor

    t0 = time.perf_counter()
    result = table.execute_insert(TableDescriptor.for_connector("blackhole").build())
    result.wait()
    wall = time.perf_counter() - t0
    net = None
    try:
        client = result.get_job_client()
        if client is not None:
            net = client.get_job_execution_result().result().get_net_runtime() / 1000.0
    except Exception:  # noqa: BLE001 - the net runtime is extra information only
        net = None
    return wall, net


def main(spec_path: str, result_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    parallelism = int(spec.get("parallelism", 1))
    out: dict[str, Any] = {"jobs": {}}
    t0 = time.perf_counter()
    environment(parallelism)
    out["startup_s"] = time.perf_counter() - t0
    for job in spec["jobs"]:
        name = job["name"]
        res: dict[str, Any] = {"runs": [], "net": []}
        try:
            for _ in range(int(job.get("repeat", 1))):
                env = environment(parallelism)
                create_tables(env, job["tables"])
                wall, net = timed_run(env, job["sql"])
                res["runs"].append(wall)
                res["net"].append(net)
            if job.get("rows_to"):
                env = environment(parallelism)
                create_tables(env, job["tables"])
                scratch = tempfile.mkdtemp(prefix="cedar-flink-rows-")
                try:
                    names, rows = final_rows(env, job["sql"], scratch)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                with open(job["rows_to"], "w") as f:
                    json.dump({"columns": names, "rows": rows}, f)
        except Exception as exc:  # noqa: BLE001 - one failing job must not stop the others
            res["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            res["trace"] = traceback.format_exc()[-2000:]
        out["jobs"][name] = res
        with open(result_path, "w") as f:  # written after every job: a crash keeps the rest
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
