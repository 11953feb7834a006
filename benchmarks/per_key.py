"""What per-key progress costs (issue 38, item 6): W1 with one CTI against W1 with a CTI per key.

W1 (:func:`benchmarks.workloads.w1`: where → select → group_apply(key, tumbling 1 s →
count and sum)) runs twice over the same generated events, 1,000 keys, fed as Arrow column
batches (``Stream.from_arrow``) in time order (sorted by start: no row is late either way):

* **one CTI**: the suite's source, ``AdvanceTime(every=10,000, delay=2 ms)``;
* **per key**: ``AdvanceTime(every=1, delay=2 ms, per_key="k", low_watermark=1 s)``: each
  key's windows are final at its own CTI (the ``group_apply`` runs as the keyed window fast
  path at each key's CTI).

Both outputs must have the same CHT. Printed: events/s of each (best of 7 after a warm-up,
the two runs taking turns so that a changing load hits both, and the medians; inline, with the
events per CPU second of the process beside, then on Ray with ``collect()``'s defaults), the
cost of per-key progress (1 − its throughput ÷ the one CTI's: the target is at most 20 %) and
the load average beside each figure.

``--memory``: 10M events of 100k keys through per-key W1 inline, generated and fed chunk by
chunk (never all rows in memory); every ~1M events the operators' state rows and the
process's RSS: both must stay flat (bounded by the keys and the open windows, not by the
events).

    python -m benchmarks.per_key                    # 4M events inline and on Ray
    python -m benchmarks.per_key --events 300000 --no-ray
    python -m benchmarks.per_key --memory           # 10,000,000 events, 100,000 keys
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks import workloads as wl
from benchmarks.common import say, start_ray, timed
from operators.cht import check_equivalent
from operators.events import TICKS_PER_SECOND
from operators.ingress import AdvanceTime
from topology import Stream

KEYS = 1_000
#: How far behind the fastest key a key may fall before its rows are late.
LAG_TICKS = TICKS_PER_SECOND
#: The per-key source's AdvanceTime: a CTI per key after each of its events.
PER_KEY = AdvanceTime(every=1, delay=wl.JITTER_TICKS, per_key="k", low_watermark=LAG_TICKS)
#: The cost target: per-key progress costs at most this share of the one CTI's throughput.
TARGET_COST = 0.20
RUNS = 7


def in_time_order(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The generated columns sorted by start (stable)."""
    order = np.argsort(cols["ts"], kind="stable")
    return {k: v[order] for k, v in cols.items()}


def query(data: Any, per_key: bool) -> Stream:
    """W1 over ``data`` (an Arrow table or an iterable of them), one CTI or per key."""
    if not per_key:
        return wl.w1(wl.source(data))
    return wl.w1(Stream.from_arrow(data, start="ts", shape="point", advance=PER_KEY))


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def interleaved(runs: dict[str, Callable[[], Any]], times: int = RUNS
                ) -> dict[str, tuple[float, float, Any, str]]:
    """Each of ``runs`` once to warm up, then ``times`` rounds of each in turn (a load that
    changes hits both alike): per run, the fastest wall seconds, the CPU seconds of this
    process in that run (inline: what the run itself cost on a shared machine), its output
    and the load average after it."""
    for fn in runs.values():
        fn()
    best: dict[str, tuple[float, float, Any, str]] = {}
    for _ in range(times):
        for name, fn in runs.items():
            c0 = time.process_time()
            seconds, out = timed(fn)
            cpu = time.process_time() - c0
            ALL_RUNS.setdefault(name, []).append(seconds)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, cpu, out, load())
    return best


#: Every run's seconds by name, for the medians printed beside the best.
ALL_RUNS: dict[str, list[float]] = {}


def compare(n: int, runtime: str, ordered: bool = True, keys: int = KEYS) -> dict[str, float]:
    """Both sources over the same ``n`` events on ``runtime`` ("inline" or "ray"), in time
    order or (``ordered=False``) as generated: each start up to 2 ms late, within the delay,
    so still no row is late."""
    cols = wl.points(n, keys, seed=38)
    table = wl.arrow_table(in_time_order(cols) if ordered else cols)
    if not ordered:
        say(f"  as generated (disorder up to {wl.JITTER_TICKS} µs, the delay), {runtime}:")
    runs: dict[str, Callable[[], Any]] = {}
    for name, per_key in (("one CTI", False), ("per key", True)):
        q = query(table, per_key)
        if per_key:
            assert "at each key's CTI" in q.explain(), q.explain()
        runs[name] = functools.partial(q.collect, runtime=runtime)
    ALL_RUNS.clear()
    best = interleaved(runs)
    assert not best["per key"][2].report.late, "rows late: not in time order?"
    check_equivalent(best["per key"][2], best["one CTI"][2])
    eps, cpu_eps = {}, {}
    for name, (seconds, cpu, _, at) in best.items():
        eps[name], cpu_eps[name] = n / seconds, n / cpu
        on_cpu = f", {n / cpu:,.0f} per CPU second" if runtime == "inline" else ""
        say(f"  {runtime:6s} {name:8s} {n:,} events, {keys:,} keys: {seconds:.3f} s = "
            f"{n / seconds:,.0f} events/s{on_cpu} (best of {RUNS}, interleaved; {at})")
    cost = 1 - eps["per key"] / eps["one CTI"]
    median = {name: sorted(t)[len(t) // 2] for name, t in ALL_RUNS.items()}
    by_median = 1 - median["one CTI"] / median["per key"]
    say(f"  {runtime:6s} medians: one CTI {n / median['one CTI']:,.0f}, per key "
        f"{n / median['per key']:,.0f} events/s: cost {by_median:.1%}")
    verdict = "met" if cost <= TARGET_COST else "NOT met"
    by_cpu = 1 - cpu_eps["per key"] / cpu_eps["one CTI"]
    on_cpu = f" ({by_cpu:.1%} per CPU second)" if runtime == "inline" else ""
    say(f"  {runtime:6s} per-key cost {cost:.1%}{on_cpu} of the one-CTI throughput (target ≤ "
        f"{TARGET_COST:.0%}: {verdict}); output CHTs equal ({load()})")
    return {"one": eps["one CTI"], "per_key": eps["per key"], "cost": cost}


# -- --memory -------------------------------------------------------------------------------------
def rss_mb() -> float:
    with open("/proc/self/status") as f:
        kb = int(next(line for line in f if line.startswith("VmRSS")).split()[1])
    return kb / 1024


def chunks_in_order(n: int, keys: int, chunk: int) -> Iterator[Any]:
    """``n`` generated events as Arrow tables of ``chunk`` rows, each sorted by start (the
    jitter is far below a chunk's span, so the stream is in time order), made as read."""
    import pyarrow as pa

    for first in range(0, n, chunk):
        yield pa.table(in_time_order(wl.points(min(chunk, n - first), keys, seed=38,
                                               first=first)))


def memory(n: int, keys: int, chunk: int = 100_000, every: int = 1_000_000) -> int:
    """Per-key W1 inline over ``n`` events of ``keys`` keys, fed chunk by chunk; the state
    rows and RSS every ``every`` events. Returns the exit status (0: flat)."""
    from topology.planning.dag import DagProcessor
    from topology.running.inline import DEFAULT_BATCH, source_batches

    plan = query(wl.Columnar(chunks_in_order(n, keys, chunk)), per_key=True).plan(False)
    dag = DagProcessor(plan, inline_sink=True)
    [step] = dag.inputs
    ingress = getattr(dag.procs[step], "ingress", None)  # the source's per-key progress

    def tracked() -> int:
        return len(ingress._keys) if ingress is not None else -1

    fed, outputs, mark = 0, 0, every
    samples: list[tuple[int, int, float]] = []
    t0 = time.perf_counter()
    say(f"--memory: per-key W1 inline, {n:,} events, {keys:,} keys, chunks of {chunk:,} rows")
    for batch in source_batches(plan, step, DEFAULT_BATCH):
        fed += len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)
        outputs += len(dag.process(batch, 0))
        if fed >= mark:
            mark += every
            samples.append((fed, dag.state_size(), rss_mb()))
            say(f"  {fed:>12,} events: {samples[-1][1]:>9,} state rows, {tracked():,} keys' "
                f"CTIs, RSS {samples[-1][2]:8.1f} MB, {outputs:,} output messages ({load()})")
    outputs += len(dag.finish())
    seconds = time.perf_counter() - t0
    half = samples[len(samples) // 2:]
    growth = half[-1][2] - half[0][2] if half else 0.0
    rows = max(s[1] for s in samples) if samples else 0
    say(f"  state rows at most {rows:,}; RSS over the second half "
        f"{half[0][2]:.1f} → {half[-1][2]:.1f} MB ({growth:+.1f} MB); {outputs:,} output "
        f"messages; {seconds:.1f} s = {fed / seconds:,.0f} events/s, generation included "
        f"({load()})")
    return 0 if growth < 50 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=None,
                    help="events inline (default 4,000,000; 10,000,000 with --memory)")
    ap.add_argument("--keys", type=int, default=None,
                    help="keys (default 1,000; 100,000 with --memory)")
    ap.add_argument("--ray-events", type=int, default=4_000_000,
                    help="events of the Ray runs (default 4,000,000: a run of 1M is a few "
                         "batches, its fixed costs would decide)")
    ap.add_argument("--no-ray", action="store_true", help="inline only")
    ap.add_argument("--memory", action="store_true", help="the memory run instead")
    args = ap.parse_args(argv)
    if args.memory:
        return memory(args.events or 10_000_000, args.keys or 100_000)
    n = args.events or 4_000_000
    say(f"per-key progress, W1 ({os.cpu_count()} cores, {load()}):")
    keys = args.keys or KEYS
    figures = {"inline": compare(n, "inline", keys=keys),
               "inline_disordered": compare(n, "inline", ordered=False, keys=keys)}
    if not args.no_ray:
        import ray

        start_ray()
        try:
            figures["ray"] = compare(args.ray_events, "ray", keys=keys)
        finally:
            ray.shutdown()
    say("RESULT " + " ".join(f"{where}_{k}={v:.3f}" if k == "cost" else
                             f"{where}_{k}_eps={v:.0f}"
                             for where, f in figures.items() for k, v in f.items())
        + f" events={n} ray_events={args.ray_events} {load().replace(' ', '=')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
