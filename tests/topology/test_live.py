"""Live queries on a real local Ray instance: one actor per operator, inspection from another
driver while data flows, dynamic composition, partitioned group_apply, errors and latency."""

from __future__ import annotations

import queue
import textwrap
import threading
import time

import pytest

from operators.events import Cti, Insert
from operators.ingress import AdvanceTime
from tests.kit import assert_equivalent
from tests.topology.live_kit import second_driver
from topology import Stream, attach

pytestmark = pytest.mark.ray


def _named(prefix):
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == "cedar" and a["name"].startswith(prefix + "/"))


def _readings(n, keys=3):
    return [Insert(f"m{i}", i, i + 4, {"k": i % keys, "v": i % 5}) for i in range(n)] + [
        Cti(n + 4)]


def _rates(keys=3):
    return [Insert(f"r{k}", 0, 10_000, {"k": k, "rate": 10 + k}) for k in range(keys)] + [
        Cti(10_000)]


def _queue_rows(q):
    """Rows from a queue until None: a source the test feeds while the query runs."""
    while True:
        row = q.get()
        if row is None:
            return
        yield row


def _wait_for(pred, timeout_s=20.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_filter_window_join_runs_one_actor_per_operator(ray_session):
    # readings ──where──count_window(2).aggregate──┐
    #                                               join on k ── sink
    # rates ────────────────────────────────────────┘
    windowed = (Stream.from_events(_readings(60))
                .where(lambda p: p["v"] > 0)
                .count_window(2).aggregate(lambda ps: {"k": ps[0]["k"], "n": len(ps)}))
    query = windowed.join(Stream.from_events(_rates()), on=("k", "k"),
                          select=lambda a, b: (a["k"], a["n"], b["rate"]))
    live = query.deploy("fwj", history=True)
    try:
        steps = ["from_events#0", "where#1", "count.aggregate#2", "from_events#3", "join#4",
                 "sink"]
        # one actor per step, and the query's host, which feeds the sources from the cluster
        assert _named("fwj") == sorted(f"fwj/{s}" for s in [*steps, "~host"])
        assert live.wait(60)
        stats = live.stats()
        assert len({s["pid"] for s in stats.values()}) == len(steps)  # six processes
        assert stats["where#1"]["events_in"] == 61 and stats["join#4"]["events_out"] > 0
        assert all(s["error"] is None and s["finished"] for s in stats.values())
        assert_equivalent(live.snapshot(), query.collect(runtime="inline"))
    finally:
        live.stop()
    assert _named("fwj") == []


ATTACH_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import ray, topology
    ray.init(address=sys.argv[1], namespace="cedar", logging_level="ERROR")
    q = topology.attach(sys.argv[2])
    t0 = time.monotonic(); first = q.stats(); t1 = time.monotonic()
    time.sleep(0.5)
    second = q.stats(); snap = q.snapshot()
    print(json.dumps(dict(steps=sorted(first), latency=t1 - t0,
                          src=[first["from_rows#0"]["events_in"],
                               second["from_rows#0"]["events_in"]],
                          finished=second["sink"]["finished"], snapshot=len(snap))))
""")


def test_stats_and_snapshot_from_a_second_driver_while_data_flows(ray_session, tmp_path):
    stop = threading.Event()

    def rows():  # ~500 rows/s until the test is done
        i = 0
        while not stop.is_set():
            yield {"t": i, "v": i % 7}
            i += 1
            time.sleep(0.002)

    q = (Stream.from_rows(rows(), start="t", advance=AdvanceTime(every=20))
         .where(lambda r: r["v"] != 3).deploy("flowing"))
    try:
        _wait_for(lambda: q.stats()["sink"]["events_in"] > 0, what="first output")
        seen = second_driver(ATTACH_SCRIPT, tmp_path, "flowing")
        assert seen["steps"] == ["from_rows#0", "sink", "where#1"]
        assert 0 < seen["src"][0] < seen["src"][1]  # data flowed between the two calls
        assert not seen["finished"] and seen["snapshot"] > 0
        assert seen["latency"] < 5
    finally:
        stop.set()
        q.stop()


def test_a_composed_query_gets_the_alive_events_then_the_live_stream(ray_session):
    #  publisher: intervals [t, t + 10) for t = 0, 1, 2, ...; CTI every 5 events
    #  phase 1: t = 0..39, CTI 39 ──── newcomer subscribes here: alive = rows with end >= 39
    #  phase 2: t = 40..59, end of input (final CTI 69)
    feed: queue.Queue = queue.Queue()
    pub_stream = (Stream.from_rows(_queue_rows(feed), start="t", end="e", shape="interval",
                                   advance=AdvanceTime(every=5))
                  .select(lambda r: r["t"]))
    pub = pub_stream.deploy("pub", history=True)
    sub = None
    try:
        for t in range(40):
            feed.put({"t": t, "e": t + 10})
        _wait_for(lambda: pub.stats()["sink"]["cti"] == 39, what="publisher CTI 39")
        sub = Stream.published("pub").select(lambda t: t * 100).deploy("sub", history=True)
        # the snapshot arrives before any live data: events alive at 39 are t = 29..39
        _wait_for(lambda: sub.stats()["sink"]["events_in"] == 12, what="snapshot")
        assert sub.stats()["sink"]["cti"] == 39
        assert sorted(p for _, _, p in sub.snapshot()) == [t * 100 for t in range(29, 40)]
        for t in range(40, 60):
            feed.put({"t": t, "e": t + 10})
        feed.put(None)
        assert pub.wait(30) and sub.wait(30)
        pub_rows = pub.snapshot()
        assert len(pub_rows) == 60
        expected = [(s, e, p * 100) for s, e, p in pub_rows if e >= 39]
        assert_equivalent(sub.snapshot(), expected)
        # independent: stopping the publisher leaves the newcomer running and answering
        pub.stop()
        assert sub.stats()["sink"]["finished"]
        assert attach("sub").snapshot() == sub.snapshot()
    finally:
        feed.put(None)
        pub.stop()
        if sub is not None:
            sub.stop()


def test_stopping_the_newcomer_leaves_the_publisher_running(ray_session):
    feed: queue.Queue = queue.Queue()
    pub = Stream.from_rows(_queue_rows(feed), start="t", advance=AdvanceTime(every=1)).deploy(
        "pub2", history=True)
    try:
        feed.put({"t": 0})
        sub = Stream.published("pub2").deploy("sub2")
        _wait_for(lambda: sub.stats()["sink"]["events_in"] > 0, what="newcomer input")
        sub.stop()
        for t in range(1, 30):
            feed.put({"t": t})
        feed.put(None)
        assert pub.wait(30)
        assert len(pub.snapshot()) == 30
        assert pub.stats()["sink"]["subscribers"] == 0  # the newcomer detached on stop
    finally:
        feed.put(None)
        pub.stop()


def test_subscribe_streams_the_output_and_a_slow_source_is_flushed_in_time(ray_session):
    #  rows arrive one by one, far apart, and no CTI is generated: each event must still reach
    #  the subscriber after the flush time bound, not wait for a full batch or the end
    feed: queue.Queue = queue.Queue()
    q = Stream.from_rows(_queue_rows(feed), start="t").select(lambda r: r["t"]).deploy(
        "slow", flush_ms=20)
    try:
        out = q.subscribe(snapshot=True)
        feed.put({"t": 5})
        t0 = time.monotonic()
        first = next(out)
        assert first == Insert(0, 5, 6, 5)
        assert time.monotonic() - t0 < 30  # the flush bound, not a full batch, sent it
        feed.put({"t": 7})
        assert next(out).payload == 7
        feed.put(None)
        rest = list(out)
        assert rest == [Cti(8)]  # the final CTI at the end of input, then the iterator ends
    finally:
        feed.put(None)
        q.stop()


def test_late_events_and_dead_letters_are_visible_on_the_query(ray_session):
    rows = [{"t": 10}, {"t": 3}, {"t": None}, {"t": 12}]
    q = Stream.from_rows(rows, start="t", advance=AdvanceTime(every=1)).deploy("sources")
    try:
        assert q.wait(30)
        assert [r.action for r in q.late()] == ["dropped"]
        dead = q.dead_letters()
        assert len(dead) == 1 and "missing" in dead[0].reason
        src = q.stats()["from_rows#0"]
        assert (src["late"], src["dead_letters"]) == (1, 1)
        assert src["source"]["received"] == 4
    finally:
        q.stop()


def test_deploy_refuses_a_name_in_use_and_attach_an_unknown_one(ray_session):
    q = Stream.from_events([Cti(1)]).deploy("taken")
    try:
        with pytest.raises(ValueError, match="is running"):
            Stream.from_events([Cti(1)]).deploy("taken")
        with pytest.raises(ValueError, match="no running query"):
            attach("never-deployed")
        with pytest.raises(ValueError, match="no running query"):
            Stream.published("never-deployed").deploy("orphan")
    finally:
        q.stop()


def test_an_idle_source_advances_time_on_its_own(ray_session):
    #  row t=5, then silence: after idle_timeout the source emits Cti(6) without any new row
    feed: queue.Queue = queue.Queue()
    q = Stream.from_rows(_queue_rows(feed), start="t",
                         advance=AdvanceTime(idle_timeout=0.2)).deploy("idle")
    try:
        out = q.subscribe(snapshot=False)
        feed.put({"t": 5})
        assert next(out).start == 5
        t0 = time.monotonic()
        assert next(out) == Cti(6)
        assert time.monotonic() - t0 > 0.1  # not before the idle timeout
    finally:
        feed.put(None)
        q.stop()
