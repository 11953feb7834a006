"""Flink's side of the benchmark, run by :mod:`benchmarks.flink` in a Python of its own (the
one PyFlink is installed in: its pinned pyarrow and pandas differ from cedar's). It imports
nothing of cedar: ``python flink_job.py SPEC.json RESULT.json``.

Flink runs as the Nexmark project runs it (:data:`NEXMARK_CONF`: object reuse, mini-batch,
split distinct aggregation, heap state), in one warm ``TableEnvironment`` for every job and
run of the process: the JVM's start and the first environment are timed apart.

The spec lists the parallelisms to run (``[1, 2]``) and jobs: per job its source tables (CSV
files, one ``CREATE TEMPORARY TABLE`` each, the time column ``BIGINT`` µs turned into a
``TIMESTAMP_LTZ(3)`` rowtime with a ``WATERMARK``), a SQL query, optionally the same tables over a
small input (``warm_tables``: the query runs once on them at each parallelism first, untimed,
as cedar's warm-up run does), how many timed runs at each parallelism, and optionally a file
to write the query's final rows to. Each timed run inserts
the query into a ``blackhole`` sink and waits for the job to end: Flink's own net job runtime
(``JobExecutionResult.getNetRuntime``: from the job's start to its end, without the
compilation and the local cluster's start) and, beside it, the wall time from submission to
the end of the output. The rows for the comparison come from a separate, untimed run at the
first parallelism (see :func:`final_rows`).
"""

from __future__ import annotations

import calendar
import datetime as dt
import decimal
import json
import os
import shutil
import sys
import time
import traceback
from typing import Any

#: The Flink configuration the Nexmark project publishes for its runs
#: (``nexmark-flink/src/main/resources/conf/flink-conf.yaml`` / ``sql-client-defaults``), as
#: far as it concerns one local process: object reuse, mini-batch (2 s, 50,000 rows), split
#: distinct aggregation, heap (``hashmap``) state.
NEXMARK_CONF = {
    "pipeline.object-reuse": "true",
    "table.exec.mini-batch.enabled": "true",
    "table.exec.mini-batch.allow-latency": "2 s",
    "table.exec.mini-batch.size": "50000",
    "table.optimizer.distinct-agg.split.enabled": "true",
    "state.backend.type": "hashmap",
}


def environment() -> Any:
    """The one ``TableEnvironment`` of this process, configured as :data:`NEXMARK_CONF`."""
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    given = Configuration()
    for key, value in NEXMARK_CONF.items():
        given.set_string(key, value)
    env = TableEnvironment.create(EnvironmentSettings.new_instance().in_streaming_mode()
                                  .with_configuration(given).build())
    conf = env.get_config()
    for key, value in NEXMARK_CONF.items():  # and in the table config, which jobs are given
        conf.set(key, value)
    conf.set("table.local-time-zone", "UTC")
    return env


def set_parallelism(env: Any, parallelism: int) -> None:
    """The parallelism of the jobs submitted from now on (read at each job's planning)."""
    conf = env.get_config()
    conf.set("parallelism.default", str(parallelism))
    conf.set("table.exec.resource.default-parallelism", str(parallelism))


def create_tables(env: Any, tables: list[dict[str, Any]]) -> None:
    """The job's source tables, replacing any of the same name (an earlier job's, which may
    read another size of the same stream)."""
    for t in tables:
        cols = ",\n  ".join(f"`{name}` {kind}" for name, kind in t["columns"])
        delay = t.get("watermark_ms", 0)
        env.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS `{t['name']}`")
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


def final_rows(env: Any, sql: str, scratch: str) -> dict[str, Any]:
    """The query's rows once its changelog is applied, as ``{"columns": names, "rows":
    [[value, ...], ...]}`` or ``{"columns": names, "kinds": type names, "json_files": paths}``.
    An insert-only query writes them as JSON lines through the filesystem connector into
    ``scratch``, left there for the caller to read in bulk (:func:`benchmarks.flink.read_rows`:
    parsing millions of lines here, in Python, took minutes); an updating one (which that sink
    refuses) comes through ``to_pandas``, which applies the changelog in the JVM. Both move
    the rows in bulk: ``collect()``'s iterator costs a py4j round trip per row (minutes for a
    million rows)."""
    from pyflink.table import Schema, TableDescriptor

    table = env.sql_query(sql)
    schema = table.get_schema()
    names = list(schema.get_field_names())
    kinds = [type(t).__name__ for t in schema.get_field_data_types()]
    env.execute_sql("DROP TEMPORARY TABLE IF EXISTS `cedar_rows`")
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
        return {"columns": names, "rows": [[plain(v) for v in row] for row in rows]}
    files = [os.path.join(root, name) for root, _, found in os.walk(scratch)
             for name in sorted(found) if not name.startswith(".")]
    return {"columns": names, "kinds": kinds, "json_files": files}


def timed_run(env: Any, sql: str) -> tuple[float, float | None]:
    """Seconds from submission to the end of the job's output into a blackhole sink, and the
    job's net runtime as Flink reports it (None if it cannot be read)."""
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
    parallelisms = [int(p) for p in spec.get("parallelisms", [1])]
    out: dict[str, Any] = {"jobs": {}, "conf": NEXMARK_CONF, "parallelisms": parallelisms}
    t0 = time.perf_counter()
    env = environment()
    out["startup_s"] = time.perf_counter() - t0
    for job in spec["jobs"]:
        name = job["name"]
        # per parallelism (as a string: JSON's keys), every run's wall and net seconds
        res: dict[str, Any] = {"runs": {}, "net": {}}
        try:
            if job.get("warm_tables"):  # the same query on a small input first: not timed
                create_tables(env, job["warm_tables"])
                for parallelism in parallelisms:
                    set_parallelism(env, parallelism)
                    timed_run(env, job["sql"])
            create_tables(env, job["tables"])
            for parallelism in parallelisms:
                set_parallelism(env, parallelism)
                walls, nets = res["runs"].setdefault(str(parallelism), []), \
                    res["net"].setdefault(str(parallelism), [])
                for _ in range(int(job.get("repeat", 1))):
                    wall, net = timed_run(env, job["sql"])
                    walls.append(wall)
                    nets.append(net)
            if job.get("rows_to"):
                set_parallelism(env, parallelisms[0])
                scratch = job["rows_to"] + ".d"  # the caller's folder: it reads and deletes
                shutil.rmtree(scratch, ignore_errors=True)
                rows = final_rows(env, job["sql"], scratch)
                with open(job["rows_to"], "w") as f:  # only once they are all there
                    json.dump(rows, f)
        except Exception as exc:  # noqa: BLE001 - one failing job must not stop the others
            res["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            res["trace"] = traceback.format_exc()[-2000:]
        out["jobs"][name] = res
        with open(result_path, "w") as f:  # written after every job: a crash keeps the rest
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
