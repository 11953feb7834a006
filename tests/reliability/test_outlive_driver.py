"""Queries that outlive the script that deployed them (issue 14).

A script deploys a query and exits, or is killed with SIGKILL, at once: the query's host actor
(``<name>/~host``, :mod:`actors.host`) goes on feeding its sources from the cluster and, when
checkpointed, supervising it; this process attaches and finds the whole output. And when the
host itself is lost, Ray restarts it and it resumes from the checkpoints and the output it
saved, with no output row twice.

The scripts connect to this test session's Ray instance, as a second driver would."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from operators.cht import to_cht
from tests.conftest import REPO
from tests.kit import assert_equivalent
from tests.reliability.test_recovery import check_exactly_once, wait_events, window_join
from topology import attach

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N = 20_000

#: deploys window_join(N) as argv[3] and says so; "exit" returns, "kill" waits to be killed
SCRIPT = """
import sys, time
import ray
from tests.reliability.test_recovery import window_join
address, mode, name, ckpt, N = *sys.argv[1:5], int(sys.argv[5])
ray.init(address=address, namespace="cedar", logging_level="ERROR")
opts = {} if ckpt == "-" else {"checkpoint_dir": ckpt, "checkpoint_every": 2}
q = window_join(N).deploy(name, batch_size=500, history=True, **opts)
print("deployed", q.name, flush=True)
if mode == "kill":
    time.sleep(600)
"""


@pytest.fixture(scope="module")
def expected():
    return window_join(N).collect(runtime="inline")


def run_elsewhere(code: str, *args: str, timeout_s: float = 300) -> str:
    """Run ``code`` (with ``args`` in ``sys.argv``) in a Python process of its own, as another
    driver of the cluster would; return its output, failing with its errors."""
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONWARNINGS="ignore")
    run = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=timeout_s)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def deploy_from_a_script(address: str, mode: str, name: str, ckpt: str, n: int = N) -> None:
    """Run SCRIPT (over ``window_join(n)``) in a process of its own; it is gone when this
    returns."""
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONWARNINGS="ignore")
    child = subprocess.Popen([sys.executable, "-c", SCRIPT, address, mode, name, ckpt, str(n)],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline() if child.stdout else ""
        assert line.strip() == f"deployed {name}", f"the script said {line!r}"
        if mode == "kill":
            child.kill()  # SIGKILL: no clean-up of any kind
        assert child.wait(60) is not None
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.parametrize("mode", ["exit", "kill"])
@pytest.mark.parametrize("checkpointed", [False, True], ids=["plain", "checkpointed"])
def test_a_query_runs_on_after_its_script_is_gone(ray_session, tmp_path, expected, mode,
                                                  checkpointed):
    name = f"orphan-{mode}-{int(checkpointed)}"
    address = ray_session.get_runtime_context().gcs_address
    deploy_from_a_script(address, mode, name, str(tmp_path) if checkpointed else "-")
    live = attach(name)
    try:
        assert live.wait(180)
        assert live.error() is None
        assert_equivalent(live.snapshot(), to_cht(expected))
        if checkpointed:
            check_exactly_once(live.output(), expected)
    finally:
        live.stop()


@pytest.mark.parametrize("at", [3_000, 12_000])
def test_a_lost_host_resumes_from_the_checkpoints(ray_session, tmp_path, expected, at):
    """The host actor (supervisor, feeder, replay log) dies mid-stream; Ray starts it again,
    and it resumes: the output saved so far, every actor restored from the newest complete
    epoch, the sources read again from there. Then an operator dies too, and the resumed
    supervisor recovers from that as before."""
    import ray

    live = window_join(N).deploy(f"host-loss-{at}", checkpoint_dir=str(tmp_path),
                                 checkpoint_every=2, batch_size=500)
    try:
        source = next(s for s in live.steps if s.startswith("from_events"))
        wait_events(live, source, at, epoch=1)
        ray.kill(live.host, no_restart=False)  # Ray restarts it, as after a crash
        deadline = time.monotonic() + 60
        while not any(r.get("resumed") for r in live.recoveries()):
            assert time.monotonic() < deadline, "the host did not come back"
            time.sleep(0.1)
        join = next(s for s in live.steps if s.startswith("join"))
        wait_events(live, join, 1)
        ray.kill(live.handles[join], no_restart=True)
        assert live.wait(180)
        check_exactly_once(live.output(), expected)
        kinds = [bool(r.get("resumed")) for r in live.recoveries()]
        assert kinds[0] is True and len(kinds) >= 1
    finally:
        live.stop()


def test_a_host_lost_after_the_query_finished_releases_nothing_again(ray_session, tmp_path,
                                                                      expected):
    """host: [-- fed, last epoch e, end: the rest released --] done  X  restarted
    The output after epoch e was released at the end, with no checkpoint after it: a host
    restarted then must not run the query again from e (that output would come twice)."""
    import ray

    from topology import attach

    live = window_join(N).deploy("host-loss-end", checkpoint_dir=str(tmp_path),
                                 checkpoint_every=2, batch_size=500)
    try:
        assert live.wait(60)
        ray.kill(live.host, no_restart=False)  # Ray restarts it, as after a crash
        again = attach("host-loss-end")
        assert again.wait(60) and again.state() == "finished"
        check_exactly_once(again.output(), expected)
    finally:
        live.stop()


def test_a_name_deployed_again_does_not_resume_the_earlier_run(ray_session, tmp_path):
    """The same name and checkpoint folder for a new query: a restart of the new run must not
    take the earlier run's epochs or saved output for its own."""
    import ray

    first = window_join(5_000).deploy("again", checkpoint_dir=str(tmp_path),
                                      checkpoint_every=2, batch_size=500)
    assert first.wait(120)
    first.stop()
    expected = window_join(N, seed=1).collect(runtime="inline")
    live = window_join(N, seed=1).deploy("again", checkpoint_dir=str(tmp_path),
                                         checkpoint_every=2, batch_size=500)
    try:
        source = next(s for s in live.steps if s.startswith("from_events"))
        wait_events(live, source, 3_000, epoch=1)
        ray.kill(live.host, no_restart=False)
        assert live.wait(180)
        assert any(r.get("resumed") for r in live.recoveries())
        check_exactly_once(live.output(), expected)
    finally:
        live.stop()


def test_a_third_process_composes_onto_an_orphaned_query(ray_session, tmp_path):
    """A query whose script is gone is published to a query deployed by another script,
    also gone: the composed query runs in the cluster and receives the publisher's events
    alive at its CTI (none, the publisher having finished), then its end."""
    address = ray_session.get_runtime_context().gcs_address
    deploy_from_a_script(address, "exit", "orphan-pub", "-", 5_000)
    publisher = attach("orphan-pub")
    subscriber = None
    try:
        assert publisher.wait(120)
        run_elsewhere("import sys, ray\nfrom topology import Stream\n"
                      "ray.init(address=sys.argv[1], namespace='cedar', logging_level='ERROR')\n"
                      "Stream.published('orphan-pub').select(lambda p: p).deploy("
                      "'orphan-sub', history=True)\n", address)
        subscriber = attach("orphan-sub")
        assert subscriber.wait(120)
        got, published = set(subscriber.snapshot()), set(publisher.snapshot())
        cti = publisher.stats()["sink"]["cti"]
        assert got == {r for r in published if r[1] >= cti}  # alive: end ≥ CTI
        # both of the publisher's inputs have ended, so its output CTI is the later of their
        # final CTIs (the rates' 10**9: docs/ctis.md, "An input that has ended"): every row
        # of the finished publisher is final, and the subscriber gets its end and no row
        assert cti == 10**9 and published and not got
    finally:
        for q in (subscriber, publisher):
            if q is not None:
                q.stop()
