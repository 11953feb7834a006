"""Tracing and the event-flow debugger, end to end, inline and on Ray.

A traced query's recording is read back and checked against the run itself (every output
message recorded at the sink, every step's input equal to its feeder's output), and root
causes are checked against members computed independently from the input rows.
"""

from __future__ import annotations

import json
import os

import pytest

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from topology import Stream, Trace
from topology.seeing.debug import Recording

MIN = 10  # ticks per "minute" of the readings below

# 4 meters, a reading every 3 ticks, some below zero (dropped by the where)
ROWS = [{"meter": m, "ts": t, "kwh": (t * 7 + m * 3) % 11 - 1} for t in range(0, 60, 3)
        for m in range(4)]


def _meter_counts() -> Stream:
    return (Stream.from_rows(ROWS, start="ts")
            .where(lambda r: r["kwh"] >= 0)
            .group_apply(lambda r: r["meter"],
                         lambda g: g.tumbling_window(MIN).aggregate(Count())))


def _collect(q: Stream, runtime: str, trace: object) -> list:
    return q.collect(runtime=runtime, trace=trace)


def _reading(leaf: dict) -> tuple[int, int]:
    p = json.loads(leaf["payload"])
    return p["meter"], p["ts"]


def test_root_cause_of_each_window_is_its_member_readings(runtime, tmp_path):
    path = str(tmp_path / "trace")
    out = _collect(_meter_counts(), runtime, path)
    rec = Trace.open(path)
    assert isinstance(rec, Recording)
    kinds = {s: i["kind"] for s, i in rec.steps.items()}
    assert sorted(kinds.values()) == ["group_apply", "sink", "source", "span"]
    # what the node says (the planner runs it as one keyed window aggregate: explain() says so)
    group = next(i for i in rec.steps.values() if i["kind"] == "group_apply")
    assert group["sub"]["kind"] == "window" and group["sub"]["spec"]["kind"] == "tumbling"
    assert "keyed window aggregate" in group["describe"]
    # every output message went through the sink's recorder, in order
    sink_out = [r for r in rec.by_step["sink"] if r["direction"] == "out"]
    assert [r["kind"] for r in sink_out] == [type(m).__name__.lower() for m in out]
    # every step's input is what its feeder sent
    for step, info in rec.steps.items():
        for src, port in info["inputs"]:
            sent = [(r["kind"], r["id"], r["start"], r["end"])
                    for r in rec.by_step[src] if r["direction"] == "out"]
            got = [(r["kind"], r["id"], r["start"], r["end"])
                   for r in rec.by_step[step] if r["direction"] == "in" and r["port"] == port]
            assert got == sent, step
    checked = 0
    for r in rec.events(step="sink", direction="out", kind="insert"):
        meter, count = json.loads(r["payload"])
        expected = {(row["meter"], row["ts"]) for row in ROWS
                    if row["meter"] == meter and row["kwh"] >= 0
                    and r["start"] <= row["ts"] < r["end"]}
        cause = rec.root_cause("sink", r["id"])
        leaves = cause.leaves()
        assert {leaf["step"] for leaf in leaves} == {"from_rows#0"}
        assert {_reading(leaf) for leaf in leaves} == expected
        assert len(expected) == count
        checked += 1
    assert checked == len(to_cht(out)) > 0


def test_root_cause_through_group_apply_and_union(runtime, tmp_path):
    # a general group_apply (events with lifetimes: not the keyed fast path), then a union
    evs = [Insert(i, i * 2, i * 2 + 5, {"k": i % 2, "v": i}) for i in range(8)] + [Cti(40)]
    other = Stream.from_events([Insert("x", 1, 3, {"k": 0, "v": -1}), Cti(40)])
    q = (Stream.from_events(evs).union(other)
         .group_apply(lambda p: p["k"], lambda g: g.tumbling_window(6).aggregate(Count())))
    path = str(tmp_path / "trace")
    out = _collect(q, runtime, path)
    rec = Recording.open(path)
    assert "union" in {i["kind"] for i in rec.steps.values()}
    inputs = [(m.id, m.start, m.end, m.payload) for m in evs if type(m) is Insert]
    inputs.append(("x", 1, 3, {"k": 0, "v": -1}))
    # speculative outputs are retracted and replaced: the final ones are the output CHT
    retracted = {r["id"] for r in rec.events(step="sink", direction="out", kind="retract")}
    final = [r for r in rec.events(step="sink", direction="out", kind="insert")
             if r["id"] not in retracted]
    assert sorted((r["start"], r["end"], tuple(json.loads(r["payload"]))) for r in final) == \
        sorted(to_cht(out))
    for r in final:
        k, n = json.loads(r["payload"])
        want = {repr(i) for i, s, e, p in inputs
                if p["k"] == k and s < r["end"] and e > r["start"]}
        leaves = rec.root_cause("sink", r["id"]).leaves()
        assert {leaf["id"] for leaf in leaves} == want
        assert len(want) == n


def test_root_cause_of_a_join_output_is_its_pair(runtime, tmp_path):
    left = [Insert(f"l{i}", i, i + 6, {"k": i % 3, "side": "l", "i": i}) for i in range(9)]
    right = [Insert(f"r{i}", 2 * i, 2 * i + 3, {"k": i % 3, "side": "r", "i": i})
             for i in range(6)]
    q = Stream.from_events(left + [Cti(30)]).join(
        Stream.from_events(right + [Cti(30)]), on=("k", "k"))
    path = str(tmp_path / "trace")
    out = _collect(q, runtime, path)
    rec = Recording.open(path)
    outs = rec.events(step="sink", direction="out", kind="insert")
    assert len(outs) == len(to_cht(out)) > 0
    for r in outs:
        pairs = {(lm.id, rm.id) for lm in left for rm in right
                 if lm.payload["k"] == rm.payload["k"]
                 and max(lm.start, rm.start) == r["start"] and min(lm.end, rm.end) == r["end"]
                 and repr((lm.payload, rm.payload)) == r["payload_repr"]}
        assert len(pairs) == 1
        (lid, rid), = pairs
        assert {leaf["id"] for leaf in rec.root_cause("sink", r["id"]).leaves()} == {
            repr(lid), repr(rid)}


def test_bounds_retractions_and_dead_letters(tmp_path):
    evs = [Insert("a", 0, 10, 1), Insert("b", 20, 30, 2), Retract("a", 0, 10, 4, 1),
           Insert("c", 40, 45, 3), Cti(5), Insert("late", 1, 2, 4), Cti(50)]
    q = Stream.from_events(evs).shift(1)
    out = q.collect(runtime="inline", trace=str(tmp_path / "all"))
    rec = Recording.open(str(tmp_path / "all"))
    src = rec.by_step["from_events#0"]
    dead = [r for r in src if r["kind"] == "dead_letter"]
    assert len(dead) == 1 and "behind the CTI" in dead[0]["note"] and dead[0]["id"] == "'late'"
    retract = rec.events(step="shift", direction="out", kind="retract")
    assert [(r["id"], r["start"], r["end"], r["new_end"]) for r in retract] == [
        ("'a'", 1, 11, 5)]
    assert len(rec.events(step="sink", direction="out")) == len(out)
    # a time range, a payload predicate, a step list and a limit
    q.collect(runtime="inline", trace=Trace(str(tmp_path / "some"), steps=["shift#1"],
                                            start=15, end=42, where=lambda p: p != 3))
    some = Recording.open(str(tmp_path / "some"))
    assert set(some.by_step) == {"shift#1"}
    assert {r["id"] for r in some.by_step["shift#1"] if r["kind"] != "cti"} == {"'b'"}
    assert [r["start"] for r in some.by_step["shift#1"] if r["kind"] == "cti"] == []
    q.collect(runtime="inline", trace=Trace(str(tmp_path / "few"), limit=2))
    few = Recording.open(str(tmp_path / "few"))
    for step in few.steps:
        rows = few.by_step.get(step, [])
        assert sum(r["direction"] == "in" for r in rows) <= 2
        assert sum(r["direction"] == "out" for r in rows) <= 2


def test_payloads_of_any_type_are_recorded(tmp_path):
    class Odd:
        def __repr__(self) -> str:
            return "Odd()"

    evs = [Insert(1, 0, 1, {"a": (1, 2)}), Insert(2, 1, 2, Odd()), Insert(3, 2, 3, {1: b"x"}),
           Cti(3)]
    Stream.from_events(evs).collect(runtime="inline", trace=str(tmp_path))
    rows = Recording.open(str(tmp_path)).events(step="sink", direction="out", kind="insert")
    assert [r["payload_repr"] for r in rows] == ["{'a': (1, 2)}", "Odd()", "{1: b'x'}"]
    assert json.loads(rows[0]["payload"]) == {"a": [1, 2]}
    assert json.loads(rows[1]["payload"]) == "Odd()"


def test_tracing_off_writes_nothing(tmp_path):
    os.chdir(tmp_path)
    Stream.from_events([Insert(1, 0, 1, 1), Cti(1)]).collect(runtime="inline")
    assert os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError, match=r"no plan\.json"):
        Recording.open(str(tmp_path))


@pytest.mark.ray
def test_deploy_with_a_trace(ray_session, tmp_path):
    import time

    path = str(tmp_path / "live")
    q = _meter_counts().deploy("traced-meters", trace=path)
    try:
        deadline = time.monotonic() + 60
        while not all(s.get("finished") for s in q.stats().values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        q.stop()
    rec = Recording.open(path)
    parts = os.listdir(os.path.join(path, "parts"))
    assert len({p.split("-")[0] for p in parts}) == len(rec.steps)  # a part per actor
    expected = _meter_counts().collect(runtime="inline")
    got = rec.events(step="sink", direction="out")
    assert len(got) == len(expected)


def test_the_demo_explains_one_anomaly(tmp_path):
    from topology.app.demo import TICKS_PER_S, explain, generate

    data = generate(meters=6, minutes=40)
    out = str(tmp_path)
    written = explain(data, out)
    for label, path in written.items():
        if "*" not in path:
            assert os.path.getsize(path) > 0, label
    rec = Recording.open(os.path.join(out, "trace-anomalies"))
    first = rec.events(step="sink", direction="out", kind="insert")[0]
    meter = json.loads(first["payload"])[0]
    # the window's readings of that meter, from the generated data (late ones were dropped)
    in_window = {(r["meter"], r["ts"]) for r in data.readings
                 if r["meter"] == meter and r["ts"] is not None
                 and first["start"] <= r["ts"] < first["end"]}
    ingested = {(json.loads(r["payload"])["meter"], json.loads(r["payload"])["ts"])
               for r in rec.events(step="readings", direction="out", kind="insert")}
    leaves = {_reading(leaf) for leaf in rec.root_cause("sink", first["id"]).leaves()}
    assert leaves == in_window & ingested
    assert first["end"] - first["start"] == 5 * 60 * TICKS_PER_S
    with open(written["anomaly root cause (text)"], encoding="utf-8") as f:
        text = f.read()
    assert text.count("readings  insert") == len(leaves)
