"""Rescaling (issue 39, item 4): a deployed ``group_apply(..., key_groups=G)`` stopped with a
savepoint and deployed again at another ``partitions`` gives the output of one run.

    1st run (2 partitions):  [-- rows fed --] stop(savepoint=P)
    2nd run (4 partitions):                   deploy(restore=P): key groups dealt to 4
    3rd run (2 partitions):                                      ... and back to 2
    output:  the three runs' output together == one uninterrupted run (CHT; final rows one
             for one)

The windows are speculative: a window open at a cut is retracted by the next run, under the id
the partition before the cut gave it (ids are tagged by key group, not by partition), so the
runs' output together is a valid stream whose CHT is the uninterrupted one.
"""

from __future__ import annotations

import functools

import pytest

from operators.cht import to_cht, validate
from tests.deploy.test_savepoint import BATCH, N, inserted, rows, slow_rows, wait_rows
from topology import AdvanceTime, Stream, Sum
from topology.spark.held_runs import Batches

GROUPS = 8


def query(data, partitions: int, emit: str = "speculative", groups: int | None = GROUPS
          ) -> Stream:
    """rows ─ group_apply(k, partitions, key_groups=8: tumbling(1000) sum of v) ─ sink"""
    return Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).group_apply(
        lambda r: r["k"], lambda g: g.tumbling_window(1_000, emit=emit).aggregate(Sum("v")),
        partitions=partitions, key_groups=groups)


def slow() -> Batches:
    return Batches(functools.partial(slow_rows, N), feed="host")


def run_in_parts(widths: list[int], tmp_path, name: str, emit: str = "speculative") -> list:
    """Deploy at ``widths[0]``, cut with a savepoint every N / len(widths) rows, deploy the
    rest at the next width; every run's output, in order."""
    ckpt = str(tmp_path / "ckpt")
    out: list = []
    restore = None
    for i, width in enumerate(widths):
        live = query(slow(), width, emit).deploy(name, checkpoint_dir=ckpt, batch_size=BATCH,
                                                 checkpoint_every=4, restore=restore)
        try:
            if i == len(widths) - 1:
                assert live.wait(90)
                out.append(live.output())
                live.stop()
                break
            wait_rows(live, N * (i + 1) // len(widths))
            restore = str(tmp_path / f"savepoint{i}")
            record = live.stop(savepoint=restore)
            assert record is not None
            out.append(live.output())
        except BaseException:
            live.stop()
            raise
    assert all(out), "a cut fell at an end: the test proves nothing"
    return out


@pytest.mark.slow  # (the default tier: the verdicts and the check of a real savepoint)
@pytest.mark.parametrize("widths", [[2, 4, 2], [1, 3]])
def test_rescaled_and_back_gives_the_uninterrupted_output(ray_session, tmp_path, widths):
    parts = run_in_parts(widths, tmp_path, f"rescale-{len(widths)}")
    every = [m for p in parts for m in p]
    validate(every, name="the runs' output together")  # retractions find their inserts
    assert sorted(to_cht(every)) == sorted(to_cht(query(rows(), 1).collect(runtime="inline")))


@pytest.mark.slow
def test_final_rows_are_neither_lost_nor_doubled(ray_session, tmp_path):
    parts = run_in_parts([2, 4], tmp_path, "rescale-final", emit="final")
    got = inserted([m for p in parts for m in p])
    assert max(got.values()) == 1
    assert got == inserted(query(rows(), 2, emit="final").collect(runtime="inline"))


def test_upgrade_shows_the_rescale_and_other_key_groups_are_refused(ray_session, tmp_path,
                                                                        capsys):
    from topology.running.savepoints import check
    from topology.running.upgrades import RESCALED, match

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = query(slow(), 2).deploy("rescale-shown", checkpoint_dir=ckpt, batch_size=BATCH)
    try:
        wait_rows(live, BATCH)
        live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    wide = query(rows(), 4).plan()
    record = check(wide, "rescale-shown", point, None)
    fates = {f.step: f for f in match(wide, record, point)}
    parts = [s for s in wide.stages if s.endswith("]")]
    assert [fates[s].verdict for s in parts] == [RESCALED] * 4
    assert fates[parts[3]].regroup == (parts[0], parts[1])  # the two partitions then
    assert sorted(record["made"]) == parts
    # and `cedar upgrade --check` restores the regrouped state too: equal to a run from scratch
    from topology.seeing.cutover import check_upgrade

    assert check_upgrade(query(rows(), 4), point).equal is True
    # the same query in the default 128 key groups, not 8: refused, saying why
    with pytest.raises(ValueError, match="in as many key groups as at its first start"):
        check(query(rows(), 4, groups=None).plan(), "rescale-shown", point, None)


def rescaled_while_running(name: str, tmp_path, width: int, at: int,
                           check=lambda wider: None, groups: int | None = GROUPS) -> None:
    """Deploy the query at 2 partitions, ``Query.rescale`` it to ``width`` once ``at`` rows
    are in, ``check(the new query)``, and compare the output before and after together with
    one run's."""
    live = query(slow(), 2, groups=groups).deploy(name, checkpoint_dir=str(tmp_path / "ckpt"),
                                                  batch_size=BATCH, checkpoint_every=4)
    try:
        wait_rows(live, at)
        wider = live.rescale(width, str(tmp_path / "savepoint"))
    except BaseException:
        live.stop()
        raise
    try:
        check(wider)
        assert wider.wait(120)
        every = live.output() + wider.output()
    finally:
        wider.stop()
    validate(every, name="the output before and after")
    assert sorted(to_cht(every)) == sorted(to_cht(query(rows(), 1).collect(runtime="inline")))


@pytest.mark.slow
def test_a_running_query_rescales_itself(ray_session, tmp_path):
    def four_partitions(wider):
        assert sum(s.endswith("]") for s in wider.steps) == 4

    # (the default key groups: 128 at partitions > 1)
    rescaled_while_running("rescale-self", tmp_path, 4, N // 3, four_partitions, groups=None)
    with pytest.raises(ValueError, match="no group_apply that keeps its state by key group"):
        Stream.from_rows(rows(), start="t").with_partitions(4)
