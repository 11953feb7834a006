"""The upgrade check (:mod:`topology.seeing.cutover`) on savepoints written here, inline: the
old query run for some rounds in one process, each step's state written as a savepoint
holds it (tests/deploy/test_upgrade_check.py takes real ones on Ray).

    rows:      r0 ... |cut after k rounds| ...
    old query: rows ─ group_apply(k: tumbling(1000) sum of v, speculative) ─ sink
               at the cut the sink holds the open windows' rows, alive past its CTI C;
               the restored run retracts and re-inserts them as rows come

    the same query, cut anywhere           → equal
    a select after the window (new field)  → equal: the restored run retracts the old rows
                                             through the select, the sink with their old
                                             payloads (Publish.upgraded)
    a where before the window (fewer rows) → DIFFERENT: the windows open at the cut, with
                                             their times shown as times
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import time

import pytest

from actors import checkpoint as ck
from actors.savepoints import record_location, step_location
from operators.events import Insert, Retract
from operators.feeds import round_robin
from topology import AdvanceTime, Stream, Sum
from topology.planning.dag import DagProcessor
from topology.planning.plan import own_fingerprints, step_fingerprints
from topology.running.inline import source_batches
from topology.running.upgrades import FRESH, KEEPS, REFUSED, UNCHANGED
from topology.seeing.cutover import _run, check_upgrade, cut_output

BATCH = 50
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def rows(n: int = 600, times: bool = False) -> list[dict]:
    """a row every 10 ticks (or 10 ms from T0), 3 keys"""
    return [{"t": T0 + dt.timedelta(milliseconds=10 * i) if times else i * 10, "k": i % 3,
             "v": i % 13} for i in range(n)]


def spec(data, pred=None, size: int = 1_000, emit: str = "speculative") -> Stream:
    """rows ─ [where(pred)] ─ group_apply(k: tumbling(size) sum of v) ─ sink"""
    s = Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH))
    s = s.where(pred) if pred is not None else s.where(lambda r: r["v"] >= 0)
    return s.group_apply(lambda r: r["k"],
                         lambda g: g.tumbling_window(size, emit=emit).aggregate(Sum("v")))


def savepoint(stream: Stream, where: str, rounds: int) -> None:
    """Write the savepoint of ``stream`` cut after ``rounds`` batches of its source, as
    :func:`actors.savepoints.take` writes one (each step's state, then the record)."""
    plan = stream.plan()
    dag = DagProcessor(plan)
    feeds = [source_batches(plan, s, BATCH) for s in dag.inputs]
    for round_ in itertools.islice(round_robin(feeds), rounds):
        for port, batch in round_:
            dag.process(batch, port)
    for step, proc in dag.procs.items():
        ck.save(step_location(where, step), {"proc": proc.snapshot()})
    ck.save(record_location(where), {
        "query": "q", "epoch": 1, "rounds": rounds, "output_position": 0, "batch_size": BATCH,
        "steps": list(plan.stages), "sink": plan.sink, "fingerprints": step_fingerprints(plan),
        "own_fingerprints": own_fingerprints(plan), "fingerprint": None, "taken": time.time()})


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_the_same_query_is_equal_wherever_it_is_cut(tmp_path, emit):
    for rounds in range(1, 12):
        where = str(tmp_path / f"{emit}-{rounds}")
        savepoint(spec(rows(), emit=emit), where, rounds)
        report = check_upgrade(spec(rows(), emit=emit), where)
        assert report.ok, (rounds, report.describe())
    alive, _ = cut_output(where, report.record)
    if emit == "speculative":  # the open windows' rows straddle the cut: continued, equal
        assert any(type(m) is Insert for m in alive)


def test_a_select_after_a_speculative_window_retracts_the_old_rows_as_they_were_emitted(
        tmp_path):
    """The rows alive at the cut went out with the old payloads; the restored run's window
    retracts them through the new select, and the sink (restored ``upgraded``) sends each
    retraction with its row's payload as emitted: a valid stream, equal from the cut-over."""
    savepoint(spec(rows()), str(tmp_path), 5)
    new = spec(rows()).select(lambda r: (r[0], r[1], 2 * r[1]))
    report = check_upgrade(new, str(tmp_path))
    assert {f.step: f.verdict for f in report.fates}["select#3"] == FRESH
    assert {f.step: f.verdict for f in report.fates}["sink"] == KEEPS
    assert report.ok, report.describe()
    alive, _ = cut_output(str(tmp_path), report.record)
    emitted = {m.id: m.payload for m in alive if type(m) is Insert}
    restored = _run(new.plan(), BATCH, (str(tmp_path), report.record, report.fates))
    again = [m for m in restored if type(m) is Retract and m.id in emitted]
    assert again and all(m.payload == emitted[m.id] for m in again)
    # the sink not told of the upgrade: the retractions carry the new select's payloads
    sink_fate = next(f for f in report.fates if f.step == "sink")
    plain = [f if f is not sink_fate else dataclasses.replace(f, verdict=UNCHANGED)
             for f in report.fates]
    broken = _run(new.plan(), BATCH, (str(tmp_path), report.record, plain))
    assert any(type(m) is Retract and m.id in emitted and m.payload != emitted[m.id]
               for m in broken)
    # after a final window the old rows are over at the cut: equal
    savepoint(spec(rows(), emit="final"), str(tmp_path / "f"), 5)
    assert check_upgrade(spec(rows(), emit="final").select(
        lambda r: (r[0], r[1], 2 * r[1])), str(tmp_path / "f")).ok


def test_a_where_that_drops_rows_before_a_kept_window_differs_shown_in_times(tmp_path):
    second = 1_000_000  # ticks: µs under timestamps
    savepoint(spec(rows(times=True), size=second), str(tmp_path), 5)
    report = check_upgrade(spec(rows(times=True), lambda r: r["v"] < 5, size=second),
                           str(tmp_path))
    assert {f.step: f.verdict for f in report.fates}["group_apply#2"] == KEEPS
    said = report.verdict()
    assert report.equal is False and report.valid, said
    assert "DIFFERENT: the upgraded query's output from the cut-over (2026-01-01T00:00:" in said
    assert "    [2026-01-01T00:00:" in said and "only in the from-scratch run's output" in said
    assert "group_apply#2" in said


def test_a_refused_step_is_not_run_and_a_one_shot_source_cannot_be_checked(tmp_path):
    savepoint(spec(rows()), str(tmp_path), 5)
    report = check_upgrade(spec(rows(), size=2_000), str(tmp_path))
    assert report.equal is None and not report.ok
    assert {f.step: f.verdict for f in report.fates}["group_apply#2"] == REFUSED
    assert report.verdict().startswith("not checked: group_apply#2 refused")
    with pytest.raises(ValueError, match=r"source 'from_rows#0' cannot be read again .* "
                                         r"one-shot iterator"):
        check_upgrade(spec(iter(rows())), str(tmp_path))
    with pytest.raises(ValueError, match="no savepoint there"):
        check_upgrade(spec(rows()), str(tmp_path / "none"))


def two_sources(data, pred) -> Stream:
    """rows ─ group_apply(k, partitions=2: tumbling sum) ─ merge ─┐
       rows (the same) ─ where(pred) ──────────────────────────────┴ union ─ sink"""
    sums = Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).group_apply(
        lambda r: r["k"], lambda g: g.tumbling_window(1_000, emit="final").aggregate(Sum("v")),
        partitions=2)
    return sums.union(Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH))
                      .where(pred))


def even(r):
    return r["v"] % 2 == 0


def test_two_sources_and_partitions_are_equal_and_a_union_keeping_old_rows_is_caught(
        tmp_path):
    """Two sources fed in turn, a partitioned group_apply: equal wherever cut. With the
    where changed, the rows the old where let through before the cut (emitted past the
    output's CTI, or held in the union until the other input's CTI passes them) are in the
    upgraded output and not in the from-scratch one."""
    for rounds in (1, 4, 9):
        savepoint(two_sources(rows(), even), str(tmp_path / str(rounds)), rounds)
        assert check_upgrade(two_sources(rows(), even), str(tmp_path / str(rounds))).ok
    report = check_upgrade(two_sources(rows(), lambda r: r["v"] % 2 == 1), str(tmp_path / "9"))
    assert {f.step: f.verdict for f in report.fates}["union#4"] == KEEPS
    assert report.equal is False and report.valid, report.describe()
