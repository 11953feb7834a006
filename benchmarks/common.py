"""What several benchmarks share: printing as they go, timing, starting Ray as the suite
does, and reading Spark's parquet output back (a module of its own, so that the suite
(:mod:`benchmarks.run`), Nexmark (:mod:`benchmarks.nexmark.run`) and Spark SSS
(:mod:`benchmarks.spark_sss`) import it rather than each other)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def say(text: str) -> None:
    print(text, flush=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def start_ray() -> None:
    import ray

    # actors unpickle the suite's functions (benchmarks.workloads): let the workers import it
    path = os.environ.get("PYTHONPATH", "")
    # Ray starts its workers at nice 15: on a machine others share, the actors would get a
    # fraction of the CPU the inline run (a) gets at nice 0; compare them at equal priority
    os.environ.setdefault("RAY_worker_niceness", "0")
    if REPO not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, path) if p)
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="cedar",
             logging_level="ERROR")


def read_rows(path: str) -> list[dict[str, Any]]:
    """Parquet rows written by Spark as dicts, timestamps as ticks (µs since the epoch)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    cols = {}
    for name in table.column_names:
        col = table[name]
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
        cols[name] = col.to_pylist()
    return [dict(zip(cols, values)) for values in zip(*cols.values())] if cols else []
