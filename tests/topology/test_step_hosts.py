"""Queries deployed on shared step hosts (``deploy(..., hosts=StepHosts(...))``): the same
output as on actors of their own, found by name as any query is, composable, stopped by slot,
and no deadlock when slots of one host feed each other under backpressure."""

from __future__ import annotations

import os
import queue
import textwrap
import time
import warnings

import pytest

from operators.events import Cti, Insert
from operators.ingress import AdvanceTime
from tests.kit import assert_equivalent
from tests.topology.live_kit import second_driver, stall_at, wait_for
from topology import Count, StepHosts, Stream, attach
from topology.running.query import NameTaken, QueryFailed, QueryStopped, StuckSlotWarning
from topology.running.registry import actor_states, list_queries
from topology.seeing.ui import Monitor

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hosts(ray_session):
    with StepHosts(count=2, capacity=8, name="tests") as pool:
        yield pool


def _free(pool):
    import ray

    return sum(ray.get([h.free.remote() for h in pool.actors()]))


def _keyed(n=3000):
    rows = [{"k": i % 7, "ts": i * 10, "v": i % 5} for i in range(n)]
    return (Stream.from_rows(rows, start="ts", advance=AdvanceTime(every=50))
            .where(lambda r: r["v"] != 3)
            .group_apply(lambda r: r["k"], lambda g: g.tumbling_window(500).aggregate(Count())))


def test_hosted_queries_give_the_output_of_their_own_actors(hosts):
    free = _free(hosts)
    a = _keyed().deploy("hosted-a", hosts=hosts, history=True)
    b = _keyed().join(Stream.from_events([Insert(k, 0, 10**9, {"k": k}) for k in range(7)]
                                         + [Cti(10**9)]),
                      on=(lambda r: r[0], "k"), select=lambda r, m: (m["k"], r[1]))
    b_live = b.deploy("hosted-b", hosts=hosts, history=True, batch_size=64, max_in_flight=1)
    try:
        assert a.wait(60) and b_live.wait(60)
        # every step is a slot: one process per host, not one per step
        pids = {s["pid"] for q in (a, b_live) for s in q.stats().values()}
        assert len(pids) <= hosts.count
        assert _free(hosts) == free - len(a.handles) - len(b_live.handles)
        assert_equivalent(a.snapshot(), _keyed().collect(runtime="inline"))
        assert_equivalent(b_live.snapshot(), b.collect(runtime="inline"))
        # found by name as any deployed query is
        assert {"hosted-a", "hosted-b"} <= set(list_queries())
        assert set(actor_states("hosted-a")) >= {"sink", "where#1"}
        assert attach("hosted-a").snapshot() == a.snapshot()
        # the web view shows a hosted query's steps as any query's
        seen = Monitor().sample(0)["queries"]["hosted-a"]
        assert "error" not in seen and seen["rows"]
        assert seen["steps"]["where#1"]["answering"] and seen["steps"]["sink"]["finished"]
        with pytest.raises(NameTaken):
            _keyed().deploy("hosted-a", hosts=hosts)
    finally:
        a.stop()
        b_live.stop()
    assert _free(hosts) == free  # the slots are free again, the hosts live on
    assert "hosted-a" not in list_queries() and actor_states("hosted-b") == {}


def test_slots_of_one_host_feed_each_other_under_backpressure(ray_session):
    # one host: every edge goes from a slot to another slot of the same process, each batch
    # of 8 rows waits for the one before it (max_in_flight=1): the slots' own data threads
    with StepHosts(count=1, capacity=6, name="one") as pool:
        live = _keyed(2000).deploy("one-host", hosts=pool, history=True, batch_size=8,
                                   max_in_flight=1)
        try:
            assert live.wait(120)
            assert_equivalent(live.snapshot(), _keyed(2000).collect(runtime="inline"))
        finally:
            live.stop()


def _queue_rows(q):
    while (row := q.get()) is not None:
        yield row


def test_a_query_composed_on_a_hosted_one(hosts):
    feed: queue.Queue = queue.Queue()
    pub = (Stream.from_rows(_queue_rows(feed), start="t", advance=AdvanceTime(every=5))
           .select(lambda r: r["t"]).deploy("hosted-pub", hosts=hosts, history=True))
    sub = None
    try:
        sub = (Stream.published("hosted-pub").select(lambda t: t * 100)
               .deploy("hosted-sub", hosts=hosts, history=True))
        for t in range(50):
            feed.put({"t": t})
        feed.put(None)
        assert pub.wait(60) and sub.wait(60)
        assert sorted(p for _, _, p in sub.snapshot()) == [t * 100 for t in range(50)]
    finally:
        feed.put(None)
        pub.stop()
        if sub is not None:
            sub.stop()


def test_a_freed_slot_refuses_calls_made_for_its_old_step(ray_session):
    import ray

    with StepHosts(count=1, capacity=4, name="reuse") as pool:
        first = _keyed(200).deploy("gen-1", hosts=pool, history=True)
        assert first.wait(60)
        old = first.handles["where#1"]
        first.stop()
        second = _keyed(300).deploy("gen-2", hosts=pool, history=True)  # the same slots
        try:
            assert second.handles["where#1"].slot == old.slot
            with pytest.raises(ray.exceptions.RayTaskError, match="was freed"):
                ray.get(old.push.remote(0, b"a batch the stopped query still had in flight"))
            assert second.wait(60)
            assert_equivalent(second.snapshot(), _keyed(300).collect(runtime="inline"))
        finally:
            second.stop()


ATTACH_SCRIPT = textwrap.dedent("""
    import json, sys
    import ray, topology
    ray.init(address=sys.argv[1], namespace="cedar", logging_level="ERROR")
    q = topology.attach(sys.argv[2])
    print(json.dumps(dict(steps=sorted(q.stats()), rows=len(q.snapshot()),
                          queries=topology.running.query.list_queries())))
""")


def test_another_driver_attaches_to_a_hosted_query(hosts, tmp_path):
    live = _keyed(500).deploy("hosted-seen", hosts=hosts, history=True)
    try:
        assert live.wait(60)
        seen = second_driver(ATTACH_SCRIPT, tmp_path, "hosted-seen")
        assert seen["steps"] == sorted(live.stats())
        assert seen["rows"] == len(live.snapshot()) > 0
        assert "hosted-seen" in seen["queries"]
    finally:
        live.stop()


def test_a_full_pool_and_a_checkpointed_query_are_refused(ray_session, tmp_path):
    with StepHosts(count=1, capacity=2, name="small") as pool:
        with pytest.raises(ValueError, match="too few free slots"):
            _keyed().deploy("too-big", hosts=pool)
        assert _free(pool) == 2 and actor_states("too-big") == {}  # nothing kept
        with pytest.raises(ValueError, match="without checkpoint_dir"):
            _keyed().deploy("ckpt", hosts=pool, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="at least 1"):
        StepHosts(count=0)


def test_the_command_line_sees_inspects_and_stops_a_hosted_query(hosts, capsys):
    from topology.app.cli import main

    free = _free(hosts)
    q = Stream.from_events([Insert("a", 0, 50, 7), Cti(10)]).shift(1).deploy(
        "cli-hosted", hosts=hosts, history=True)
    assert q.wait(timeout_s=30)
    assert main(["status"]) == 0
    assert "cli-hosted" in capsys.readouterr().out.split()
    assert main(["inspect", "cli-hosted"]) == 0
    assert "[1, 51) 7" in capsys.readouterr().out
    assert main(["stop", "cli-hosted"]) == 0
    assert "stopped cli-hosted" in capsys.readouterr().out
    assert _free(hosts) == free and "cli-hosted" not in list_queries()


@pytest.mark.slow  # (the default tier keeps its 10 minutes)
def test_a_stopped_step_whose_function_hangs_blocks_nothing_else_of_its_host(ray_session,
                                                                           tmp_path, capsys):
    # one host; "hung"'s where() holds its batch until the test removes the marker. Stopping
    # it frees its name at once and says its slot is stuck; the host's other query stays
    # listed and reachable, and a new deploy takes the free slots, not the stuck one
    marker, entered = str(tmp_path / "hold"), str(tmp_path / "entered")
    open(marker, "w").close()
    rows = [{"t": t} for t in range(20)]
    hung = calm = later = None
    with StepHosts(count=1, capacity=8, name="hang") as pool:
        try:
            calm = _keyed(200).deploy("calm", hosts=pool, history=True)
            assert calm.wait(60)
            hung = (Stream.from_rows(rows, start="t").where(stall_at(5, marker, entered))
                    .deploy("hung", hosts=pool))
            wait_for(lambda: os.path.exists(entered), 30, "the hanging batch")
            stuck_slot = hung.handles["where#1"].slot
            began = time.monotonic()
            with pytest.warns(StuckSlotWarning, match=r"where#1 \(slot \d+.*inside a batch"):
                hung.stop()
            assert time.monotonic() - began < 10
            assert actor_states("hung") == {}  # the name is free
            assert "calm" in list_queries() and "hung" not in list_queries()
            assert attach("calm").snapshot() == calm.snapshot()
            assert set(pool.stuck()) == {"hung/where#1"}
            from topology.app.cli import main

            assert main(["status"]) == 0
            said = capsys.readouterr().out
            assert "calm" in said.split() and "hung" not in said.split()
            assert f"stuck slot {stuck_slot}: hung/where#1 was stopped" in said
            began = time.monotonic()
            later = Stream.from_events([Insert("a", 0, 5, 1), Cti(10)]).deploy(
                "later", hosts=pool, history=True)
            assert later.wait(30) and time.monotonic() - began < 15
            assert stuck_slot not in {h.slot for h in later.handles.values()}
        finally:
            os.remove(marker)  # the function returns: the stuck slot is reset and free
            for q in (hung, calm, later):
                if q is not None:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", StuckSlotWarning)
                        q.stop()
        wait_for(lambda: not pool.stuck() and _free(pool) == 8, 30, "the stuck slot free")


def _raise_at_3(row):
    if row["t"] == 3:
        raise ValueError("row 3 is bad")
    return True


def test_a_query_over_two_hosts_fails_naming_the_step_that_raised(ray_session):
    # from_rows and the window in host 0, where#1 (which raises) and select#3 in host 1: the
    # failure reaches every step downstream of where#1, and only where#1 is the culprit
    rows = [{"t": t} for t in range(10)]
    with StepHosts(count=2, capacity=4, name="two") as pool:
        q = (Stream.from_rows(rows, start="t").where(_raise_at_3).tumbling_window(2)
             .aggregate(Count()).select(lambda c: c + 1).deploy("fails-in-2", hosts=pool))
        try:
            with pytest.raises(QueryFailed) as failed:
                q.wait(60)
            assert failed.value.step == "where#1" and "row 3 is bad" in failed.value.reason
            assert q.state().startswith("failed: step where#1: ")
        finally:
            q.stop()


def test_a_stopped_hosted_query_says_so_on_every_handle(hosts):
    live = _keyed(200).deploy("stopped-hosted", hosts=hosts, history=True)
    other = attach("stopped-hosted")
    try:
        assert live.wait(60)
    finally:
        live.stop()
    for q in (other, live):  # stopped by another handle, and by itself
        assert q.state() == "stopped"
        for call in (q.stats, q.snapshot, q.dead_letters, q.why, lambda q=q: q.wait(5),
                     lambda q=q: next(iter(q.subscribe()))):
            with pytest.raises(QueryStopped, match="'stopped-hosted' was stopped"):
                call()


def test_shutdown_ends_the_query_hosts_of_the_queries_it_held(ray_session):
    # rows in a list are fed by the query's own host actor (<query>/~host): the pool's
    # shutdown ends it too, so nothing of the query is left and its name is free
    rows = [{"t": t} for t in range(100)]
    with StepHosts(count=1, capacity=4, name="ends") as pool:
        q = Stream.from_rows(rows, start="t").deploy("list-fed", hosts=pool, history=True)
        assert q.wait(60)
        assert "~host" in actor_states("list-fed")
    assert actor_states("list-fed") == {}
    with StepHosts(count=1, capacity=4, name="ends") as pool:
        again = Stream.from_rows(rows, start="t").deploy("list-fed", hosts=pool, history=True)
        assert again.wait(60)
        again.stop()


_EXIT_AFTER_SHUTDOWN = """
import ray
from topology import Count, StepHosts, Stream
ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="cedar")
pool = StepHosts(count=1, capacity=4, name="exit-check")
q = Stream.from_rows([{"t": i} for i in range(100)], start="t").tumbling_window(10) \\
    .aggregate(Count())
q.deploy("exit-check", hosts=pool, detached=False).wait(60)
ray.shutdown()
"""


@pytest.mark.slow  # (the default tier keeps its 10 minutes)
def test_a_process_that_shut_ray_down_exits_without_calling_ray_again(tmp_path):
    """A hosted query deployed with detached=False frees its slots at the process's exit;
    after ray.shutdown() there is nothing to free, and a call would start Ray again, or join
    the cluster /tmp/ray last recorded (hanging when that one is gone)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    run = subprocess.run([sys.executable, "-c", _EXIT_AFTER_SHUTDOWN], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Connecting to existing Ray cluster" not in run.stderr, run.stderr[-3000:]
    assert run.stderr.count("Started a local Ray instance") == 1, run.stderr[-3000:]
