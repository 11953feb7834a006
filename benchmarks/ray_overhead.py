"""W1 inline and on Ray, best of N with the spread, and where a Ray run spends its time.

The benchmark's W1 (``benchmarks.workloads.w1`` over generated columns, 2M events by default)
runs once inline and twice on Ray to warm up (actors started, imports done, the object
store's first use), then ``--runs`` times inline and on Ray in turn, so that each pair of
runs shares the machine's load (others' test suites may share its cores). Ray's workers run
at nice 0 like the inline run (:func:`benchmarks.common.start_ray`). Every Ray run is cut into
phases, timed on the driver by wrapping :mod:`topology.running.deploy`'s steps (not by copying
them):

* ``plan``: the query planned, Ray connected;
* ``take``: actors borrowed from the pool;
* ``configure``: every stage configured (one call each, awaited together);
* ``feed``: the driver's feeding of the source, to the last batch submitted and its end;
* ``drain``: from there to the last output at the driver (the pipeline empties, the last
  operator's output is fetched and decoded);
* ``give``: the actors reset and handed back to the pool.

The CPU seconds of every process (the driver, each actor by its step, Ray's own) are summed
over the timed Ray runs.
``first out`` is when the first non-empty output reached the driver, from the start of
``feed``.

    PYTHONPATH=. python -m benchmarks.ray_overhead                 # 2M events, 5 runs each
    PYTHONPATH=. python -m benchmarks.ray_overhead --events 400000 --runs 3 --fuse no
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from operators.cht import check_equivalent

from . import workloads as wl

PHASES = ("plan", "take", "configure", "feed", "drain", "give")


def spread(times: list[float]) -> str:
    """``best / median / worst`` of ``times`` (seconds)."""
    return (f"best {min(times):.3f} s, median {statistics.median(times):.3f} s, "
            f"worst {max(times):.3f} s")


@contextmanager
def phases(marks: dict[str, float]) -> Iterator[None]:
    """Record into ``marks`` when each of collect_plan's steps ends (perf_counter)."""
    from topology.running import deploy

    def wrap(owner: Any, name: str, after: str,
             before: str | None = None) -> Callable[[], None]:
        orig = getattr(owner, name)

        def timed(*args: Any, **kw: Any) -> Any:
            if before is not None:
                marks.setdefault(before, time.perf_counter())
            try:
                return orig(*args, **kw)
            finally:
                marks[after] = time.perf_counter()

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, orig)

    def first_out(blob: Any) -> Any:
        msgs = decode(blob)
        now = time.perf_counter()
        if msgs:
            marks.setdefault("first_out", now)
            marks["last_out"] = now
        return msgs

    decode = deploy.decode
    undo = [wrap(deploy.POOL, "take", "take", before="plan"),
            wrap(deploy, "_configure", "configure"),
            wrap(deploy, "feed_round_robin", "feed"),
            wrap(deploy.POOL, "give", "give")]
    deploy.decode = first_out
    try:
        yield
    finally:
        deploy.decode = decode
        for u in undo:
            u()


def ray_run(query: Any, **options: Any) -> tuple[float, dict[str, float], list[Any]]:
    """One timed Ray collect(): its seconds, the seconds of each phase, its output."""
    marks: dict[str, float] = {}
    with phases(marks):
        t0 = time.perf_counter()
        out = query.collect(**options)
        t1 = time.perf_counter()
    at = {"plan": marks["plan"], "take": marks["take"], "configure": marks["configure"],
          "feed": marks["feed"], "drain": marks.get("last_out", marks["feed"]),
          "give": marks["give"]}
    cuts, prev = {}, t0
    for p in PHASES:
        cuts[p] = max(0.0, at[p] - prev)
        prev = max(prev, at[p])
    cuts["first_out"] = marks.get("first_out", t1) - marks["configure"]
    cuts["rest"] = t1 - prev
    return t1 - t0, cuts, out


def profile(out: str) -> list[subprocess.Popen[bytes]]:
    """Start ``py-spy record`` on this driver and on every pooled actor (the warm-up left
    them in the pool; a run configures them as its stages in pool order)."""
    import ray

    from topology.running import deploy

    os.makedirs(out, exist_ok=True)
    pids = {"driver": os.getpid()}
    for i, h in enumerate(deploy.POOL.idle):
        pids[f"actor{i}"] = ray.get(h.stats.remote())["pid"]
    return [subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--rate", "100",
                              "--nonblocking", "--idle", "--format", "raw",
                              "--output", os.path.join(out, f"{name}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in pids.items()]


def cpu_seconds(steps: list[str]) -> dict[str, float]:
    """CPU seconds (user + system) so far of this driver and every process under it (Ray's
    own processes and the actors), by name: the pooled actors by the step each runs
    (``steps``, in plan order: the pool hands its actors out in order)."""
    import psutil
    import ray

    from topology.running import deploy

    pids = ray.get([h.stats.remote() for h in deploy.POOL.idle])
    step_of = {s["pid"]: step for s, step in zip(pids, steps)}
    me = psutil.Process()
    out: dict[str, float] = {}
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            name = "driver" if p.pid == me.pid else step_of.get(p.pid) or p.name()
        except psutil.Error:
            continue
        out[name] = out.get(name, 0.0) + t.user + t.system
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fuse", choices=["auto", "yes", "no"], default="auto",
                    help="collect(fuse=None/True/False) on Ray (auto: collect's default)")
    ap.add_argument("--skip-inline", action="store_true")
    ap.add_argument("--profile", metavar="DIR",
                    help="py-spy record the driver and every actor during the timed runs "
                         "(raw stacks DIR/driver.txt, DIR/actor<i>.txt in plan order; "
                         "py-spy must be on PATH)")
    args = ap.parse_args(argv)

    from benchmarks.common import start_ray
    from topology.running import deploy

    cols = wl.points(args.events, args.keys, seed=1)
    query = wl.w1(wl.source(cols))
    n = args.events
    print(f"W1, {n:,} events over {args.keys:,} keys; load {os.getloadavg()[0]:.2f}", flush=True)
    if not args.skip_inline:
        query.collect(runtime="inline")  # warm-up
    start_ray()
    fuse = {"auto": None, "yes": True, "no": False}[args.fuse]
    options: dict[str, Any] = {"fuse": fuse}
    ran = deploy._without_sink(query._ray_plan(fuse))  # the stages collect() runs
    print(ran.explain().split("\n\n", 1)[1], flush=True)
    ray_run(wl.w1(wl.source(wl.head(cols, 20_000))), **options)  # actors started, imports done
    ray_run(query, **options)  # the first full-size run pays the object store's first use
    inline: list[float] = []
    ray_s: list[float] = []
    spies = profile(args.profile) if args.profile else []
    cpu: dict[str, float] = {}
    steps = list(ran.stages)
    for _ in range(args.runs):  # inline and Ray in turn: each pair shares the machine's load
        line = ""
        expected = None
        if not args.skip_inline:
            t0 = time.perf_counter()
            expected = query.collect(runtime="inline")
            inline.append(time.perf_counter() - t0)
            line = f"inline {inline[-1] * 1000:4.0f} ms | "
        before = cpu_seconds(steps)
        seconds, cuts, out = ray_run(query, **options)
        for name, t in cpu_seconds(steps).items():
            cpu[name] = cpu.get(name, 0.0) + t - before.get(name, 0.0)
        if expected is not None:
            check_equivalent(out, expected)
        ray_s.append(seconds)
        print(f"  {line}ray " + "  ".join(f"{p} {cuts[p] * 1000:3.0f}" for p in PHASES)
              + f"  | first out {cuts['first_out'] * 1000:3.0f} | total {seconds * 1000:4.0f} ms"
              + (f" | b/a {inline[-1] / seconds:.2f}" if inline else "")
              + f" | load {os.getloadavg()[0]:.1f}", flush=True)
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait()
    if inline:
        print(f"inline (a): {n / min(inline):,.0f} events/s; {spread(inline)}")
    print(f"ray (b): {n / min(ray_s):,.0f} events/s; {spread(ray_s)}")
    print("CPU per Ray run: " + ", ".join(
        f"{name} {t / args.runs * 1000:.0f} ms"
        for name, t in sorted(cpu.items(), key=lambda x: -x[1]) if t / args.runs >= 0.005))
    if inline:
        pairs = [a / b for a, b in zip(inline, ray_s)]
        print(f"(b)/(a): best/best {min(inline) / min(ray_s):.2f}; per pair: "
              f"{', '.join(f'{r:.2f}' for r in pairs)} (median {statistics.median(pairs):.2f});"
              f" load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
