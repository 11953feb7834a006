"""What an idle deployed query costs: CPU of its actors while no input arrives.

Deploys ``--queries`` queries whose sources never yield a row (a generator that blocks, fed by
this driver), in five shapes (a keyed window, a join, a source with an idle timeout, a
group_apply and a plain filter: about five actors each), waits ``--settle`` seconds, then
measures the CPU time of every ``ray::`` worker process of this Ray instance (the processes
under this driver: operator actors, query hosts, pooled workers) over ``--seconds`` with
psutil. It prints % of a core per idle actor and a ``RESULT`` line.

Beside the queries it starts ``--bare`` actors of a class that does nothing, with the shell's
Ray options: what any Ray actor costs idle (Ray's core worker wakes its main thread every
10 ms to check for signals, ``CoreWorker.CheckSignal``, whatever the actor does). An operator
actor's cost above that floor is cedar's own:

    python -m benchmarks.idle_cost                      # 5 queries, 20 s
    python -m benchmarks.idle_cost --queries 10 --seconds 30
    python -m benchmarks.idle_cost --fuse all           # deploy(fuse="all"): fewer actors

It also prints the cost per idle *step* (the queries' steps, sinks included, unfused): what a
cluster with many idle steps burns. Ray's floor is per process, so only sharing a process
brings a step under it: fusion within a query (``deploy(fuse=...)``) or step hosts across
queries (``--hosts N``: ``deploy(hosts=StepHosts(count=N))``, docs/runtime.md):

    python -m benchmarks.idle_cost --queries 10 --hosts 2

Step hosts (2026-11-26 19:27 UTC, load ~2, 20 s): 10 queries, 42 idle steps: 1.083 % of a
core per step in actors of their own (45.5 % of a core in all), 0.048 % per step in 2 hosts
(2.0 % in all; each host 0.98 % against a do-nothing actor's 0.91 %: a host's ~100 idle
threads, one set per slot, cost nothing while they wait). 5 queries, 21 steps: 0.745 % per
step against 0.079 % in 2 hosts.

Measured 2026-11-26 on the 2-core build machine under a load average of ~70 (5 queries, 21
operator actors): before the shell's timer slept until its deadlines, the source with an idle
timeout polled every 50 ms (0.50 % against a do-nothing actor's 0.35 %); after, every operator
actor costs what a do-nothing Ray actor costs (0.47 % vs 0.48 %, cedar's own ±0.01 %). With
``--checkpoint`` the supervisors fetched from each sink every 0.2 s and asked every step for
its error every 0.2 s: +0.71 % per operator actor above the floor; with the vigils that wait
for a failure instead, +0.11 %. What is left is Ray's: ~100 wake-ups a second of every
worker's main thread.

Per idle step (2026-11-26, load average ~20-25, 5 queries, 21 steps, driver-fed so no host
actors): 0.63 % of a core with one actor per step (``--fuse none``), 0.55 % with ``--fuse
all`` (15 actors: the join's two sources, the partitions and every sink keep theirs). The
floor is per process, so a step costs under 0.1 % only when a stage runs more than ~6 steps.

Where an idle actor's CPU goes (2026-11-26, load average ~10, this benchmark's per-thread
split from /proc/PID/task/TID/schedstat, nanosecond run times): an operator actor 0.556 % of
a core, a do-nothing actor 0.517 %; of that the main thread 0.38 % at ~100 runs a second:
``strace`` of an idle bare actor's main thread shows it re-arming a 10 ms timerfd in
``CoreWorker::RunTaskExecutionLoop``'s io_context (``CoreWorker.CheckSignal``, which takes
the GIL for ``PyErr_CheckSignals``); Ray's other threads (worker.io ~11 wake-ups/s, the gRPC
pollers ~5/s each) make the other ~0.15 %. cedar's own timer: 0 wake-ups a second per
actor (``stats()["timer_wakes"]``; tests/actors/test_idle_ray.py bounds it at 1/s).

With ``--checkpoint`` (2026-11-26, load ~15-20, 30 s): the supervisor's watcher fetched from
each idle sink every 2 s: the five sinks cost 0.833 % each against a do-nothing actor's
0.658 %; with a fetch every 10 s (actors/supervisor.py FETCH_S) the costliest actor measured
0.633 % against 0.567 %, cedar's own +0.017 % per operator actor (+0.048 % before).

Ray settings as levers (``--ray-env``; bare actors, A/B 40 s each): task events and metrics
every 60 s, ``RAY_event_stats=0``, the core worker's internal heartbeat at 10 s, event-loop
lag collection and gRPC connection checks at 60 s: 0.587 % per process against 0.600 %
without (noise); the main thread still runs ~100 times a second, worker.io still ~11. None
reaches the 10 ms check, which is hard-coded. So one Ray worker process costs ~0.5 % of a core
idle whatever cedar does, five times the 0.1 % asked; a step costs under 0.1 % only when
more than ~6 steps share a process (``deploy(fuse=...)`` today, within one query; steps of
different queries sharing an actor would be the next lever), or with a Ray whose worker
loop checks signals without a 10 ms timer.

The machine's load is printed beside the figure (other processes share its cores; the
measure counts only this instance's workers, but a loaded machine delays their wake-ups).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil

from topology import AdvanceTime, Count, StepHosts, Stream

MINUTE = 60_000_000
_never = threading.Event()


def _no_rows() -> Iterator[dict[str, Any]]:
    """A source that is open and never yields: the driver's feeder waits on it."""
    _never.wait()
    yield from ()


def _shapes() -> list[Stream]:
    def src(name: str, idle: float | None = None) -> Stream:
        return Stream.from_rows(_no_rows(), start="ts", name=name,
                                advance=AdvanceTime(every=1, idle_timeout=idle))

    keyed = (src("meters").where(lambda r: r["kwh"] > 0)
             .group_apply(lambda r: r["meter"],
                          lambda g: g.tumbling_window(MINUTE).aggregate(Count()), partitions=2))
    join = src("left").join(src("right"), on=(lambda a: a["k"], lambda b: b["k"]))
    idle = src("quiet", idle=1.0).select(lambda r: r).tumbling_window(MINUTE).aggregate(Count())
    plain = src("plain").where(lambda r: r["v"] > 1).select(lambda r: r["v"])
    hop = src("hop").hopping_window(MINUTE, MINUTE // 4).aggregate(Count())
    return [keyed, join, idle, plain, hop]


class Bare:
    """An actor that does nothing: Ray's own idle cost."""

    def ping(self) -> int:
        return os.getpid()


def ray_workers() -> list[psutil.Process]:
    """The ``ray::`` processes of the Ray instance this driver started (its descendants)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.name().startswith("ray::") or " ".join(p.cmdline()).startswith("ray::"):
                out.append(p)
        except psutil.Error:
            pass
    return out


def thread_times(pid: int) -> dict[int, tuple[float, int, str]]:
    """``{tid: (cpu seconds, times run, thread name)}`` of every thread of ``pid``, from
    /proc/PID/task/TID/schedstat (the scheduler's nanosecond run time, not 10 ms ticks, and
    how many times the thread was put on a CPU: its wake-ups). Linux only; empty elsewhere."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, _, slices = f.read().split()[:3]
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(run_ns) / 1e9, int(slices), "main" if int(tid) == pid else name)
    return out


def main_thread_share(pids: list[int], before: dict[int, dict[int, tuple[float, int, str]]],
                      after: dict[int, dict[int, tuple[float, int, str]]], elapsed: float
                      ) -> tuple[float, float, float]:
    """Per process: % of a core of its main thread (Ray's task-execution loop, where the
    ``CoreWorker.CheckSignal`` timer fires every 10 ms), that thread's wake-ups a second,
    and % of a core of all its other threads."""
    main = wakes = rest = 0.0
    n = 0
    for pid in pids:
        b, a = before.get(pid, {}), after.get(pid, {})
        if pid not in a or pid not in b:
            continue
        n += 1
        main += a[pid][0] - b[pid][0]
        wakes += a[pid][1] - b[pid][1]
        rest += sum(a[t][0] - b[t][0] for t in a if t in b and t != pid)
    if not n:
        return 0.0, 0.0, 0.0
    return (main / elapsed * 100 / n, wakes / elapsed / n, rest / elapsed * 100 / n)


def by_thread_name(pids: list[int], before: dict[int, dict[int, tuple[float, int, str]]],
                   after: dict[int, dict[int, tuple[float, int, str]]], elapsed: float
                   ) -> list[tuple[str, float, float]]:
    """Per thread name, most costly first: % of a core per process and runs a second per
    process (summed over the threads of that name in a process)."""
    cpu: dict[str, float] = {}
    runs: dict[str, float] = {}
    n = 0
    for pid in pids:
        b, a = before.get(pid, {}), after.get(pid, {})
        n += bool(a)
        for tid, (sec, slices, name) in a.items():
            if tid in b:
                cpu[name] = cpu.get(name, 0.0) + sec - b[tid][0]
                runs[name] = runs.get(name, 0.0) + slices - b[tid][1]
    n = max(1, n)
    return sorted(((k, cpu[k] / elapsed * 100 / n, runs[k] / elapsed / n) for k in cpu),
                  key=lambda r: -r[1])


def timer_wakes(queries: list[Any]) -> dict[tuple[str, str], int]:
    """cedar's own wake-ups so far: every step's timer loop iterations (``stats()``)."""
    return {(q.name, step): st.get("timer_wakes", 0) for q in queries
            for step, st in q.stats().items()}


def cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    times = {}
    for p in procs:
        try:
            t = p.cpu_times()
            times[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return times


#: ``--fuse`` -> the ``deploy(fuse=...)`` it measures
FUSE = {"none": False, "stateless": "stateless", "chains": "chains", "all": "all"}


def step_counts(fuse: str) -> tuple[int, int]:
    """``(steps, stages)`` of the five shapes: their steps unfused (sinks included) and the
    stages (one actor each) they deploy as with ``--fuse``."""
    shapes = _shapes()
    return (sum(len(q.plan().stages) for q in shapes),
            sum(len(q.plan(FUSE[fuse]).stages) for q in shapes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=5, help="idle queries to deploy")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds before measuring")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds measured")
    ap.add_argument("--checkpoint", action="store_true",
                    help="deploy with checkpoint_dir (a supervisor in each query's host)")
    ap.add_argument("--bare", type=int, default=4, help="do-nothing actors (Ray's floor)")
    ap.add_argument("--fuse", choices=sorted(FUSE), default="none",
                    help="deploy(fuse=...): none (one actor per step, the default), "
                         "stateless, chains or all")
    ap.add_argument("--hosts", type=int, default=0,
                    help="deploy(hosts=StepHosts(count=N)): every step in a slot of N shared "
                         "host actors (0: an actor per stage)")
    ap.add_argument("--slots", type=int, default=32, help="slots per host with --hosts")
    ap.add_argument("--ray-env", action="append", default=[], metavar="KEY=VALUE",
                    help="a Ray setting for this instance and its workers (repeatable), "
                         "e.g. RAY_task_events_report_interval_ms=60000: to measure a lever")
    args = ap.parse_args()
    for kv in args.ray_env:
        key, sep, value = kv.partition("=")
        if not sep or not key.startswith("RAY_"):
            ap.error(f"--ray-env {kv!r}: write RAY_<setting>=<value>")
        os.environ[key] = value  # before ray.init: the raylet and the workers inherit it

    import ray

    # the workers import this checkout's packages (and this module's functions)
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), path) if p)
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="cedar",
             logging_level="ERROR", log_to_driver=False)
    shapes = _shapes()
    queries = []
    ckpt = tempfile.mkdtemp(prefix="cedar-idle-") if args.checkpoint else None
    pool = StepHosts(args.hosts, args.slots, name="idle-cost") if args.hosts else None
    try:
        for i in range(args.queries):
            options: dict[str, Any] = {"checkpoint_dir": ckpt} if ckpt else {}
            if pool is not None:
                options["hosts"] = pool
            shape = _shapes()[i % len(shapes)]  # its own sources: a generator feeds one query
            queries.append(shape.deploy(f"idle-{i}", fuse=FUSE[args.fuse],
                                        **options))
        actors = sum(len(q.steps) for q in queries) if pool is None else args.hosts
        steps = sum(len(shapes[i % len(shapes)].plan().stages) for i in range(len(queries)))
        from actors.shell import ACTOR_OPTIONS

        bare_cls = ray.remote(**ACTOR_OPTIONS)(Bare)
        bare = [bare_cls.remote() for _ in range(args.bare)]
        bare_pids = set(ray.get([b.ping.remote() for b in bare]))
        time.sleep(args.settle)
        procs = ray_workers()
        names = {}
        for p in procs:
            try:
                names[p.pid] = " ".join(p.cmdline()).split()[0]
            except psutil.Error:
                pass
        load0 = os.getloadavg()[0]
        wakes0, w0 = timer_wakes(queries), time.monotonic()
        threads0 = {p.pid: thread_times(p.pid) for p in procs}
        before, t0 = cpu_seconds(procs), time.monotonic()
        time.sleep(args.seconds)
        after, elapsed = cpu_seconds(procs), time.monotonic() - t0
        threads1 = {p.pid: thread_times(p.pid) for p in procs}
        wakes1, w_elapsed = timer_wakes(queries), time.monotonic() - w0
        cedar_wakes = (sum(wakes1[k] - wakes0.get(k, 0) for k in wakes1) / w_elapsed
                       / max(1, len(wakes1)))
        used = {pid: after[pid] - before[pid] for pid in after if pid in before}
        operators = [pid for pid in used if names.get(pid, "").startswith(
            ("ray::OperatorShell", "ray::StepHost"))]
        hosts = [pid for pid in used if names.get(pid, "").startswith("ray::QueryHost")]
        floor = (sum(used[p] for p in bare_pids if p in used) / elapsed * 100
                 / max(1, len(bare_pids)))
        for p in bare_pids:
            used.pop(p, None)
        total = sum(used.values()) / elapsed * 100
        op_total = sum(used[p] for p in operators) / elapsed * 100
        n_actors = len(operators) + len(hosts)
        if actors and actors != len(operators):
            print(f"note: the queries have {actors} steps, {len(operators)} operator "
                  f"processes were found")
        print(f"{len(queries)} idle queries: {len(operators)} operator actors, {len(hosts)} "
              f"hosts, {len(used) - n_actors} other ray:: workers; measured "
              f"{elapsed:.1f} s; load average {load0:.2f} -> {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores")
        top = sorted(used.items(), key=lambda kv: -kv[1])[:5]
        for pid, s in top:
            print(f"  {names.get(pid, '?'):28s} pid {pid:7d}: {s / elapsed * 100:6.3f} % "
                  f"of a core")
        per_op = op_total / max(1, len(operators))
        per_actor = total / max(1, n_actors)
        per_step = total / max(1, steps)
        print(f"operator actors: {op_total:.2f} % of a core in all, {per_op:.3f} % each")
        print(f"all ray:: workers: {total:.2f} % of a core in all, {per_actor:.3f} % per "
              f"actor (operators and hosts)")
        print(f"a do-nothing Ray actor (Ray's floor): {floor:.3f} % of a core each "
              f"({len(bare_pids)} measured); cedar's own per operator actor: "
              f"{per_op - floor:+.3f} %")
        op_main, op_main_wakes, op_rest = main_thread_share(operators, threads0, threads1,
                                                            elapsed)
        bare_main, bare_main_wakes, bare_rest = main_thread_share(sorted(bare_pids), threads0,
                                                                  threads1, elapsed)
        print(f"per process, main thread (Ray's task loop: its 10 ms CheckSignal timer) / "
              f"other threads: operator actor {op_main:.3f} % ({op_main_wakes:.0f} wake-ups/s)"
              f" / {op_rest:.3f} %; do-nothing actor {bare_main:.3f} % "
              f"({bare_main_wakes:.0f} wake-ups/s) / {bare_rest:.3f} %")
        print("  operator actor's threads, per process: " + "; ".join(
            f"{name} {pct:.3f} % ({runs:.0f}/s)"
            for name, pct, runs in by_thread_name(operators, threads0, threads1, elapsed)[:6]))
        print(f"cedar's own timer: {cedar_wakes:.2f} wake-ups/s per actor "
              f"({len(wakes1)} actors)")
        where = f"{len(operators)} step hosts" if pool else f"{len(operators)} operator actors"
        print(f"per idle step (fuse={args.fuse}: {steps} steps in {where} and {len(hosts)} "
              f"query hosts): {per_step:.3f} % of a core")
        print(f"RESULT idle_cost fuse={args.fuse} step_hosts={args.hosts} "
              f"queries={len(queries)} steps={steps} "
              f"actors={n_actors} per_step_pct={per_step:.3f} "
              f"per_actor_pct={per_actor:.3f} per_operator_pct={per_op:.3f} "
              f"ray_floor_pct={floor:.3f} cedar_own_pct={per_op - floor:.3f} "
              f"main_thread_pct={op_main:.3f} cedar_timer_wakes_per_s={cedar_wakes:.2f} "
              f"total_pct={total:.2f} load={load0:.2f}")
    finally:
        _never.set()
        for q in queries:
            try:
                q.stop()
            except Exception as exc:  # noqa: BLE001 - report and go on stopping
                print(f"stopping {q!r} failed: {exc}")
        if pool is not None:
            pool.shutdown()
        ray.shutdown()
        if ckpt:
            shutil.rmtree(ckpt, ignore_errors=True)


if __name__ == "__main__":
    main()
