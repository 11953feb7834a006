"""Checkpoints and recovery on a real local Ray: an operator actor dies mid-stream (``ray.kill``
or SIGKILL of its process) and the query, deployed with ``checkpoint_dir``, restarts from its
last complete checkpoint, replays, and ends with the fault-free run's CHT and no output row
emitted twice."""

from __future__ import annotations

import os
import signal
import time

import pytest

from operators.cht import to_cht, validate
from operators.events import Cti, Insert
from tests.kit import assert_equivalent
from topology import Stream

pytestmark = pytest.mark.ray


def readings(n, keys=20, seed=0):
    """n point-ish events over keys, a CTI every 500 events."""
    out = []
    for i in range(n):
        t = i * 3
        out.append(Insert(f"e{i}", t, t + 7, {"k": (i * 7 + seed) % keys, "v": i % 11}))
        if i % 500 == 499:
            out.append(Cti(t))
    out.append(Cti(n * 3 + 10))
    return out


def rates(keys=20):
    return [Insert(f"r{k}", 0, 10**9, {"k": k, "rate": k + 1}) for k in range(keys)] + [
        Cti(10**9)]


def window_join(n, seed=0):
    """readings ─ tumbling(300) count per key ─┐
                                               join on k ── sink
       rates ──────────────────────────────────┘"""
    counts = Stream.from_events(readings(n, seed=seed)).group_apply(
        lambda p: p["k"],
        lambda g: g.tumbling_window(300).aggregate(lambda ps: {"k": ps[0]["k"], "n": len(ps)})
    ).select(lambda kp: kp[1])
    return counts.join(Stream.from_events(rates()), on=("k", "k"),
                       select=lambda a, b: (a["k"], a["n"] * b["rate"]))


def step_of(live, prefix):
    return next(s for s in live.steps if s.startswith(prefix))


def wait_events(live, step, n, timeout_s=60, epoch=0):
    """Until ``step`` has taken ``n`` events and the query has committed checkpoint ``epoch``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = live.stats()[step]
        if stats["events_in"] >= n and stats.get("checkpoint_epoch", 0) >= epoch:
            return
        time.sleep(0.01)
    raise AssertionError(f"{step} never received {n} events after checkpoint {epoch}")


def check_exactly_once(messages, expected):
    """Valid stream (unique ids, nothing behind a CTI), same CHT, no row emitted twice."""
    validate(messages)
    ids = [m.id for m in messages if type(m) is Insert]
    assert len(ids) == len(set(ids))
    assert_equivalent(to_cht(messages), to_cht(expected))


def run_with_kill(name, query, tmp_path, kill, victim, at, epoch=0, **opts):
    """Deploy with checkpoints, kill ``victim`` once it has ``at`` events and checkpoint
    ``epoch`` is committed, and return the output, stats and recoveries."""
    import ray

    live = query.deploy(name, checkpoint_dir=str(tmp_path), checkpoint_every=2,
                        batch_size=500, **opts)
    try:
        step = step_of(live, victim)
        wait_events(live, step, at, epoch=epoch)
        handle = live.handles[step]
        if kill == "ray":
            ray.kill(handle, no_restart=True)
        else:
            os.kill(live.stats()[step]["pid"], signal.SIGKILL)
        assert live.wait(120)
        return live.output(), live.stats(), live.recoveries()
    finally:
        live.stop()


@pytest.fixture(scope="module")
def expected_20k():
    return window_join(20_000).collect(runtime="inline")


def test_checkpointed_run_without_faults_equals_plain_run(ray_session, tmp_path, expected_20k):
    out = window_join(20_000).collect(checkpoint_dir=str(tmp_path), checkpoint_every=2,
                                      batch_size=1000)
    check_exactly_once(out, expected_20k)
    assert os.listdir(tmp_path) == []  # collect() forgets its checkpoints


@pytest.mark.slow
def test_killed_window_actor_recovers_same_cht(ray_session, tmp_path, expected_20k):
    out, stats, recs = run_with_kill("rec-window", window_join(20_000), tmp_path, "ray",
                                     "group_apply", 8_000)
    check_exactly_once(out, expected_20k)
    assert len(recs) == 1 and recs[0]["recovery_s"] > 0
    assert all(s["recoveries"] == 1 and s["recovery_s"] > 0 for s in stats.values())


@pytest.mark.slow
def test_killed_join_actor_recovers_same_cht(ray_session, tmp_path, expected_20k):
    out, _, recs = run_with_kill("rec-join", window_join(20_000), tmp_path, "ray", "join", 200)
    check_exactly_once(out, expected_20k)
    assert len(recs) == 1


@pytest.mark.slow
def test_sigkilled_operator_process_recovers(ray_session, tmp_path, expected_20k):
    out, stats, recs = run_with_kill("rec-sigkill", window_join(20_000), tmp_path, "sigkill",
                                     "group_apply", 10_000)
    check_exactly_once(out, expected_20k)
    assert len(recs) == 1 and stats["sink"]["recovery_s"] is not None


@pytest.mark.slow
def test_a_checkpoint_that_cannot_be_written_fails_the_query_with_the_reason(ray_session,
                                                                            tmp_path):
    """Not a silent hang: the step whose write failed reports it, and the supervisor stops."""
    from operators.errors import OperatorError

    blocker = tmp_path / "a-file-not-a-folder"
    blocker.write_text("")
    with pytest.raises(OperatorError, match="writing checkpoint 1 failed"):
        window_join(4_000).collect(checkpoint_dir=str(blocker), checkpoint_every=1,
                                   batch_size=500, timeout_s=120)
