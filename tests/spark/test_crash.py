"""Exactly once under real crashes: a query runs in a child process (``crash_child.py``) that is
killed with ``SIGKILL`` -- after a random delay, or at a chosen moment inside the engine --
and started again on the same output path (and checkpoint) until it finishes. The committed
output, read with pyarrow as any reader would, must equal the fault-free run's: no row twice,
none missing, no stray file left behind.

    child run:   [---- killed ----X]  [-- killed --X]  [------------- done]
    output:      epoch files appear atomically, each with its commit; after the last run
                 the table equals the fault-free one, row for row.

The default sizes keep the file around a minute and a half of CI on a quiet machine (a Spark
child costs ~6 s of start-up). ``CEDAR_CRASH_SEEDS=N`` (N > 2) runs the sweep: every chosen
kill point, N random-delay seeds inline, N // 10 on Ray and N // 25 for the streaming source;
``CEDAR_CRASH_REPORT=FILE`` appends one JSON line per killed child (case, kill, epochs committed
when it died) for the figures in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.spark.crash_child import SCHEMA, rows

REPO = str(Path(__file__).resolve().parents[2])
#: Seeds of the random-delay sweep inline (see the module doc for Ray and the pair).
SEEDS = int(os.environ.get("CEDAR_CRASH_SEEDS", "2"))
SWEEP = SEEDS > 2
REPORT = os.environ.get("CEDAR_CRASH_REPORT")
#: Kills per seed in the random-delay sweep, before the run is left to finish.
KILLS = 3
EVENTS = 3000
#: A child that neither finishes nor is killed within this is a hang (seconds).
CHILD_TIMEOUT_S = 300


# -- the child -----------------------------------------------------------------------------------
def launch(cfg: dict[str, Any], tmp: Path, kill: dict[str, Any] | None = None,
           delay_s: float | None = None, phase: str = "run") -> tuple[int, float, float, str]:
    """Run the child once: its exit status (``-9``: killed), its duration, how long it wrote
    (from its ``writing`` line to its ``done`` line, when not killed) and its stderr. With
    ``delay_s`` the child (and everything it started, e.g. Ray) is killed that long after its
    start (``phase="run"``) or after it starts writing (``phase="write"``)."""
    config = tmp / f"child-{time.monotonic_ns()}.json"
    config.write_text(json.dumps({**cfg, "kill": kill}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)}
    began = time.monotonic()
    errors = tmp / f"child-{time.monotonic_ns()}.err"
    with open(errors, "wb") as err_file:
        child = subprocess.Popen([sys.executable, "-m", "tests.spark.crash_child",
                                  str(config)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                 stderr=err_file, start_new_session=True)
    writing, wrote = None, 0.0
    try:
        assert child.stdout is not None
        if phase == "write" or delay_s is None:
            line = child.stdout.readline()  # "writing", or "" if it died or never wrote
            writing = time.monotonic() if line.strip() == b"writing" else None
        if delay_s is None and writing is not None:
            child.stdout.readline()  # "done": the writing is over (the exit comes after)
            wrote = time.monotonic() - writing
        wait = delay_s
        try:
            child.wait(timeout=wait if wait is not None else CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            if wait is None:
                raise AssertionError(f"the child hung for {CHILD_TIMEOUT_S} s") from None
            os.kill(child.pid, signal.SIGKILL)  # the crash
            child.wait(timeout=CHILD_TIMEOUT_S)
    finally:
        _end_group(child)  # what the child started (Ray's processes) dies with it
        if child.stdout is not None:
            child.stdout.close()
    return child.returncode, time.monotonic() - began, wrote, errors.read_text(errors="replace")


def _end_group(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def finish(cfg: dict[str, Any], tmp: Path, kills: list[Any]) -> int:
    """Start the child once per planned kill (a kill point ``{"point", "n"}``, or
    ``(phase, seconds)``: a delay from the start of the run or of its writing), then until it
    finishes; how many runs were killed."""
    killed = 0
    for plan in kills:
        point = plan if isinstance(plan, dict) else None
        phase, delay = ("run", None) if point is not None else plan
        rc, _, _, err = launch(cfg, tmp, kill=point, delay_s=delay, phase=phase)
        if rc == 0:
            return killed  # finished before the kill came
        assert rc == -signal.SIGKILL, f"the child failed (status {rc}):\n{err[-3000:]}"
        killed += 1
        if REPORT:
            out = Path(cfg["out"])
            epochs = len([p for p in out.iterdir() if p.name.startswith("epoch-")]) \
                if out.exists() else 0
            with open(REPORT, "a", encoding="utf-8") as f:
                f.write(json.dumps({"case": f"{cfg['mode']}-{cfg['runtime']}",
                                    "kill": plan, "epochs": epochs}) + "\n")
    rc, _, _, err = launch(cfg, tmp)
    assert rc == 0, f"the restarted child failed (status {rc}):\n{err[-3000:]}"
    return killed


def output(path: str) -> list[tuple[Any, ...]]:
    """The committed rows, read with pyarrow (it skips ``_`` and ``.`` files, as Spark does),
    sorted; and no file is left that is neither committed nor the log."""
    names = sorted(os.listdir(path))
    assert all(n.startswith("epoch-") or n == "_cedar_commits.json" for n in names), names
    table = pq.read_table(path)
    return sorted(tuple(r.values()) for r in table.to_pylist())


def same(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    dupes = [r for r, k in Counter(got).items() if k > 1]
    assert not dupes, f"{len(dupes)} rows written twice, e.g. {dupes[:3]}"
    missing = Counter(want) - Counter(got)
    extra = Counter(got) - Counter(want)
    assert not missing and not extra, (f"{sum(missing.values())} rows missing, e.g. "
                                       f"{list(missing)[:3]}; {sum(extra.values())} extra, "
                                       f"e.g. {list(extra)[:3]}")


# -- 1. to_spark_stream, replayed from the beginning -----------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], float, float]:
    """The fault-free child run's output (checked against the query's CHT computed here), how
    long the run took and how long it wrote."""
    from operators.cht import to_cht
    from tests.spark.crash_child import query, sink_source
    from topology.spark.sink import cht_to_arrow

    tmp = tmp_path_factory.mktemp("reference")
    cfg = {"mode": "sink", "runtime": "inline", "out": str(tmp / "out"),
           "work": str(tmp / "work"), "seed": 1, "events": EVENTS}
    rc, took, wrote, err = launch(cfg, tmp)
    assert rc == 0 and wrote > 0, err
    got = output(cfg["out"])
    cht = to_cht(query(sink_source(cfg)).collect(runtime="inline"))
    same(got, sorted(tuple(r.values()) for r in cht_to_arrow(cht).to_pylist()))
    return got, took, wrote


def sink_case(tmp: Path, runtime: str) -> dict[str, Any]:
    return {"mode": "sink", "runtime": runtime, "out": str(tmp / "out"),
            "work": str(tmp / "ckpt"), "seed": 1, "events": EVENTS}


@pytest.mark.parametrize("point,n", [
    ("sink.tmp", 17), ("sink.file", 1), ("sink.file", 30), ("sink.log", 59),
    *([("sink.tmp", 1), ("sink.log", 12), ("sink.file", 60)] if SWEEP else [])])
def test_inline_sink_killed_at_a_chosen_point(tmp_path, reference, point, n) -> None:
    cfg = sink_case(tmp_path, "inline")
    # killed at the n-th call, then at the first one of the restarted run
    assert finish(cfg, tmp_path, [{"point": point, "n": n}, {"point": point, "n": 1}]) == 2
    same(output(cfg["out"]), reference[0])


def random_kills(rng: random.Random, took: float, wrote: float) -> list[tuple[str, float]]:
    """``KILLS`` random moments: each at a random delay into the run or (as often) into its
    writing (a child spends most of its time starting; the writing is short)."""
    return [("run", rng.uniform(0.0, took)) if rng.random() < 0.5 else
            ("write", rng.uniform(0.0, wrote)) for _ in range(KILLS)]


@pytest.mark.parametrize("seed", range(SEEDS))
def test_inline_sink_killed_at_random_moments(tmp_path, reference, seed) -> None:
    rng = random.Random(seed)
    cfg = sink_case(tmp_path, "inline")
    finish(cfg, tmp_path, random_kills(rng, reference[1], reference[2]))
    same(output(cfg["out"]), reference[0])


@pytest.mark.slow
@pytest.mark.ray
def test_ray_sink_killed_at_chosen_points_and_at_random(tmp_path, reference) -> None:
    """On Ray the child starts its own local instance; the kill takes it down too."""
    cfg = sink_case(tmp_path, "ray")
    killed = finish(cfg, tmp_path, [{"point": "sink.file", "n": 7},
                                    {"point": "sink.tmp", "n": 30}])
    assert killed == 2
    same(output(cfg["out"]), reference[0])


@pytest.mark.ray
@pytest.mark.skipif(not SWEEP, reason="the random sweep on Ray runs with CEDAR_CRASH_SEEDS>2")
@pytest.mark.parametrize("seed", range(max(1, SEEDS // 10)))
def test_ray_sink_killed_at_random_moments(tmp_path, reference, seed) -> None:
    rng = random.Random(seed)
    cfg = sink_case(tmp_path, "ray")
    finish(cfg, tmp_path, random_kills(rng, 12.0, 1.0))
    same(output(cfg["out"]), reference[0])


def test_sink_runs_of_a_resumed_source(tmp_path) -> None:
    """run 0:    a [0, 2)  b [1, ∞)  Cti(3)  end()  -> epoch (0, 3): a   epoch (0, ∞): b
    replay 0:  the same stream                   -> nothing: run 0 committed its end
    run 1:     c [4, 6)  Cti(7)  end()            -> epoch (1, 7): c  (its CTIs start again)"""
    from operators.events import MAX_TIME, Cti, Insert
    from topology.spark.sink import FinalRowsSink

    path = str(tmp_path / "out")
    run0 = [Insert("a", 0, 2, 1), Insert("b", 1, MAX_TIME, 2), Cti(3)]
    first = FinalRowsSink(None, path, run=0)
    first.on_messages(run0)
    first.end()
    assert first.epochs_written == 2
    replay = FinalRowsSink(None, path, run=0)
    replay.on_messages(run0)
    replay.end()
    assert replay.epochs_written == 0
    second = FinalRowsSink(None, path, run=1)
    second.on_messages([Insert("c", 4, 6, 3), Cti(7)])
    second.end()
    assert second.epochs_written == 1
    assert [r[-1] for r in output(path)] == [1, 2, 3]
    with pytest.raises(ValueError, match="run 1 of its source, which is at run 0"):
        FinalRowsSink(None, path, run=0)


# -- 2. a streaming Spark source (with restart state) into the sink ------------------------------
FILES = 6


def write_inputs(folder: Path, seed: int, first: int, last: int) -> None:
    """Files ``first``..``last - 1`` of the input, written atomically (one micro-batch each)."""
    data = rows(seed, EVENTS)
    per = len(data) // FILES
    schema = pa.schema([("meter", pa.int32()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("kwh", pa.int64())])
    folder.mkdir(exist_ok=True)
    assert SCHEMA.startswith("meter INT, ts TIMESTAMP, kwh BIGINT")
    for i in range(first, last):
        part = data[i * per:(i + 1) * per]
        table = pa.table({"meter": [r["meter"] for r in part], "ts": [r["ts"] for r in part],
                          "kwh": [r["kwh"] for r in part]}, schema=schema)
        tmp = folder / f".part-{i:03d}.parquet"
        pq.write_table(table, tmp)
        os.utime(tmp, (1_000_000 + i, 1_000_000 + i))  # Spark orders new files by time
        os.replace(tmp, folder / f"part-{i:03d}.parquet")


def pair_case(tmp: Path) -> dict[str, Any]:
    return {"mode": "pair", "runtime": "inline", "out": str(tmp / "out"),
            "work": str(tmp / "ckpt"), "input": str(tmp / "in"), "seed": 1, "events": EVENTS}


def pair_runs(tmp: Path, kills: list[list[Any]]) -> tuple[list[tuple[Any, ...]], int]:
    """Two runs of the stream (files 0-3 are there for the first, 4-5 arrive before the
    second), each killed as planned and restarted until it finishes; the output and how many
    kills landed."""
    cfg = pair_case(tmp)
    write_inputs(tmp / "in", cfg["seed"], 0, 4)
    killed = finish(cfg, tmp, kills[0])
    write_inputs(tmp / "in", cfg["seed"], 4, FILES)
    killed += finish(cfg, tmp, kills[1])
    return output(cfg["out"]), killed


@pytest.fixture(scope="module")
def pair_reference(spark, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The same two runs, fault-free, in this process (the session's SparkSession)."""
    from operators.ingress import AdvanceTime
    from tests.spark.crash_child import query
    from topology import Stream

    tmp = tmp_path_factory.mktemp("pair-reference")
    cfg = pair_case(tmp)

    def run() -> None:
        df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(cfg["input"]))
        src = Stream.from_spark(df, start="ts", advance=AdvanceTime(every=50),
                                checkpoint=cfg["work"])
        query(src).to_spark_stream(cfg["out"], runtime="inline")

    write_inputs(tmp / "in", cfg["seed"], 0, 4)
    run()
    first = output(cfg["out"])
    write_inputs(tmp / "in", cfg["seed"], 4, FILES)
    run()
    got = output(cfg["out"])
    assert first and len(got) > len(first)  # the second run appended its own rows
    return got


def _k(point: str, n: int) -> dict[str, Any]:
    return {"point": point, "n": n}


@pytest.mark.spark
@pytest.mark.parametrize("kills", [
    # run 1: a micro-batch saved by the feeder and not committed by Spark; then an epoch
    # renamed but not committed. Run 2: Spark committed a micro-batch and is on the next; then
    # the sink committed the run's end and the feeder has not committed the run.
    [[_k("feeder.saved", 2), _k("sink.file", 3)], [_k("spark.next", 2), _k("pair.end", 1)]],
    *([
        # a micro-batch taken, not saved; the run's end; an epoch's temp file not renamed
        [[_k("feeder.before", 2), _k("pair.end", 1)], [_k("sink.tmp", 2)]],
        # right after a commit, in both runs
        [[_k("sink.log", 4)], [_k("sink.log", 1), _k("feeder.before", 1)]],
    ] if SWEEP else []),
])
@pytest.mark.slow
def test_streaming_source_and_sink_killed_at_chosen_points(tmp_path, pair_reference,
                                                           kills) -> None:
    got, killed = pair_runs(tmp_path, kills)
    assert killed == len(kills[0]) + len(kills[1])
    same(got, pair_reference)


@pytest.mark.spark
@pytest.mark.skipif(not SWEEP, reason="the random sweep of the pair runs with "
                                      "CEDAR_CRASH_SEEDS>2")
@pytest.mark.parametrize("seed", range(max(1, SEEDS // 25)))
def test_streaming_source_and_sink_killed_at_random_moments(tmp_path, pair_reference,
                                                            seed) -> None:
    rng = random.Random(seed)
    # a Spark child spends its first ~6 s (more on a loaded machine) starting Spark, and its
    # run ends ~13 s in (crash_child.JVM_OPTIONS)
    plan = [[("run", rng.uniform(3.0, 12.0)), ("write", rng.uniform(0.0, 0.5))]
            for _ in range(2)]
    same(pair_runs(tmp_path, plan)[0], pair_reference)
