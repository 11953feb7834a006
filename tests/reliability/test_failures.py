"""Failures of a deployed query are reported, not hung (issue 28, item 3).

Each case ends in a clear state — ``Query.state()`` is ``"finished"`` or
``"failed: step S: reason"`` — and ``wait()`` / ``error()`` say it in cedar's words
(:class:`topology.running.query.QueryFailed` naming the step), never a raw Ray error or a hang:

* an operator of a query without checkpoints is killed: failed, naming that step, at once;
* the host of a query without checkpoints is killed after it fed the whole input: finished;
  killed before: failed, naming the host;
* the host of a checkpointed query is killed for good: failed, naming the host;
* ``attach()`` while Ray restarts the host of a checkpointed query: a handle, "recovering";
* the recoveries of a checkpointed query are counted across restarts of its host;
* a checkpointed query whose operator (or sink) is killed once it finished is still read,
  whole, by ``attach(name).output()`` from another driver (issue 41, item 5).
"""

from __future__ import annotations

import os
import pickle
import signal
import textwrap
import time

import pytest

from operators.cht import to_cht
from tests.kit import assert_equivalent
from tests.reliability.test_recovery import check_exactly_once, wait_events, window_join
from tests.reliability.test_redeploy import host_back, kill_just_after_commit
from tests.topology.live_kit import second_driver
from topology import attach
from topology.running.query import QueryFailed

pytestmark = pytest.mark.ray

N = 12_000


@pytest.fixture(scope="module")
def expected():
    return window_join(N).collect(runtime="inline")


def step_of(q, prefix: str) -> str:
    return next(s for s in q.steps if s.startswith(prefix))


def sources_done(q) -> None:
    """Until every source has taken its whole input."""
    deadline = time.monotonic() + 120
    while not all(s["finished"] for step, s in q.stats().items()
                  if step.startswith("from_events")):
        assert time.monotonic() < deadline, "the sources never ended"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_killed_operator_fails_the_query_at_once(ray_session):
    """Without checkpoints nothing restarts the join: wait() raises, naming it, long before
    its timeout; error() and state() say the same, with no raw Ray error."""
    q = window_join(N).deploy("fail-op", batch_size=500)
    try:
        join = step_of(q, "join")
        wait_events(q, join, 1)
        os.kill(q.stats()[join]["pid"], signal.SIGKILL)
        began = time.monotonic()
        with pytest.raises(QueryFailed) as err:
            q.wait(60)
        assert time.monotonic() - began < 30
        assert err.value.step == join and "died" in err.value.reason
        assert "checkpoint_dir" in err.value.reason
        assert q.error() == str(err.value)
        assert q.state() == f"failed: step {join}: {err.value.reason}"
    finally:
        q.stop()


@pytest.mark.slow
def test_a_host_killed_after_feeding_everything_leaves_a_finished_query(ray_session,
                                                                        expected):
    import ray

    q = window_join(N).deploy("fail-host-late", batch_size=500, history=True)
    try:
        sources_done(q)
        ray.kill(q.host, no_restart=True)
        assert q.wait(120) is True
        assert q.error() is None and q.state() == "finished"
        assert_equivalent(q.snapshot(), to_cht(expected))
    finally:
        q.stop()


@pytest.mark.slow
def test_a_host_killed_before_the_input_ended_fails_the_query(ray_session):
    import ray

    q = window_join(200_000).deploy("fail-host-early", batch_size=500)
    try:
        wait_events(q, step_of(q, "from_events"), 1)
        ray.kill(q.host, no_restart=True)
        with pytest.raises(QueryFailed, match="died before their input ended") as err:
            q.wait(60)
        assert err.value.step == "~host"
        assert q.state().startswith("failed: step ~host: the query's host, which fed ")
    finally:
        q.stop()


@pytest.mark.slow
def test_a_checkpointed_query_whose_host_is_gone_for_good_fails(ray_session, tmp_path):
    import ray

    q = window_join(N).deploy("fail-host-gone", checkpoint_dir=str(tmp_path),
                              checkpoint_every=2, batch_size=500)
    try:
        wait_events(q, step_of(q, "from_events"), 1)
        ray.kill(q.host, no_restart=True)
        with pytest.raises(QueryFailed, match="gone for good") as err:
            q.wait(60)
        assert err.value.step == "~host"
        assert q.state().startswith("failed: step ~host: ")
        assert q.error() == str(err.value)
    finally:
        q.stop()


@pytest.mark.slow
def test_attach_during_a_host_restart_gives_a_recovering_query(ray_session, tmp_path):
    name, n = "fail-attach", 10 * N  # still running when its host is killed
    expected = window_join(n).collect(runtime="inline")
    live = window_join(n).deploy(name, checkpoint_dir=str(tmp_path), checkpoint_every=2,
                                 batch_size=500)
    try:
        kill_just_after_commit(live, name, 1, "ray")
        seen, attached = set(), set()
        deadline = time.monotonic() + 90
        while not host_back(name):
            assert time.monotonic() < deadline, "the host did not come back"
            seen.add(live.state())  # never a raw Ray error
            if "recovering" in seen and not attached:  # attach() waits until it is whole
                attached.add(attach(name).state())
            time.sleep(0.05)
        assert "recovering" in seen and seen <= {"recovering", "running"}
        assert attached <= {"recovering", "running", "finished"} and attached
        again = attach(name)
        assert again.wait(180) and again.state() == "finished"
        check_exactly_once(again.output(), expected)
    finally:
        live.stop()


@pytest.mark.slow
def test_recoveries_are_counted_across_host_restarts(ray_session, tmp_path):
    """Two operator kills and one host kill: three recoveries, after the host's restart too."""
    import ray

    name, n = "fail-count", 30_000
    expected = window_join(n).collect(runtime="inline")
    live = window_join(n).deploy(name, checkpoint_dir=str(tmp_path), checkpoint_every=2,
                                 batch_size=500)
    try:
        for kills in (1, 2):
            join = step_of(live, "join")
            wait_events(live, join, 1)
            ray.kill(live.handles[join], no_restart=True)
            deadline = time.monotonic() + 60
            while len(live.recoveries()) < kills:
                assert time.monotonic() < deadline, "no recovery"
                time.sleep(0.05)
        kill_just_after_commit(live, name, live.stats()["sink"]["checkpoint_epoch"] + 1, "ray")
        assert live.wait(180)
        recs = live.recoveries()
        assert len(recs) == 3 and recs[-1].get("resumed")
        assert live.stats()["sink"]["recoveries"] == 3
        check_exactly_once(live.output(), expected)
    finally:
        live.stop()


READ_OUTPUT = textwrap.dedent("""
    import json, pickle, sys

    import ray

    from topology import attach

    ray.init(address=sys.argv[1], namespace="cedar", logging_level="ERROR")
    q = attach(sys.argv[2])
    with open(sys.argv[3], "wb") as f:
        pickle.dump(q.output(), f)
    print(json.dumps({"state": q.state()}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["join", "sink"])
def test_a_checkpointed_query_killed_as_it_finished_is_read_from_another_driver(
        ray_session, tmp_path, expected, victim):
    """deploy ── ... ── finished ── kill -9 <victim> ── attach() elsewhere ── output()
    The supervisor has released the whole output, saved beside the checkpoints: another
    driver reaches it through the query's host, whichever step is gone."""
    name = f"fail-end-{victim}"
    live = window_join(N).deploy(name, checkpoint_dir=str(tmp_path / "ck"),
                                 checkpoint_every=2, batch_size=500)
    try:
        assert live.wait(120) is True
        os.kill(live.stats()[step_of(live, victim)]["pid"], signal.SIGKILL)
        path = tmp_path / "output.pkl"
        got = second_driver(READ_OUTPUT, tmp_path, name, str(path))
        assert got["state"] == "finished"
        check_exactly_once(pickle.loads(path.read_bytes()), expected)
        assert live.state() == "finished"
    finally:
        live.stop()
