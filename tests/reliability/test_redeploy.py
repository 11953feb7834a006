"""A redeploy never destroys a running query (issue 28, item 1).

The host of a checkpointed query is killed just after a checkpoint commit (``ray.kill`` with
a restart, or SIGKILL of its process); while Ray restarts it, the same name is deployed again,
over and over at seeded moments of the restart:

    host:      [-- feeding, commit e --X]   restarting ...   [-- resumed from e ------ done]
    deploy(same name):                  ^  ^ ^   ^ ^  ^  refused, every time
    output:    exactly the fault-free run's, no row twice

Every redeploy must be refused with a message that says the query is running and how to stop
it, and the original query must recover and finish with its exact output. A deliberate
``deploy(..., replace=True)`` stops the old query completely (host and operators dead, its
name free) before it touches the old query's files, even during a restart.

``CEDAR_CRASH_SEEDS=N`` (N > 2) runs N seeds instead of 2 (the crash sweeps' switch).
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.reliability.test_recovery import check_exactly_once, wait_events, window_join
from topology.running.query import NameTaken

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N = 12_000
SEEDS = int(os.environ.get("CEDAR_CRASH_SEEDS", "2"))


@pytest.fixture(scope="module")
def expected():
    return window_join(N).collect(runtime="inline")


def host_pid(name: str) -> int:
    from ray._private import state

    for a in state.actors().values():
        if a.get("Name") == f"{name}/~host" and a.get("State") == "ALIVE":
            return int(a["Pid"])
    raise AssertionError(f"{name}: no live host")


def kill_just_after_commit(live, name: str, epoch: int, how: str) -> None:
    """Kill the query's host as soon as checkpoint ``epoch`` is committed."""
    import ray

    source = next(s for s in live.steps if s.startswith("from_events"))
    wait_events(live, source, 0, epoch=epoch)
    if how == "sigkill":
        os.kill(host_pid(name), signal.SIGKILL)
    else:
        ray.kill(live.host, no_restart=False)  # Ray restarts it, as after a crash


def host_state(name: str) -> str | None:
    """Ray's state of the query's host, without waiting for it."""
    from topology.running.registry import actor_states

    return actor_states(name).get("~host")


def host_back(name: str) -> bool:
    """Whether Ray has restarted the query's host and it is alive again: told by Ray's count
    of its restarts, since a poll can miss the whole restart (a call that waits for the query
    to be whole, ``attach()`` or ``deploy()``, spans it)."""
    from ray._private import state

    return any(a.get("Name") == f"{name}/~host" and a.get("State") == "ALIVE"
               and a.get("NumRestarts", 0) >= 1 for a in state.actors().values())


@pytest.mark.parametrize("seed", range(1, SEEDS + 1))
@pytest.mark.parametrize("how", ["ray", "sigkill"])
def test_a_redeploy_during_the_host_restart_is_refused(ray_session, tmp_path, expected, seed,
                                                       how):
    rng = random.Random(seed)
    name = f"redeploy-{how}-{seed}"
    live = window_join(N).deploy(name, checkpoint_dir=str(tmp_path), checkpoint_every=2,
                                 batch_size=500)
    try:
        kill_just_after_commit(live, name, rng.randint(1, 3), how)
        refused = restarting = 0
        deadline = time.monotonic() + 90
        while True:  # the whole restart, at seeded moments
            assert time.monotonic() < deadline, "the host did not come back"
            if host_back(name):
                break
            restarting += host_state(name) != "ALIVE"
            try:
                window_join(N, seed=1).deploy(name, checkpoint_dir=str(tmp_path),
                                              checkpoint_every=2, batch_size=500)
            except NameTaken as exc:
                refused += 1
                assert "is running" in str(exc) and f"attach({name!r}).stop()" in str(exc)
                assert "replace=True" in str(exc)
            else:
                pytest.fail("a redeploy during the host's restart was accepted")
            time.sleep(rng.uniform(0, 0.05))
        assert refused >= max(restarting, 1)
        assert any(r.get("resumed") for r in live.recoveries())
        assert live.wait(180)
        check_exactly_once(live.output(), expected)
        with pytest.raises(NameTaken, match="is running"):  # finished, not stopped: taken
            window_join(10).deploy(name, checkpoint_dir=str(tmp_path))
    finally:
        live.stop()


def test_a_redeploy_into_another_checkpoint_dir_is_refused_too(ray_session, tmp_path):
    live = window_join(N).deploy("redeploy-dir", checkpoint_dir=str(tmp_path / "a"),
                                 checkpoint_every=2, batch_size=500)
    try:
        with pytest.raises(NameTaken, match="is running"):
            window_join(10).deploy("redeploy-dir", checkpoint_dir=str(tmp_path / "b"))
        with pytest.raises(NameTaken, match="is running"):
            window_join(10).deploy("redeploy-dir")
        assert live.wait(180)
    finally:
        live.stop()


def test_the_claim_is_exclusive_in_the_checkpoint_storage(tmp_path):
    """Two deploys that both found the registry empty: only one creates the claim file."""
    from actors import checkpoint as ck

    first = ck.claim(str(tmp_path), "q", {"token": "a"})
    second = ck.claim(str(tmp_path), "q", {"token": "b"})
    assert first is None and second == {"token": "a"}
    ck.release_claim(str(tmp_path), "q", "b")  # not its claim: kept
    assert ck.read_claim(str(tmp_path), "q") == {"token": "a"}
    ck.release_claim(str(tmp_path), "q", "a")
    assert ck.read_claim(str(tmp_path), "q") is None
    assert ck.claim(str(tmp_path), "q", {"token": "b"}) is None


def test_a_stale_claim_is_taken_over(ray_session, tmp_path, expected):
    """A claim left by a query that is gone (no actor of its name in any state, its driver
    gone) does not block the name."""
    from actors import checkpoint as ck

    ck.claim(str(tmp_path), "stale", {"token": "old", "job": "ffffffff", "local": True})
    live = window_join(N).deploy("stale", checkpoint_dir=str(tmp_path), checkpoint_every=2,
                                 batch_size=500)
    try:
        assert live.wait(180)
        check_exactly_once(live.output(), expected)
    finally:
        live.stop()
    assert ck.read_claim(str(tmp_path), "stale") is None  # stop() released it


@pytest.mark.parametrize("during_restart", [False, True], ids=["running", "restarting"])
def test_replace_stops_the_old_query_before_touching_its_files(ray_session, tmp_path,
                                                               during_restart):
    import ray

    name = f"replace-{int(during_restart)}"
    old = window_join(N).deploy(name, checkpoint_dir=str(tmp_path), checkpoint_every=2,
                                batch_size=500)
    old_handles = list(old.handles.values()) + [old.host]
    new = None
    try:
        if during_restart:
            kill_just_after_commit(old, name, 1, "ray")
        else:
            wait_events(old, next(s for s in old.steps if s.startswith("from_events")), 0,
                        epoch=1)
        expected = window_join(N, seed=1).collect(runtime="inline")
        new = window_join(N, seed=1).deploy(name, checkpoint_dir=str(tmp_path),
                                            checkpoint_every=2, batch_size=500, replace=True)
        for h in old_handles:  # the old host and operators are dead for good
            with pytest.raises(ray.exceptions.RayActorError):
                ray.get(h.ping.remote(), timeout=30)
        assert new.wait(180)
        check_exactly_once(new.output(), expected)
        assert not any(r.get("resumed") for r in new.recoveries())
    finally:
        (new or old).stop()
