"""Node loss, checkpoint storage and bytes between nodes on a real three-node Ray cluster.

``ray.cluster_utils.Cluster`` on this machine: a head (1 CPU) and two workers (2 CPUs each),
each with its own raylet and object store; this process is the driver, on the head.

(a) **Recovery after a node loss.** The checkpointed window + join query of the recovery
    tests (``tests.reliability.test_recovery.window_join``; local checkpoint directory) is
    deployed with its actors spread over the nodes; at several moments of its input a worker
    node that hosts some of its actors is removed (``Cluster.remove_node``: its raylet, object
    store and workers are killed). Reported per run: the time from the loss until the
    supervisor has restarted the query (its recovery record appears), the supervisor's own
    ``recovery_s`` (restart and replay), the time until the restarted query commits its first
    new checkpoint epoch (it runs again), the total run time against fault-free runs, and
    whether the output equals the fault-free run exactly once. A fresh worker node replaces
    the lost one after each run.
(b) **Checkpoints on shared storage.** The same query, fault-free, with no checkpoints, with
    checkpoints on a local path and on a real S3-compatible server (moto's standalone server,
    ``s3://...?endpoint_override=...``), every 2 and every 4 batches per source: events/s,
    epochs, the bytes of one epoch (sampled while it runs) and the time to write one epoch's
    files to each storage from the driver.
(c) **Bytes between nodes per event.** W1 (``benchmarks.workloads``) with 1, 2 and 4
    partitions, deployed with ``placement="spread"``; every shell counts the bytes of each
    batch it sends (the encoded bytes plus the numpy buffers of column batches that travel
    beside them), per destination step, and the driver the bytes it feeds its source. With
    each step's node, that gives the bytes crossing between nodes per input event.

    python -m benchmarks.cluster_recovery            # the figures of benchmarks/RESULTS.md
    python -m benchmarks.cluster_recovery --quick    # small sizes, ~3 minutes
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from typing import Any

import numpy as np

from actors.shell import OperatorShell
from operators.columns import Columns
from topology.running.registry import actor_nodes

from .cluster_scaling import start_cluster


# -- the instrumented shell (c) ------------------------------------------------------------------
def wire_size(obj: Any) -> int:
    """The bytes one call carries: encoded bytes, plus the numpy buffers of column batches
    (Ray moves those beside the pickle; object arrays are pickled to measure them)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if isinstance(obj, np.ndarray):
        return obj.nbytes if obj.dtype != object else len(pickle.dumps(obj, protocol=5))
    if isinstance(obj, Columns):
        return sum(wire_size(a) for a in (obj.ids, obj.starts, obj._ends, obj.payload)
                   if a is not None)
    if isinstance(obj, dict):
        return sum(wire_size(v) for v in obj.values())
    if isinstance(obj, (tuple, list)):
        return sum(wire_size(v) for v in obj)
    return len(pickle.dumps(obj, protocol=5))


class CountingShell(OperatorShell):
    """The operator shell, counting the bytes and batches it sends to each step."""

    def _call(self, target: Any, blob: Any, barrier: bool = False,
              batch: Any = None) -> bool:
        if not barrier:
            counts = self.__dict__.setdefault("_wire", {})
            b, n = counts.get(target.dst, (0, 0))
            counts[target.dst] = (b + wire_size(blob), n + 1)
        return super()._call(target, blob, barrier, batch)

    def wire_bytes(self) -> dict[str, tuple[int, int]]:
        """Destination step -> (bytes, batches) sent so far."""
        return dict(self.__dict__.get("_wire", {}))


# -- (a) node loss -----------------------------------------------------------------------------
def _wait_source(live: Any, n: int, timeout_s: float = 300) -> int:
    """Until the first source has taken ``n`` events; returns how many it had then."""
    import ray

    source = next(s for s in live.steps if s.startswith("from_"))
    handle = live.handles[source]
    deadline = time.monotonic() + timeout_s
    while True:
        seen = ray.get(handle.stats.remote())["events_in"]
        if seen >= n:
            return int(seen)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{source} never took {n} events")
        time.sleep(0.01)


def node_loss(cluster: Any, n: int, moments: list[float], seeds: list[int],
              fault_free: int) -> list[str]:
    from tests.reliability.test_recovery import check_exactly_once, window_join
    from topology import Stream  # noqa: F401 - the builder registers its methods

    expected = window_join(n).collect(runtime="inline")
    batch = 500
    lines = [f"(a) node loss: window_join({n:,}), batch_size={batch}, checkpoint_every=2, "
             f"local checkpoint directory",
             "| run | loss at (source events; epoch committed; log entries) | "
             "steps on lost node | loss → restarted s | of which detection s | "
             "recovery_s | loss → first new epoch s | replayed | run s | output exactly once |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    base = []
    for i in range(fault_free):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            live = window_join(n).deploy(f"cr-free-{i}", checkpoint_dir=d, checkpoint_every=2,
                                         batch_size=batch)
            try:
                assert live.wait(600)
                dt = time.perf_counter() - t0
                check_exactly_once(live.output(), expected)
            finally:
                live.stop()
        base.append(dt)
        lines.append(f"| fault-free {i + 1} | – | – | – | – | – | – | – | {dt:.2f} | yes |")
        print(lines[-1], flush=True)
    head = cluster.head_node.node_id
    for seed in seeds:
        for at in moments:
            rng = random.Random(seed)
            name = f"cr-loss-{seed}-{int(at * 100)}"
            with tempfile.TemporaryDirectory() as d:
                t0 = time.perf_counter()
                live = window_join(n).deploy(name, checkpoint_dir=d, checkpoint_every=2,
                                             batch_size=batch)
                sup = live.supervisor
                try:
                    placed = actor_nodes(name)
                    workers = [w for w in cluster.worker_nodes
                               if w.node_id != head and w.node_id in placed.values()]
                    victim = rng.choice(workers)
                    lost_steps = sum(1 for v in placed.values() if v == victim.node_id)
                    seen = _wait_source(live, int(at * n))
                    st = sup.stats()
                    committed, logged = st["checkpoint_epoch"], st["logged"]
                    t_loss = time.perf_counter()
                    cluster.remove_node(victim)
                    t_removed = time.perf_counter()
                    while not sup.recovery_log() and not sup.outcome(0)[0]:
                        time.sleep(0.005)
                    t_restarted = time.perf_counter()
                    recs = sup.recovery_log()
                    rec = recs[0] if recs else None
                    t_epoch = None
                    while rec is not None and not sup.outcome(0)[0]:
                        if sup.stats()["checkpoint_epoch"] > rec["epoch"]:
                            t_epoch = time.perf_counter()
                            break
                        time.sleep(0.005)
                    assert live.wait(600)
                    dt = time.perf_counter() - t0
                    try:
                        check_exactly_once(live.output(), expected)
                        ok = "yes"
                    except AssertionError as exc:
                        ok = f"NO: {str(exc)[:80]}"
                    gone = victim.node_id not in actor_nodes(name).values()
                finally:
                    live.stop()
                    cluster.add_node(num_cpus=2)
                    cluster.wait_for_nodes()
            if rec is None:
                lines.append(f"| seed {seed} | {at:.0%} ({seen:,}; {committed}; {logged}) | "
                             f"{lost_steps} | no recovery | | | | | {dt:.2f} | {ok} |")
            else:
                first = f"{t_epoch - t_loss:.2f}" if t_epoch else "(ended first)"
                lines.append(
                    f"| seed {seed} | {at:.0%} ({seen:,}; {committed}; {logged}) | {lost_steps} | "
                    f"{t_restarted - t_loss:.2f} | "
                    f"{t_restarted - t_loss - rec['recovery_s']:.2f} | "
                    f"{rec['recovery_s']:.2f} | {first} | {rec['replayed']} | {dt:.2f} | "
                    f"{ok}{'' if gone else ' (an actor still on the lost node!)'} |")
            print(lines[-1], f"(remove_node took {t_removed - t_loss:.2f} s)", flush=True)
    lines.append(f"fault-free run s: mean {statistics.mean(base):.2f}")
    lines.append(actor_start_probe(len(window_join(n).plan().stages)))
    return lines


def actor_start_probe(k: int, repeat: int = 3) -> str:
    """Seconds to start ``k`` fresh operator shells spread over the alive nodes and have
    each answer a ping: the floor under a restart, which starts every actor of the query."""
    import ray

    from topology.running.deploy import _placement, shell_class

    times = []
    for _ in range(repeat):
        place = _placement("spread")
        t0 = time.perf_counter()
        hs = [shell_class().options(**place(f"s{i}")).remote() for i in range(k)]
        ray.get([h.ping.remote() for h in hs])
        times.append(time.perf_counter() - t0)
        for h in hs:
            ray.kill(h)
    return (f"starting {k} fresh actors spread over the nodes (until each answers a ping): "
            f"{', '.join(f'{x:.2f}' for x in times)} s")


# -- (b) checkpoint storage --------------------------------------------------------------------
def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    import pyarrow.fs as pafs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                server.terminate()
                raise RuntimeError("moto's server did not start") from None
            time.sleep(0.2)
    root = (f"s3://key:secret@cedar-bench/ckpt?endpoint_override=127.0.0.1:{port}"
            f"&scheme=http&region=us-east-1&allow_bucket_creation=true")
    fs, _ = pafs.FileSystem.from_uri(root)
    fs.create_dir("cedar-bench")
    return server, root


class EpochSampler:
    """Lists a query's checkpoint directory every ``every_s`` and keeps, per epoch, the largest
    total seen of each step's file (old epochs are deleted as newer ones commit)."""

    def __init__(self, root: str, query: str, every_s: float = 0.25) -> None:
        self.root, self.query, self.every_s = root, query, every_s
        self.sizes: dict[int, dict[str, int]] = defaultdict(dict)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import pyarrow.fs as pafs

        from actors import checkpoint as ck

        while not self.stop.wait(self.every_s):
            try:
                fs, where = ck._open(ck.query_dir(self.root, self.query))
                infos = fs.get_file_info(pafs.FileSelector(where, recursive=True,
                                                           allow_not_found=True))
            except Exception:  # noqa: BLE001 - a listing raced a deletion: try again
                continue
            for i in infos:
                parts = i.path.rsplit("/", 2)
                if i.type == pafs.FileType.File and i.path.endswith(".pkl") \
                        and parts[-2].isdigit():
                    self.sizes[int(parts[-2])][parts[-1]] = i.size

    def done(self) -> dict[int, dict[str, int]]:
        self.stop.set()
        self.thread.join()
        return {e: s for e, s in self.sizes.items() if s}


def write_time(root: str, files: dict[str, bytes], repeat: int = 3) -> float:
    """Seconds to write one epoch's files (atomically, one after the other) to ``root``."""
    from actors import checkpoint as ck
    from actors.files import atomic_write

    best = float("inf")
    for r in range(repeat):
        t0 = time.perf_counter()
        for step, blob in files.items():
            atomic_write(ck.stage_path(root, "write-probe", r + 1, step), blob)
        best = min(best, time.perf_counter() - t0)
    ck.forget(root, "write-probe")
    return best


def s3_breakdown(root: str, blob: bytes, repeat: int = 5) -> str:
    """Where one checkpoint file's write to the object store goes, as
    :func:`actors.files.atomic_write` does it: open the filesystem from the URI, make the
    folder, put a temporary object, move it into place (a copy and a delete on S3)."""
    import pyarrow.fs as pafs

    from actors import checkpoint as ck

    t: dict[str, list[float]] = defaultdict(list)
    for r in range(repeat):
        location = ck.stage_path(root, "probe", r + 1, "step")
        t0 = time.perf_counter()
        fs, where = pafs.FileSystem.from_uri(location)
        t1 = time.perf_counter()
        fs.create_dir(where.rsplit("/", 1)[0], recursive=True)
        t2 = time.perf_counter()
        with fs.open_output_stream(where + ".tmp") as f:
            f.write(blob)
        t3 = time.perf_counter()
        fs.move(where + ".tmp", where)
        t4 = time.perf_counter()
        for k, a, b in (("from_uri", t0, t1), ("create_dir", t1, t2), ("put", t2, t3),
                        ("move", t3, t4)):
            t[k].append((b - a) * 1000)
    ck.forget(root, "probe")
    return (f"one {len(blob):,}-byte file to s3 (moto), median ms of {repeat}: " + ", ".join(
        f"{k} {statistics.median(v):.1f}" for k, v in t.items()))


def storage(workloads: list[tuple[str, Any, int, int, list[int]]],
            repeat: int) -> list[str]:
    """``workloads``: (label, make the query, events, batch_size, checkpoint_every values)."""
    from actors import checkpoint as ck

    server, s3 = start_moto()
    lines = [f"(b) checkpoint storage: fault-free runs, best of {repeat}",
             "| query | checkpoints | every | events/s after deploy | deploy s | "
             "run s after deploy | epochs committed | bytes per epoch (mean) | "
             "of which the sink (mean / max) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    notes: list[str] = []
    try:
        local_dir = tempfile.mkdtemp(prefix="cedar-ckpt-")
        for wl_label, make, n, batch, everies in workloads:
            per_step: dict[str, list[int]] = defaultdict(list)
            sampled: dict[int, dict[str, int]] = {}
            runs: list[tuple[str, str | None, int]] = [("none", None, 0)]
            for every in everies:
                runs += [("local", local_dir, every), ("s3 (moto)", s3, every)]
            for label, root, every in runs:
                best, epochs, sizes, deploy = float("inf"), 0, {}, 0.0
                for r in range(repeat):
                    name = f"cr-store-{wl_label[:2]}-{label[:2]}-{every}-{r}"
                    opts = {"checkpoint_dir": root, "checkpoint_every": every} if root else {}
                    sampler = EpochSampler(ck.normalize(root), name) if root else None
                    t0 = time.perf_counter()
                    live = make().deploy(name, batch_size=batch, **opts)
                    t1 = time.perf_counter()
                    try:
                        assert live.wait(600)
                        dt = time.perf_counter() - t1
                        if dt < best:
                            deploy = t1 - t0
                        if root:
                            epochs = live.supervisor.stats()["checkpoint_epoch"]
                    finally:
                        live.stop()
                        if sampler is not None:
                            sizes = sampler.done()
                            ck.forget(ck.normalize(root), name)
                    best = min(best, dt)
                if sizes:
                    sampled = sizes if every == min(everies) else sampled
                    totals = [sum(s.values()) for s in sizes.values()]
                    sink = [v for s in sizes.values() for k, v in s.items()
                            if k.startswith("sink")] or [0]
                    per = (f"{statistics.mean(totals):,.0f} | {statistics.mean(sink):,.0f} / "
                           f"{max(sink):,}")
                    if root == local_dir:
                        for st in sizes.values():
                            for k, v in st.items():
                                per_step[k].append(v)
                else:
                    per = "– | –"
                lines.append(f"| {wl_label} | {label} | {every or '–'} | {n / best:,.0f} | "
                             f"{deploy:.2f} | {best:.2f} | {epochs or '–'} | {per} |")
                print(lines[-1], flush=True)
            if per_step:
                notes.append(f"{wl_label}: mean bytes per checkpoint file, by step (local "
                             f"runs): " + ", ".join(f"{k[:-4]} {statistics.mean(v):,.0f}"
                                                    for k, v in sorted(per_step.items())))
            # one epoch's files, as sampled from the run, written from the driver to each
            if sampled:
                epoch = max(sampled, key=lambda e: (len(sampled[e]), e))
                files = {k: os.urandom(v) for k, v in sampled[epoch].items()}
                for label, root in (("local", local_dir), ("s3 (moto)", s3)):
                    ms = write_time(ck.normalize(root), files) * 1000
                    size = sum(map(len, files.values()))
                    notes.append(f"{wl_label}: epoch {epoch}'s {len(files)} files ({size:,} "
                                 f"bytes) written from the driver to {label}: {ms:.1f} ms")
                notes.append(s3_breakdown(s3, max(files.values(), key=len)))
            for line in notes:
                print(line, flush=True)
            lines += notes
            notes = []
    finally:
        server.terminate()
        server.wait(10)
    return lines


# -- (c) bytes between nodes -------------------------------------------------------------------
def bytes_per_event(n: int, partitions: list[int]) -> list[str]:
    import ray

    import topology.running.deploy as dep
    import topology.running.feeding as feeding
    from actors.shell import ACTOR_OPTIONS
    from actors.wire import encode, encode_rows

    from . import workloads as wl
    from .cluster_scaling import w1

    dep._SHELL = ray.remote(**ACTOR_OPTIONS)(CountingShell)
    fed = [0, 0]  # bytes and batches the driver feeds its source

    def counting(enc: Any) -> Any:
        def counted(batch: Any) -> Any:
            blob = enc(batch)
            fed[0] += wire_size(blob)
            fed[1] += 1
            return blob
        return counted

    feeding.encode_rows, feeding.encode = counting(encode_rows), counting(encode)
    head = ray.get_runtime_context().get_node_id()
    cols = wl.points(n, 1_000, seed=1)
    lines = [f"(c) bytes between nodes: W1, {n:,} events (24 B of columns each), "
             f"placement='spread', batch_size={dep.DEFAULT_BATCH}",
             "| partitions | events/s | nodes used | bytes sent per input event, all edges | "
             "crossing nodes (incl. driver → source) | batches crossing nodes | "
             "largest edges crossing (B/event) |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    try:
        for k in partitions:
            fed[0] = fed[1] = 0
            name = f"cr-bytes-{k}"
            t0 = time.perf_counter()
            live = w1(wl.source(cols), k).deploy(name, placement="spread")
            try:
                assert live.wait(600)
                dt = time.perf_counter() - t0
                stats = live.stats()
                sent = {s: ray.get(h.wire_bytes.remote()) for s, h in live.handles.items()}
            finally:
                live.stop()
            node = {s: st["node"] for s, st in stats.items()}
            source = next(s for s in node if s.startswith("from_"))
            total = cross = batches = 0
            edges = []
            for src, dsts in sent.items():
                for dst, (b, nb) in dsts.items():
                    total += b
                    if node[src] != node[dst]:
                        cross += b
                        batches += nb
                        edges.append((b, f"{src}→{dst}"))
            fed_cross = fed[0] if node[source] != head else 0
            total += fed[0]
            cross += fed_cross
            batches += fed[1] if fed_cross else 0
            if fed_cross:
                edges.append((fed[0], f"driver→{source}"))
            top = ", ".join(f"{e} {b / n:.1f}" for b, e in sorted(edges, reverse=True)[:3])
            lines.append(f"| {k} | {n / dt:,.0f} | {len(set(node.values()))} | {total / n:.1f} | "
                         f"{cross / n:.1f} | {batches} | {top} |")
            print(lines[-1], flush=True)
    finally:
        dep._SHELL = None
        feeding.encode_rows, feeding.encode = encode_rows, encode
    return lines


def machine() -> str:
    import pyarrow
    import ray

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load}, "
            f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, Ray {ray.__version__}, "
            f"pyarrow {pyarrow.__version__}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (~3 minutes)")
    ap.add_argument("--only", choices=["a", "b", "c"], action="append",
                    help="run only these parts (repeatable)")
    args = ap.parse_args()
    parts = args.only or ["a", "b", "c"]
    if args.quick:
        n_loss, moments, seeds, free = 20_000, [0.5], [1], 1
        n_store, everies, repeat, n_w1_store = 20_000, [2], 1, 200_000
        n_bytes, partitions = 200_000, [1, 2]
    else:
        n_loss, moments, seeds, free = 100_000, [0.25, 0.5, 0.75], [1, 2], 3
        n_store, everies, repeat, n_w1_store = 100_000, [2, 4], 2, 2_000_000
        n_bytes, partitions = 2_000_000, [1, 2, 4]
    import ray

    out = [machine()]
    print(out[0], flush=True)
    cluster = start_cluster()
    try:
        if "a" in parts:
            out += node_loss(cluster, n_loss, moments, seeds, free)
        if "b" in parts:
            from tests.reliability.test_recovery import window_join

            from . import workloads as wl
            from .cluster_scaling import w1

            cols = wl.points(n_w1_store, 1_000, seed=1)
            # one partition: a partition's step id (group_apply#3[0]) makes a checkpoint file
            # name that pyarrow cannot parse inside an s3:// URI, and the query then hangs
            # (benchmarks/RESULTS.md, "Node loss, checkpoint storage ...")
            out += storage([(f"window_join({n_store:,})", lambda: window_join(n_store),
                             n_store, 500, everies),
                            (f"W1 ({n_w1_store:,}, 1 partition)",
                             lambda: w1(wl.source(cols), 1), n_w1_store, 4096, [1])],
                           repeat)
        if "c" in parts:
            out += bytes_per_event(n_bytes, partitions)
        out.append(machine())
    finally:
        from topology.running.deploy import release_pool

        release_pool()
        ray.shutdown()
        cluster.shutdown()
    print("\n".join(out))


if __name__ == "__main__":
    main()
