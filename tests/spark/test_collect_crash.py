"""``collect()`` over a checkpointed streaming ``from_spark`` is exactly once under kill -9
(issue #28, item 2): a run counts as delivered only when ``collect()`` has returned its rows,
so a run killed half-way -- even just after Spark committed a micro-batch -- is delivered
again whole by the next run, and the rows the runs delivered add up to the stream's, none
missing, none twice.

    run 1 (files 0-3):  [-- killed after Spark's commit of micro-batch 1 --X]  [---- done]
    run 2 (files 4-5):  [-- killed with the output gathered, not committed --X]  [-- done]
    delivered:          the rows of run 1 and of run 2, once each = the whole stream's

The child (``crash_child.py``, ``mode="collect"``) writes the rows ``collect()`` returned to a
file of its own once it returned: what a caller does with them. Before the fix the source
committed each micro-batch as the query took it, and a kill just after a commit lost every
row of the committed micro-batches (the issue measured 143, 238 and 191 rows in 3 seeds;
here the inline case lost 831 rows, micro-batches 0 and 1). The one window left is the
caller's own: between
``collect()`` returning and the caller making the rows durable (docs/spark.md).

Children are seeded (the rows) and killed at chosen points; ``CEDAR_CRASH_SEEDS=N`` (N > 2)
adds the remaining points and N // 25 random-delay seeds, inline and on Ray.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from operators.events import Insert
from operators.ingress import AdvanceTime, ingest
from tests.spark.crash_child import rows
from tests.spark.test_crash import EVENTS, FILES, SEEDS, SWEEP, finish, write_inputs

pytestmark = pytest.mark.spark


def _k(point: str, n: int) -> dict[str, Any]:
    return {"point": point, "n": n}


def collect_case(tmp: Path, runtime: str, seed: int = 1, ack: bool = False) -> dict[str, Any]:
    return {"mode": "collect", "runtime": runtime, "out": str(tmp / "out"),
            "work": str(tmp / "ckpt"), "input": str(tmp / "in"), "seed": seed,
            "events": EVENTS, "ack": ack}


def expected(seed: int) -> Counter[tuple[Any, ...]]:
    """The stream's rows as one uninterrupted run delivers them (the Ingress over every row
    in file order), filtered as the child's query filters them."""
    out = ingest(rows(seed, EVENTS), start="ts", advance=AdvanceTime(every=50))
    return Counter((m.start, m.end, m.payload["meter"], m.payload["kwh"]) for m in out
                   if type(m) is Insert and m.payload["kwh"] % 7 != 0)


def delivered(folder: str) -> tuple[Counter[tuple[Any, ...]], int]:
    """The rows of every run the child delivered, and how many runs did."""
    names = sorted(n for n in os.listdir(folder) if n.startswith("run-"))
    assert all(n.endswith(".json") for n in names), names  # no half-written file counts
    got: Counter[tuple[Any, ...]] = Counter()
    for name in names:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            got.update(tuple(r) for r in json.load(f))
    return got, len(names)


def collect_runs(tmp: Path, runtime: str, kills: list[list[Any]], seed: int = 1,
                 ack: bool = False) -> tuple[Counter[tuple[Any, ...]], int, int]:
    """Two runs of the stream (files 0-3, then 4-5 arrive), each killed as planned and
    restarted until it finishes; the rows delivered, the runs that delivered, the kills."""
    cfg = collect_case(tmp, runtime, seed, ack)
    write_inputs(tmp / "in", seed, 0, 4)
    killed = finish(cfg, tmp, kills[0])
    write_inputs(tmp / "in", seed, 4, FILES)
    killed += finish(cfg, tmp, kills[1])
    got, runs = delivered(cfg["out"])
    return got, runs, killed


def assert_exactly_once(got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]]) -> None:
    missing, extra = want - got, got - want
    assert not missing and not extra, (
        f"{sum(missing.values())} rows lost, e.g. {list(missing)[:3]}; "
        f"{sum(extra.values())} delivered twice or unknown, e.g. {list(extra)[:3]}")


def test_the_reference_is_the_stream_and_drops_rows_late() -> None:
    want = expected(1)
    # a check on the oracle: not empty, and the late policy is at work (some rows dropped)
    assert 0 < sum(want.values()) < EVENTS


@pytest.mark.parametrize("runtime,kills", [
    # run 1: Spark committed micro-batch 1 and runs micro-batch 2 (the kill);
    # run 2: the output is gathered, the run not committed yet
    ("inline", [[_k("spark.next", 3)], [_k("pair.end", 1)]]),
    pytest.param("ray", [[_k("spark.next", 2)], []], marks=pytest.mark.ray),
    *([
        # the feeder saved a micro-batch that Spark has not committed; taken, not saved
        ("inline", [[_k("feeder.saved", 2), _k("feeder.before", 3)], [_k("spark.next", 2)]]),
        # killed in the restarted run too, replaying the log of the killed one
        ("inline", [[_k("spark.next", 4), _k("spark.next", 1)], [_k("feeder.saved", 1)]]),
        pytest.param("ray", [[_k("pair.end", 1)], [_k("spark.next", 2)]],
                     marks=pytest.mark.ray),
    ] if SWEEP else []),
])
@pytest.mark.slow
def test_collect_killed_at_a_commit_delivers_every_row_once(tmp_path, runtime, kills) -> None:
    got, runs, killed = collect_runs(tmp_path, runtime, kills)
    assert_exactly_once(got, expected(1))
    assert killed == len(kills[0]) + len(kills[1])
    assert runs == 2  # the killed runs delivered nothing; each finished run once


@pytest.mark.parametrize("runtime,kills", [
    # run 1: collect() returned, the rows not stored yet; then stored, the run not committed;
    # run 2: committed (its log not deleted), nothing after it: a third, empty run follows
    ("inline", [[_k("collect.returned", 1), _k("pair.end", 1)], [_k("feeder.committed", 1)]]),
    pytest.param("ray", [[_k("collect.returned", 1)], [_k("pair.end", 1)]],
                 marks=pytest.mark.ray),
])
@pytest.mark.slow
def test_collect_committed_by_the_caller_loses_no_row_at_any_kill(tmp_path, runtime,
                                                                  kills) -> None:
    """``collect()`` committed the run just before it returned, so a kill between its commit
    and the hand-over lost the run's rows: committed, never returned, not late (issue #41,
    item 3). The commit is now ``collect()``'s last act, and ``collect(commit=False)`` leaves
    it to the caller, after it stored the rows under ``out.run``: a run killed before the
    commit is delivered again under the same token, which replaces its file, and a kill
    anywhere loses no row and duplicates none."""
    got, _, killed = collect_runs(tmp_path, runtime, kills, ack=True)
    assert_exactly_once(got, expected(1))
    assert killed == len(kills[0]) + len(kills[1])
    names = sorted(os.listdir(tmp_path / "out"))
    assert names[:2] == ["run-000000.json", "run-000001.json"], names
    log = tmp_path / "ckpt" / "cedar_run"  # nothing held: no log left behind
    assert not log.exists() or not os.listdir(log), os.listdir(log)


@pytest.mark.skipif(not SWEEP, reason="the random sweep of collect() runs with "
                                      "CEDAR_CRASH_SEEDS>2")
@pytest.mark.parametrize("seed", range(max(1, SEEDS // 25)))
@pytest.mark.parametrize("runtime", ["inline", pytest.param("ray", marks=pytest.mark.ray)])
def test_collect_killed_at_random_moments(tmp_path, runtime, seed) -> None:
    rng = random.Random(seed)
    # a Spark child spends its first ~6 s (more on a loaded machine) starting Spark, and its
    # run ends ~13 s in (crash_child.JVM_OPTIONS)
    plan = [[("run", rng.uniform(3.0, 15.0)) for _ in range(2)] for _ in range(2)]
    got, _, _ = collect_runs(tmp_path, runtime, plan, seed=seed + 1)
    assert_exactly_once(got, expected(seed + 1))


# -- killed twice in each run: the union of the runs is one clean run (issue #41, item 3) -------
def _inserts(rows_: Any) -> list[Insert]:
    return [Insert(i, start, end, {"meter": meter, "kwh": kwh})
            for i, (start, end, meter, kwh) in enumerate(rows_)]


def clean_runs(spark: Any, tmp: Path, seed: int) -> list[Insert]:
    """The same two runs (files 0-3, then 4-5), fault-free, in this process: the inserts of
    both ``collect()`` calls."""
    from tests.spark.crash_child import SCHEMA, collect_query
    from topology import Stream

    out: list[Insert] = []
    tmp.mkdir()
    for first, last in ((0, 4), (4, FILES)):
        write_inputs(tmp / "in", seed, first, last)
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(
            str(tmp / "in"))
        src = Stream.from_spark(df, start="ts", advance=AdvanceTime(every=50),
                                checkpoint=str(tmp / "ckpt"))
        out += [m for m in collect_query(src).collect(runtime="inline") if type(m) is Insert]
    # the fields the child keeps of each insert (``ts`` is the start)
    return _inserts((m.start, m.end, m.payload["meter"], m.payload["kwh"]) for m in out)


@pytest.mark.slow
# the kill plan is fixed and only the rows differ between seeds: one in CI, more in the sweep
@pytest.mark.parametrize("seed", [1, 2, 3] if SWEEP else [1])
def test_collect_killed_twice_per_run_unites_to_one_clean_run(spark, tmp_path, seed) -> None:
    """Each run is killed twice before it finishes, so each restart replays the micro-batches
    the killed runs logged, then what Spark had not committed:

        run 1 (files 0-3):  [0 1 X]  [replay 0 1 | 2 X]  [replay 0 1 2 | 3 done]
        run 2 (files 4-5):  [4 saved X]  [replay 4 | 5 ... X before the commit]  [replay 4 5 done]
        union of the two delivered runs  ==  the two runs without a kill   (as CHTs)

    A replay out of the original order puts a file behind a later file's CTI, where the
    Ingress drops it as late: accounted for, yet in no run's output."""
    from operators.cht import check_equivalent

    kills = [[_k("spark.next", 3), _k("spark.next", 2)],
             [_k("feeder.saved", 1), _k("pair.end", 1)]]
    (tmp_path / "killed").mkdir()
    got, runs, killed = collect_runs(tmp_path / "killed", "inline", kills, seed=seed)
    assert killed == 4 and runs == 2
    union = _inserts(got.elements())
    clean = clean_runs(spark, tmp_path / "clean", seed)
    check_equivalent(union, clean)
    assert_exactly_once(got, expected(seed))  # and the clean runs are the stream, file order


# -- many small files, stamped by the clock: the union is the stream in Spark's order -----------
SMALL_FILES, SMALL_ROWS = 24, 48


def write_small_files(folder: Path, seed: int, first: int, last: int) -> None:
    """Files ``first``..``last - 1`` of ``SMALL_ROWS`` rows, written back to back and left
    with the modification times the clock gave them: several share a millisecond, and Spark
    takes those in the order the folder lists them, not by name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = rows(seed, SMALL_FILES * SMALL_ROWS)
    schema = pa.schema([("meter", pa.int32()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("kwh", pa.int64())])
    folder.mkdir(exist_ok=True)
    for i in range(first, last):
        part = data[i * SMALL_ROWS:(i + 1) * SMALL_ROWS]
        table = pa.table({k: [r[k] for r in part] for k in ("meter", "ts", "kwh")},
                         schema=schema)
        pq.write_table(table, folder / f".part-{i:03d}.parquet")
        os.replace(folder / f".part-{i:03d}.parquet", folder / f"part-{i:03d}.parquet")


def spark_file_order(checkpoint: Path) -> list[int]:
    """The files in the order Spark's file source gave them to the micro-batches, from its
    log (``sources/0``: one JSON line per file, with its ``batchId``)."""
    log = checkpoint / "sources" / "0"
    batch: dict[str, int] = {}
    for name in os.listdir(log):
        if name.startswith("."):
            continue
        for line in (log / name).read_text().splitlines():
            if line.startswith("{"):
                entry = json.loads(line)
                batch[entry["path"]] = entry["batchId"]
    return [int(p.rsplit("part-", 1)[1][:3]) for p in sorted(batch, key=lambda p: batch[p])]


@pytest.mark.slow
@pytest.mark.ray
def test_collect_on_ray_killed_twice_per_run_delivers_the_stream_in_sparks_order(
        tmp_path) -> None:
    """Issue #41, item 3, as the issue ran it: many small files (24 of 48 rows, one per
    micro-batch) stamped by the clock, on Ray, each run killed twice (replays of the logged
    micro-batches, then Spark's uncommitted one). Whole files were missing because Spark took
    files of the same millisecond out of name order, and the Ingress dropped the earlier file
    behind the later one's CTI, in any run, killed or not (docs/spark.md, "Arrival order is
    Spark's"). What cedar owes is the stream in the order Spark delivered it: the rows of the
    runs together are exactly the Ingress over the files in Spark's batch order."""
    cfg = {**collect_case(tmp_path, "ray"), "events": SMALL_FILES * SMALL_ROWS}
    kills = [[_k("spark.next", 6), _k("spark.next", 3)],
             [_k("feeder.saved", 2), _k("spark.next", 4)]]
    killed = 0
    for (first, last), plan in zip(((0, 12), (12, SMALL_FILES)), kills):
        write_small_files(tmp_path / "in", 1, first, last)
        killed += finish(cfg, tmp_path, plan)
    assert killed == 4
    got, runs = delivered(cfg["out"])
    assert runs == 2
    order = spark_file_order(tmp_path / "ckpt")
    assert sorted(order) == list(range(SMALL_FILES))
    data = rows(1, SMALL_FILES * SMALL_ROWS)
    stream = [r for i in order for r in data[i * SMALL_ROWS:(i + 1) * SMALL_ROWS]]
    want = Counter((m.start, m.end, m.payload["meter"], m.payload["kwh"])
                   for m in ingest(stream, start="ts", advance=AdvanceTime(every=50))
                   if type(m) is Insert and m.payload["kwh"] % 7 != 0)
    assert_exactly_once(got, want)
