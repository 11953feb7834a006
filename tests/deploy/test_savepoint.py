"""Savepoints (issue 39, item 2): stop a deployed query at a consistent cut, start it again.

    rows:       r0 r1 ... r(k)  |cut|  r(k+1) ... r(n-1)
    1st run:    [-- fed, windows final before the cut emitted --] stop(savepoint=P)
    2nd run:                    deploy(restore=P): [-- state restored, the rest fed --]
    output:     1st ∪ 2nd == one uninterrupted run, row for row (none lost, none twice)

A savepoint into a changed query is refused naming the step; a one-shot source (a generator)
says it cannot resume.
"""

from __future__ import annotations

import functools
import time
from collections import Counter

import pytest

from actors.savepoints import SavepointFailed
from topology import AdvanceTime, Insert, Stream, Sum
from topology.spark.held_runs import Batches

N = 6_000
BATCH = 200
PAUSE_S = 0.02  # per batch: the whole input takes ~0.6 s to feed, so a cut falls inside it


def rows(n: int = N) -> list[dict]:
    return [{"t": i * 10, "k": i % 7, "v": i % 13} for i in range(n)]


def slow_rows(n: int, pause_s: float = PAUSE_S) -> object:
    """The rows, with a pause every batch (re-readable: each read starts again)."""
    for i, row in enumerate(rows(n)):
        if i % BATCH == 0:
            time.sleep(pause_s)
        yield row


def slow(n: int = N, pause_s: float = PAUSE_S) -> Batches:
    """A source any process can read again from its start, slow enough to cut half-way:
    the query's host feeds it (``feed="host"``)."""
    return Batches(functools.partial(slow_rows, n, pause_s), feed="host")


def query(data, size: int = 1_000) -> Stream:
    """rows ─ group_apply(k: tumbling(size) sum of v, emit final) ─ sink"""
    return Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).group_apply(
        lambda r: r["k"],
        lambda g: g.tumbling_window(size, emit="final").aggregate(Sum("v")))


def inserted(messages) -> Counter:
    return Counter((m.start, m.end, repr(m.payload)) for m in messages if type(m) is Insert)


def assert_continued(before: list, after: list, expected: Counter) -> None:
    """The output before the cut and after the restore: together one uninterrupted run's
    (``expected``), no row twice, no id twice."""
    assert before and after, "the cut fell at an end: the test proves nothing"
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and got == expected
    ids = [m.id for m in before + after if type(m) is Insert]
    assert len(ids) == len(set(ids))


@pytest.fixture(scope="module")
def expected() -> Counter:
    return inserted(query(rows()).collect(runtime="inline"))


def wait_rows(live, at: int, timeout_s: float = 30.0) -> None:
    source = next(s for s in live.steps if s.startswith("from_rows"))
    deadline = time.monotonic() + timeout_s
    while live.stats()[source]["events_in"] < at:
        assert time.monotonic() < deadline, f"{source} never took {at} rows"
        time.sleep(0.02)


def cut_half_way(name: str, ckpt: str, point: str) -> tuple[dict | None, list]:
    """Deploy the slow query, stop it with a savepoint a third of the way in: the
    savepoint's record and the output delivered before the cut."""
    live = query(slow()).deploy(name, checkpoint_dir=ckpt, batch_size=BATCH, checkpoint_every=4)
    try:
        wait_rows(live, N // 3)
        record = live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    return record, live.output()


def test_a_savepoint_half_way_then_restored_gives_the_uninterrupted_output(
        ray_session, tmp_path, expected):
    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    record, before = cut_half_way("sp-half", ckpt, point)
    assert record is not None and 0 < record["rounds"] < N // BATCH
    assert record["fingerprint"] in query(rows()).explain()
    again = query(slow()).deploy("sp-half", checkpoint_dir=ckpt, restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    assert_continued(before, after, expected)


def test_a_savepoint_into_a_changed_query_is_refused_naming_the_step(ray_session, tmp_path,
                                                                      capsys):
    from topology.app.cli import main

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = query(slow()).deploy("sp-changed", checkpoint_dir=ckpt, batch_size=BATCH)
    try:
        wait_rows(live, BATCH)
        assert main(["stop", "sp-changed", "--savepoint", point]) == 0  # `cedar stop`
    except BaseException:
        live.stop()
        raise
    said = capsys.readouterr().out
    assert f"savepoint {point} taken at 20" in said and "UTC" in said, said
    changed = query(slow(), size=2_000)  # another window size: the group_apply step changed
    step = next(s for s in changed.plan().stages if s.startswith("group_apply"))
    with pytest.raises(ValueError, match=rf"step '{step}' differs from the savepoint's"):
        changed.deploy("sp-changed", checkpoint_dir=ckpt, restore=point)


def test_a_one_shot_source_says_it_cannot_resume(ray_session, tmp_path, expected):
    """A generator (fed by this process, its supervisor here) is cut; restored over a
    generator again it is refused, over the same rows read again it resumes exactly."""
    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = query(slow_rows(N)).deploy("sp-oneshot", checkpoint_dir=ckpt, batch_size=BATCH)
    try:
        wait_rows(live, N // 3)
        live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    before = live.output()
    with pytest.raises(ValueError, match=r"source 'from_rows#0' cannot resume .* one-shot "
                                         r"iterator \(generator\).*\(a list, an Arrow table"):
        query(slow_rows(N)).deploy("sp-oneshot", checkpoint_dir=ckpt, restore=point)
    again = query(rows()).deploy("sp-oneshot", checkpoint_dir=ckpt, restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    assert inserted(before) + inserted(after) == expected


def test_a_savepoint_needs_a_checkpointed_query_and_a_savepoint_to_restore(ray_session,
                                                                          tmp_path):
    with pytest.raises(ValueError, match="no savepoint there"):
        query(rows()).deploy("sp-none", checkpoint_dir=str(tmp_path), restore=str(tmp_path))
    with pytest.raises(ValueError, match="give checkpoint_dir= too"):
        query(rows()).deploy("sp-none", restore=str(tmp_path))
    with pytest.raises(ValueError, match="inside the checkpoint folder of 'sp-none'"):
        query(rows()).deploy("sp-none", checkpoint_dir=str(tmp_path),
                             restore=str(tmp_path / "sp-none" / "sp"))
    live = query(rows()).deploy("sp-unchecked")
    try:
        with pytest.raises(ValueError, match="needs a query deployed with checkpoint_dir="):
            live.stop(savepoint=str(tmp_path / "p"))
    finally:
        live.stop()


@pytest.mark.slow  # ~6 s (the default tier keeps its budget)
def test_a_finished_query_has_nothing_to_save(ray_session, tmp_path):
    live = query(rows(600)).deploy("sp-done", checkpoint_dir=str(tmp_path / "c"),
                                   batch_size=BATCH)
    assert live.wait(30)
    with pytest.raises(SavepointFailed, match="its input ended before the cut"):
        live.stop(savepoint=str(tmp_path / "p"))
    # stopped all the same: the name is free for the next deploy
    live = query(rows(600)).deploy("sp-done", checkpoint_dir=str(tmp_path / "c"),
                                   batch_size=BATCH)
    with pytest.raises(SavepointFailed, match="inside the query's checkpoint folder"):
        live.stop(savepoint=str(tmp_path / "c" / "sp-done" / "sp"))




@pytest.mark.slow
def test_a_restored_query_that_loses_an_actor_restarts_from_the_savepoint(
        ray_session, tmp_path, expected):
    """restored run: [seed e -- fed --X (group_apply killed)] restart from e, replay -- done"""
    import ray

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    _, before = cut_half_way("sp-kill", ckpt, point)
    # no checkpoint of its own before the kill: the restart is from the savepoint's epoch
    again = query(slow()).deploy("sp-kill", checkpoint_dir=ckpt, restore=point,
                                 checkpoint_every=10_000)
    try:
        step = next(s for s in again.steps if s.startswith("group_apply"))
        deadline = time.monotonic() + 30
        while again.stats()[step]["events_in"] < BATCH * 3:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ray.kill(again.handles[step], no_restart=True)
        assert again.wait(60)
        after, recoveries = again.output(), again.recoveries()
    finally:
        again.stop()
    assert [r["epoch"] for r in recoveries] == [recoveries[0]["epoch"]] and recoveries[0]["epoch"]
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and got == expected


def partitioned(data) -> Stream:
    """rows ─ group_apply(k, partitions=2: tumbling sum) ─ merge ─┐
       rows (the same) ─ where(v even) ────────────────────────────┴ union ─ sink"""
    sums = Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).group_apply(
        lambda r: r["k"], lambda g: g.tumbling_window(1_000, emit="final").aggregate(Sum("v")),
        partitions=2)
    evens = Stream.from_rows(data, start="t", advance=AdvanceTime(every=BATCH)).where(
        lambda r: r["v"] % 2 == 0)
    return sums.union(evens)


@pytest.mark.slow
def test_a_partitioned_two_source_query_and_a_restarted_host_resume_from_the_savepoint(
        ray_session, tmp_path):
    """Two sources fed round robin, a partitioned group_apply (a merge aligning barriers);
    the restored run's host is killed (Ray restarts it: it resumes from the savepoint's
    epoch, its saved output read back from the savepoint's position)."""
    import ray

    want = inserted(partitioned(rows()).collect(runtime="inline"))
    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = partitioned(slow()).deploy("sp-parts", checkpoint_dir=ckpt, batch_size=BATCH,
                                      checkpoint_every=4)
    try:
        wait_rows(live, N // 3)
        record = live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    before = live.output()
    assert record is not None and 0 < record["rounds"] < N // BATCH
    # slower now: the host is killed while it feeds, after a checkpoint of the restored run
    again = partitioned(slow(pause_s=0.05)).deploy("sp-parts", checkpoint_dir=ckpt,
                                                  restore=point, checkpoint_every=2)
    try:
        deadline = time.monotonic() + 30
        while again.stats()["sink"]["checkpoint_epoch"] <= record["epoch"] + 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        fed = max(s["events_in"] for step, s in again.stats().items()
                  if step.startswith("from_rows"))
        ray.kill(again.host, no_restart=False)  # Ray restarts it, as after a crash
        assert fed < N, "the restored run ended before the kill: the test proves nothing"
        assert again.wait(60)
        after = again.output()
        assert again.recoveries()[-1]["resumed"]
    finally:
        again.stop()
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and got == want


@pytest.mark.slow
def test_a_savepoint_in_an_object_store(ray_session, tmp_path, s3_root, expected):
    """The savepoint written to, and restored from, a real S3-compatible server."""
    from actors.checkpoint import join_location

    ckpt, point = str(tmp_path / "ckpt"), join_location(s3_root, "savepoints", "sp-1")
    _, before = cut_half_way("sp-s3", ckpt, point)
    again = query(slow()).deploy("sp-s3", checkpoint_dir=ckpt, restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    got = inserted(before) + inserted(after)
    assert max(got.values()) == 1 and got == expected


def slow_record_batches(n: int) -> object:
    """The rows as Arrow record batches of BATCH rows, with a pause before each."""
    import pyarrow as pa

    table = pa.Table.from_pylist(rows(n))
    for batch in table.to_batches(max_chunksize=BATCH):
        time.sleep(PAUSE_S)
        yield batch


@pytest.mark.slow  # ~6 s (the default tier keeps its budget)
def test_an_arrow_source_resumes_at_its_record_batch(ray_session, tmp_path, expected):
    """Record batches (column-wise all the way to the keyed window), read again from the
    first and the ones fed before the cut skipped."""
    def arrow_query() -> Stream:
        data = Batches(functools.partial(slow_record_batches, N), feed="host")
        return Stream.from_arrow(data, start="t", advance=AdvanceTime(every=BATCH),
                                 batch_rows=BATCH).group_apply(
            lambda r: r["k"],
            lambda g: g.tumbling_window(1_000, emit="final").aggregate(Sum("v")))

    ckpt, point = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    live = arrow_query().deploy("sp-arrow", checkpoint_dir=ckpt, checkpoint_every=4)
    try:
        wait_rows(live, N // 3)
        record = live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    before = live.output()
    assert record is not None and 0 < record["rounds"] < N // BATCH
    again = arrow_query().deploy("sp-arrow", checkpoint_dir=ckpt, restore=point)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    got = inserted(before) + inserted(after)
    assert before and after and max(got.values()) == 1 and got == expected
