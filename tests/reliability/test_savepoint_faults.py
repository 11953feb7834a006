"""Faults around savepoints, upgrades and rescales (issue 39, item 5): an operator actor
SIGKILLed while a savepoint is taken, or soon after a run restored from one, loses nothing
and doubles nothing.

    1st run:   [-- rows fed --] stop(savepoint=P) ── asked ─ cut ─ copy ── record
                                                      X      X     X      (one kill, at one
                                                                           of these points)
    2nd run:   deploy(restore=P) [seed e -- fed --X (a step killed before its own first
                                                     checkpoint: restarts from e) -- done]
    output:    1st ∪ 2nd == one uninterrupted run (final rows one for one, ids unique; a
               speculative rescaled run: a valid stream with the uninterrupted CHT)

The kills during the savepoint come at fixed points of :func:`actors.savepoints.take`: the
query's sources are fed by this process (``feed="driver"``), so its supervisor (and the
savepoint's taking) runs here and the test wraps the points. A savepoint that cannot be
taken must fail with ``SavepointFailed`` and leave no record: here when the query cannot
recover from the kill, or the writing of the savepoint fails (over an older one). A kill it
recovers from is no failure: the savepoint is taken. That includes the query's host killed
while it copies the savepoint (the S3 server it writes to paused meanwhile): Ray restarts
the host, which resumes from the cut and is asked for the savepoint again.

Run: ``python -m pytest -m slow tests/reliability/test_savepoint_faults.py`` (~3 min on 2
cores at a load average of 5-12, Ray's start included; ~4-5 min at 15-22).
"""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from typing import Any

import pytest

from actors import checkpoint as ck
from actors import savepoints
from actors.savepoints import SavepointFailed
from operators.cht import to_cht, validate
from operators.events import Insert
from tests.deploy import test_rescale as rescale
from tests.deploy.test_savepoint import BATCH, N, inserted, query, rows, slow_rows
from topology import Stream
from topology.spark.held_runs import Batches

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: batches per checkpoint of a restored run: none of its own before the kills
NEVER = 10_000
#: seconds before each batch of 200 rows: the input takes ~2 s to feed (30 batches)
PAUSE_S = 0.06


def step_of(live: Any, prefix: str) -> str:
    return next(s for s in live.steps if s.startswith(prefix))


def sigkill(live: Any, step: str) -> int:
    """SIGKILL the process of ``step``'s actor; its pid."""
    pid = live.stats()[step]["pid"]
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_for(what: str, cond: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def taken(live: Any, step: str, rows_in: int) -> bool:
    return live.stats()[step]["events_in"] >= rows_in


def more_rows(live: Any, source: str, n: int) -> None:
    """Until ``source`` has taken ``n`` more rows (a restored source counts on from the
    savepoint's count)."""
    at = live.stats()[source]["events_in"] + n
    wait_for(f"{n} more rows in", lambda: taken(live, source, at))


def exactly_once(parts: list[list], want: list) -> None:
    """The runs' output together: final rows one for one with ``want``'s, ids unique."""
    every = [m for p in parts for m in p]
    assert all(parts), "a cut fell at an end: the test proves nothing"
    validate(every, name="the runs' output together")
    got = inserted(every)
    assert max(got.values()) == 1 and got == inserted(want)
    ids = [m.id for m in every if type(m) is Insert]
    assert len(ids) == len(set(ids))


# -- 1. a kill while the savepoint is taken ------------------------------------------------------
class Tripwire:
    """One of the supervisor's events, with ``trip`` called once just before (``when`` =
    "before") or after ("after") the first wait on it: a point inside ``take``."""

    def __init__(self, event: threading.Event, when: str, trip: Any) -> None:
        self.event, self.when, self.trip, self.tripped = event, when, trip, False

    def set(self) -> None:
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        if self.when == "before":
            self._trip()
        made = self.event.wait(timeout)
        if self.when == "after":
            self._trip()
        return made

    def _trip(self) -> None:
        if not self.tripped:
            self.tripped = True
            self.trip()


def slow(feed: str = "host", pause_s: float = PAUSE_S) -> Batches:
    """The rows, read again from the start by each run, a pause before each batch: slow
    enough for a cut a third of the way and a few kills after it. Fed by the query's host,
    or (``feed="driver"``) by this process: then the query's supervisor runs here."""
    return Batches(functools.partial(slow_rows, N, pause_s), feed=feed)  # type: ignore[arg-type]


#: where in ``take`` the kill comes, and whose
POINTS = {
    # the cut asked, the feeder maybe inside a round: its barrier goes to new actors
    "asked": "group_apply",
    # the cut's barrier sent, not yet through every step: replayed after it (and the output
    # slow to save: the savepoint must wait for the output before the cut)
    "cut": "sink",
    # the cut's epoch complete, its files being copied: restored from that epoch
    "copy": "from_rows",
    # as "cut", but no actor can be started again: the query fails, the savepoint too
    "cut-unrecoverable": "sink",
}


def slowly(save: Any, pause_s: float = 0.3) -> Any:
    """``save``, after a pause."""
    def slow_save(*args: Any) -> Any:
        time.sleep(pause_s)
        return save(*args)
    return slow_save


def cannot_start(generation: int) -> dict[str, Any]:
    raise RuntimeError("no room for the query's actors (the test's)")


@pytest.mark.parametrize("point", list(POINTS))
def test_a_kill_while_the_savepoint_is_taken_loses_and_doubles_nothing(
        ray_session, monkeypatch, tmp_path, point):
    ckpt, where = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    name = f"spf-{point}"
    live = query(slow("driver")).deploy(name, checkpoint_dir=ckpt, batch_size=BATCH,
                                        checkpoint_every=4)
    sup = live.supervisor
    failed = None
    try:
        victim = step_of(live, POINTS[point])
        source = step_of(live, "from_rows")
        wait_for(f"{N // 3} rows in", lambda: taken(live, source, N // 3))
        pid = live.stats()[victim]["pid"]

        def kill() -> None:
            os.kill(pid, signal.SIGKILL)

        if point == "asked":
            sup.cut_made = Tripwire(sup.cut_made, "before", kill)
        elif point.startswith("cut"):
            sup.cut_made = Tripwire(sup.cut_made, "after", kill)
            if point == "cut-unrecoverable":
                sup._start_actors = cannot_start
            else:  # and the output slow to save: the savepoint waits for all of it first
                monkeypatch.setattr(ck, "save_output", slowly(ck.save_output))
        else:
            copy, copied = savepoints.copy_file, list[str]()

            def copy_after_a_kill(src: str, dst: str) -> None:
                if not copied:  # the first file: kill, and copy once the query recovered
                    kill()
                    wait_for("a recovery", lambda: sup.recoveries)
                copied.append(dst)
                copy(src, dst)

            monkeypatch.setattr(savepoints, "copy_file", copy_after_a_kill)
        try:
            record = live.stop(savepoint=where)
        except SavepointFailed as exc:
            record, failed = None, str(exc)
    except BaseException:
        live.stop()
        raise
    recoveries, before = list(sup.recoveries), live.output()
    want = query(rows()).collect(runtime="inline")
    if point == "cut-unrecoverable":  # failed, saying why; no record; a rerun is whole
        assert failed is not None and "failed while its savepoint was taken" in failed
        assert "recovering failed" in failed and "no room" in failed, failed
        assert not os.path.exists(savepoints.record_location(where))
        with pytest.raises(ValueError, match="no savepoint there"):
            query(rows()).deploy(name, checkpoint_dir=ckpt, restore=where)
        again = query(rows()).deploy(name, checkpoint_dir=ckpt, batch_size=BATCH)
        try:
            assert again.wait(60)
            assert inserted(again.output()) == inserted(want)
        finally:
            again.stop()
        return
    # a kill is a recovery, not a failure: the savepoint is taken
    assert failed is None and record is not None, failed
    assert recoveries, "the kill did not come during the savepoint: the test proves nothing"
    assert 0 < record["rounds"] < N // BATCH
    if point == "asked":  # the kill came before the cut: restored from an earlier epoch
        assert recoveries[0]["epoch"] < record["epoch"]
    if point == "copy":  # the kill came after the cut: restored from the cut's epoch
        assert [r["epoch"] for r in recoveries] == [record["epoch"]]
    again = query(rows()).deploy(name, checkpoint_dir=ckpt, restore=where)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    exactly_once([before, after], query(rows()).collect(runtime="inline"))


def test_a_savepoint_written_over_another_that_fails_half_way_leaves_none(
        ray_session, monkeypatch, tmp_path):
    """1st run: stop(savepoint=P), complete. 2nd run (afresh): stop(savepoint=P) again, the
    writing of its 2nd file failing: SavepointFailed, and P holds no savepoint (not the
    1st run's record over a mix of both runs' files, which a restore would take)."""
    ckpt, where = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    cut(query(slow("driver")), "spf-over", ckpt, where, N // 6)
    live = query(slow("driver")).deploy("spf-over", checkpoint_dir=ckpt, batch_size=BATCH,
                                        checkpoint_every=4)
    copy, copied = savepoints.copy_file, list[str]()

    def copy_failing(src: str, dst: str) -> None:
        if copied:
            raise OSError(28, "No space left on device (the test's)")
        copied.append(dst)
        copy(src, dst)

    try:
        source = step_of(live, "from_rows")
        wait_for(f"{N // 3} rows in", lambda: taken(live, source, N // 3))
        monkeypatch.setattr(savepoints, "copy_file", copy_failing)
        with pytest.raises(SavepointFailed, match=r"writing .*No space left on device"):
            live.stop(savepoint=where)
    finally:
        live.stop()
    assert copied, "no file was written over: the test proves nothing"
    assert not os.path.exists(savepoints.record_location(where))
    with pytest.raises(ValueError, match="no savepoint there"):
        query(rows()).deploy("spf-over", checkpoint_dir=ckpt, restore=where)


# -- 2. a kill soon after a restore ---------------------------------------------------------------
def cut(stream: Stream, name: str, ckpt: str, where: str, at: int = N // 3
        ) -> tuple[dict[str, Any], list]:
    """Deploy ``stream``, stop it with a savepoint once ``at`` rows are in: the record and
    the output delivered before the cut."""
    live = stream.deploy(name, checkpoint_dir=ckpt, batch_size=BATCH, checkpoint_every=4)
    try:
        source = step_of(live, "from_rows")
        wait_for(f"{at} rows in", lambda: taken(live, source, at))
        record = live.stop(savepoint=where)
    except BaseException:
        live.stop()
        raise
    assert record is not None and 0 < record["rounds"] < N // BATCH
    return record, live.output()


def restored_with_kills(stream: Stream, name: str, ckpt: str, where: str,
                        victims: list[str], record: dict[str, Any]) -> list:
    """Deploy ``stream`` from the savepoint at ``where`` (no checkpoint of its own), SIGKILL
    each of ``victims`` in turn, once the run has taken a few more batches and recovered
    from the kill before; its output. Every recovery is from the savepoint's epoch."""
    again = stream.deploy(name, checkpoint_dir=ckpt, restore=where, checkpoint_every=NEVER)
    try:
        source = step_of(again, "from_rows")
        for i, victim in enumerate(victims):
            wait_for(f"recovery {i}", functools.partial(recovered, again, i))
            more_rows(again, source, 2 * BATCH)
            sigkill(again, victim)
            assert not again.wait(0), "the restored run ended before a kill: it proves nothing"
        assert again.wait(60)
        out, recoveries = again.output(), again.recoveries()
    finally:
        again.stop()
    assert len(recoveries) == len(victims)
    assert all(r["epoch"] == record["epoch"] for r in recoveries)
    return out


def test_kills_soon_after_a_restore_restart_from_the_savepoint(ray_session, tmp_path):
    """restored run: [seed e -- fed --X source --X sink] each restart from e -- done"""
    ckpt, where = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    record, before = cut(query(slow()), "spf-restore", ckpt, where)
    after = restored_with_kills(query(slow()), "spf-restore", ckpt, where,
                                [step_of_plan(query(rows()), "from_rows"), "sink"], record)
    exactly_once([before, after], query(rows()).collect(runtime="inline"))


def recovered(live: Any, times: int) -> bool:
    return len(live.recoveries()) == times


def step_of_plan(stream: Stream, prefix: str) -> str:
    return next(s for s in stream.plan().stages if s.startswith(prefix))


# -- 3. a rescale 2 -> 4 -> 2, a new partition killed each time ---------------------------------
def test_a_rescale_and_back_with_a_partition_killed_gives_the_uninterrupted_output(
        ray_session, tmp_path):
    """1st run (2 partitions) cut; 2nd (4) partition [3] killed, cut; 3rd (2) partition [1]
    killed; the runs' output together: valid, the uninterrupted CHT."""
    ckpt = str(tmp_path / "ckpt")
    name = "spf-rescale"
    first = str(tmp_path / "savepoint0")
    record, out1 = cut(rescale.query(slow(), 2), name, ckpt, first, N // 4)
    wide = rescale.query(slow(), 4)
    parts = [s for s in wide.plan().stages if s.endswith("]")]
    assert len(parts) == 4
    second = str(tmp_path / "savepoint1")
    live = wide.deploy(name, checkpoint_dir=ckpt, restore=first, checkpoint_every=NEVER)
    try:
        source = step_of(live, "from_rows")
        more_rows(live, source, 2 * BATCH)
        sigkill(live, parts[3])
        wait_for("the recovery", functools.partial(recovered, live, 1))
        more_rows(live, source, N // 4)
        assert live.recoveries()[0]["epoch"] == record["epoch"]
        record2 = live.stop(savepoint=second)
    except BaseException:
        live.stop()
        raise
    out2 = live.output()
    assert record2 is not None and record2["rounds"] < N // BATCH
    narrow = rescale.query(slow(), 2)
    part = [s for s in narrow.plan().stages if s.endswith("]")][1]
    out3 = restored_with_kills(narrow, name, ckpt, second, [part], record2)
    assert out1 and out2 and out3, "a cut fell at an end: the test proves nothing"
    every = out1 + out2 + out3
    validate(every, name="the runs' output together")  # retractions find their inserts
    want = rescale.query(rows(), 1).collect(runtime="inline")
    assert sorted(to_cht(every)) == sorted(to_cht(want))


# -- 4. an upgrade (a stateless step after the window changed), with kills ----------------------
def tagged(data: Any, tag: str) -> Stream:
    """rows ─ group_apply(k: tumbling sum, final) ─ select((k, sum, tag)) ─ sink"""
    return query(data).select(lambda kp: (kp[0], kp[1], tag))


def test_an_upgrade_with_kills_gives_the_new_querys_output(ray_session, tmp_path):
    """old (tag "old") cut; new (tag "new") restored, its select (changed: it starts
    fresh, the window keeps its state) killed. Every row before the cut the old select's,
    every row after the new one's, and retagged they are the uninterrupted new query's one
    for one."""
    ckpt, where = str(tmp_path / "ckpt"), str(tmp_path / "savepoint")
    record, before = cut(tagged(slow(), "old"), "spf-upgrade", ckpt, where)
    new = tagged(slow(), "new")
    after = restored_with_kills(new, "spf-upgrade", ckpt, where,
                                [step_of_plan(new, "select")], record)
    assert {m.payload[2] for m in before if type(m) is Insert} == {"old"}
    assert {m.payload[2] for m in after if type(m) is Insert} == {"new"}
    retagged = [Insert(m.id, m.start, m.end, (*m.payload[:2], "new")) if type(m) is Insert
                else m for m in before]
    exactly_once([retagged, after], tagged(rows(), "new").collect(runtime="inline"))


# -- 5. the query's host killed while it copies the savepoint --------------------------------
def moto_pid(root: str) -> int:
    """The pid of the S3 server that ``root`` (the ``s3_root`` fixture's URI) names."""
    port = root.partition("endpoint_override=127.0.0.1:")[2].partition("&")[0]
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"moto.server" in args and port.encode() in args:
            return int(pid)
    raise AssertionError(f"no S3 server on port {port}")


def test_the_host_killed_while_it_copies_the_savepoint(ray_session, tmp_path, s3_root):
    """1st run: [-- fed --] stop(savepoint=S3) ── cut e complete ── copy (the S3 server
    paused) X host killed; Ray restarts it: it resumes from epoch e, the cut's, and the
    savepoint is asked of it again (the sources fed from where the cut was, not from where
    a checkpoint every ``checkpoint_every`` batches would be). 2nd run restored from it."""
    import ray

    from actors.checkpoint import join_location

    ckpt, where = str(tmp_path / "ckpt"), join_location(s3_root, "savepoints", "host-kill")
    name = "spf-host"
    server = moto_pid(s3_root)
    # no checkpoint of its own: the first complete epoch is the cut's; slower, so that the
    # restarted host is asked for the savepoint again before the rows end
    live = query(slow(pause_s=0.15)).deploy(name, checkpoint_dir=ckpt, batch_size=BATCH,
                                checkpoint_every=NEVER)
    outcome: dict[str, Any] = {}

    def stop() -> None:
        try:
            outcome["record"] = live.stop(savepoint=where)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome["error"] = exc

    stopper = threading.Thread(target=stop)
    try:
        source = step_of(live, "from_rows")
        wait_for(f"{N // 3} rows in", lambda: taken(live, source, N // 3))
        os.kill(server, signal.SIGSTOP)
        try:
            stopper.start()
            wait_for("the cut's epoch", lambda: ck.latest_complete(ck.normalize(ckpt), name,
                                                                   live.steps) >= 1)
            time.sleep(0.5)  # its output delivered; the copy waits for the server
            assert "record" not in outcome and "error" not in outcome
            ray.kill(live.host, no_restart=False)  # Ray restarts it, as after a crash
        finally:
            os.kill(server, signal.SIGCONT)
        stopper.join(120)
        assert not stopper.is_alive()
    except BaseException:
        live.stop()
        raise
    # a restarted host is no failure: the savepoint is asked of it again, and taken
    assert "error" not in outcome, outcome["error"]
    record, before = outcome["record"], live.output()
    assert record is not None and record["rounds"] < N // BATCH
    assert any(r.get("resumed") for r in ck.load_recoveries(ck.normalize(ckpt), name))
    again = query(rows()).deploy(name, checkpoint_dir=ckpt, restore=where)
    try:
        assert again.wait(60)
        after = again.output()
    finally:
        again.stop()
    exactly_once([before, after], query(rows()).collect(runtime="inline"))
