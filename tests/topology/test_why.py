"""``why``: built scenarios with a known culprit, inline, on Ray (``collect()``) and for a
deployed query: one idle input of a join, one ``group_apply`` partition behind, late events
under ``drop`` and under ``adjust``. Every scenario is run with the culprit on either side, so
an explanation that named the wrong input fails."""

from __future__ import annotations

import json
import queue
import time

import pytest

from operators.key_groups import KEY_GROUPS, key_group, partition_of
from tests.topology.live_kit import rows as _rows
from tests.topology.live_kit import stall_at
from tests.topology.live_kit import wait_for as _wait_for
from topology import AdvanceTime, Count, Stream
from topology.building.times import TIMESTAMPS
from topology.running.progress import Progress, StepProgress
from topology.seeing.why import explain

MINUTE = 60_000_000


def _settled(q) -> bool:
    """Whether the sink's CTI has caught up with the smallest source CTI (under load a batch
    can still be on its way to the join: then the join, rightly, is what holds it back)."""
    stats = q.stats()
    sources = [s["cti"] for step, s in stats.items() if step in ("left", "right")]
    return stats["sink"]["cti"] == min(sources)


def _hop(e, step):
    return {h.step: h for h in e.hops}[step]


# -- one idle input of a join -------------------------------------------------------------------
#
#   left   0 10 20 ... 990 │ end: CTI 991          (short = "left": 0 .. 90, CTI 91)
#   right  0 10 20 ... 90  │ end: CTI 91
#   join   once both ended, CTI max(991, 91) = 991 (an input that ended holds nothing back):
#          the output at 500 is final; at 2000 it is not produced, and the walk compares the
#          inputs' final CTIs (the short side's 91 is the smaller)

@pytest.mark.parametrize("short", ["left", "right"])
def test_a_join_is_held_back_by_its_short_input(runtime, short):
    def side(name):
        stop = 100 if name == short else 1000
        return Stream.from_rows([{"k": 1, "t": t} for t in range(0, stop, 10)], start="t",
                                advance=AdvanceTime(every=1), name=name)

    out = side("left").join(side("right"), on=("k", "k")).collect(runtime=runtime)
    assert out.why(500).status == "final"  # the short side ended: it holds nothing back
    e = out.why(2000)
    assert e.status == "not yet produced"
    assert e.culprit == short
    assert e.hops[-1].step == short
    join = next(h for h in e.hops if h.step.startswith("join"))
    assert join.min_from == short and join.min_cti == 91
    assert {up: c for _, up, c in join.inputs} == \
        {short: 91, ({"left", "right"} - {short}).pop(): 991}
    assert "ended" in e.reason and e.idle_s is not None and e.idle_s >= 0
    # before the short side's end: final, with the rows that cover it
    done = out.why(50)
    assert done.status == "final" and done.culprit is None and done.rows
    assert out.why((40, 60)).final


def test_a_traced_or_checkpointed_run_explains_itself_too(runtime, tmp_path):
    def side(name, stop):
        return Stream.from_rows([{"k": 1, "t": t} for t in range(0, stop, 10)], start="t",
                                advance=AdvanceTime(every=1), name=name)

    q = side("left", 1000).join(side("right", 100), on=("k", "k"))
    runs = [q.collect(runtime=runtime, trace=str(tmp_path / "trace"))]
    if runtime == "ray":
        runs.append(q.collect(runtime=runtime, checkpoint_dir=str(tmp_path / "ckpt")))
    for out in runs:
        e = out.why(2000)
        assert (e.status, e.culprit) == ("not yet produced", "right"), str(e)


def test_a_deployed_join_names_its_idle_input_and_the_idle_timeout_that_moves_it(ray_session):
    #   left   0 1 2 ... 499 (CTI every row)            → CTI 499
    #   right  0 100 200 | 350   (CTI every 3 rows)     → CTI 200; 350 waits for a CTI
    #   the join's output at 300 (left 300 ⋈ right?) is held by right, idle since its last row
    lf, rf = queue.Queue(), queue.Queue()
    left = Stream.from_rows(_rows(lf), start="t", advance=AdvanceTime(every=1), name="left")
    right = Stream.from_rows(_rows(rf), start="t", advance=AdvanceTime(every=3), name="right")
    q = left.join(right, on=("k", "k")).deploy("why-idle", flush_ms=20)
    try:
        for t in range(500):
            lf.put({"k": 1, "t": t})
        for t in (0, 100, 200, 350):
            rf.put({"k": 1, "t": t})
        _wait_for(lambda: q.stats()["left"]["cti"] == 499 and
                  q.stats()["right"]["events_in"] == 4, what="both inputs taken")
        _wait_for(lambda: _settled(q), what="the join and the sink to take their inputs")
        time.sleep(1.2)
        e = q.why(300)
        assert e.status == "not yet produced"
        assert e.culprit == "right", str(e)
        assert _hop(e, "right").cti == 200
        join = next(h for h in e.hops if h.step.startswith("join"))
        assert join.min_from == "right" and join.min_cti == 200
        assert {up: c for _, up, c in join.inputs} == {"left": 499, "right": 200}
        assert e.idle_s is not None and e.idle_s >= 1.0  # its CTI last moved > 1 s ago
        assert join.min_advanced_s is not None and join.min_advanced_s >= 1.0
        assert e.advice is not None and "idle_timeout=" in e.advice and "351" in e.advice
        assert "AdvanceTime(every=3, idle_timeout=None)" in e.advice
        text = str(e)
        assert "held back by right" in text and "idle_timeout=" in text
        json.dumps(e.to_dict())
        # the output at 100 (left 100 ⋈ right 100) is final
        assert q.why(100).status == "final"
    finally:
        lf.put(None)
        rf.put(None)
        q.stop()


# -- one partition behind in a group_apply ------------------------------------------------------
#
#   key `busy` has a reading every tick 0..99; the others only in 0..9.
#   session windows (gap 5): busy's session never closes, so its partition's output CTI stays
#   at 0 while its input is at 100; the merge's CTI is the minimum of its partitions'.

def _sessions(busy: str, rows):
    return (Stream.from_rows(rows, start="t", advance=AdvanceTime(every=4), name="meters")
            .group_apply("k", lambda s: s.session_window(5).aggregate(Count()), partitions=2))


def _readings(busy: str, stop: int = 100):
    return [{"k": k, "t": t} for t in range(stop) for k in ("a", "b", "c", "p")
            if k == busy or t < 10]


def _partition(key: str) -> int:
    return partition_of(key_group(key, KEY_GROUPS), 2, KEY_GROUPS)


@pytest.mark.parametrize("busy", ["a", "p"])  # "a" in partition 1, "p" in 0
def test_a_partition_behind_in_a_group_apply(runtime, busy):
    behind = f"group_apply#1[{_partition(busy)}]"
    other = f"group_apply#1[{1 - _partition(busy)}]"
    out = _sessions(busy, _readings(busy)).collect(runtime=runtime)
    e = out.why(100)  # busy's session [0, 104) covers it: produced, not final
    assert e.status == "speculative"
    merge = _hop(e, "group_apply#1")
    assert merge.min_from == behind, str(e)
    assert {up: c for _, up, c in merge.inputs} == {behind: 0, other: 100}
    assert _hop(e, behind).holds is not None  # its state holds its CTI behind its input
    assert e.culprit == "meters"  # and past 100 the source, which ended, holds everyone
    part = out.why(50, step=behind)  # the partition itself: its state holds its CTI at 0
    assert (part.status, part.culprit, part.cti) == ("not final", behind, 0)
    assert "state" in part.reason
    assert out.why(50, step=other).status == "final"


@pytest.mark.parametrize("busy", ["a", "p"])
def test_a_deployed_group_apply_names_the_partition_behind(ray_session, busy):
    behind = f"group_apply#1[{_partition(busy)}]"
    feed: queue.Queue = queue.Queue()
    q = _sessions(busy, _rows(feed)).deploy("why-part", flush_ms=20)
    try:
        for row in _readings(busy):
            feed.put(row)
        _wait_for(lambda: q.stats()["meters"]["cti"] >= 90, what="the source's CTI")
        _wait_for(lambda: all(q.stats()[f"group_apply#1[{p}]"]["events_in"] > 0
                              for p in (0, 1)), what="both partitions")
        # the sink holds busy's open session (which covers 50) once it has come through
        _wait_for(lambda: q.why(50).status == "speculative", what="the open session's output")
        e = q.why(50)
        assert e.culprit == behind, str(e)
        assert "state" in e.reason
        assert _hop(e, "group_apply#1").min_from == behind
    finally:
        feed.put(None)
        q.stop()


# -- late events under drop and under adjust -----------------------------------------------------
#
#   late side:  0  10  20  5 (late: behind CTI 20)  30
#   drop:   the point at 5 is dropped: the window [0, 10) is final without it
#   adjust: the interval [5, 25) is moved to [20, 25)

def _two_sources(late_side: str, policy: str):
    shape = "point" if policy == "drop" else "interval"

    def side(name):
        ts = [0, 10, 20, 5, 30] if name == late_side else [1, 11, 21, 31]
        rows = [{"t": t, "u": t + (20 if t == 5 else 3)} for t in ts]
        return Stream.from_rows(rows, start="t", end=None if shape == "point" else "u",
                                shape=shape, advance=AdvanceTime(every=1, policy=policy),
                                name=name)
    return side("a").union(side("b"))


@pytest.mark.parametrize("late_side", ["a", "b"])
def test_late_events_dropped_out_of_a_window_are_named_with_their_times(runtime, late_side):
    q = _two_sources(late_side, "drop").tumbling_window(10).aggregate(Count())
    out = q.collect(runtime=runtime)
    e = out.why(5)
    assert e.status == "final"
    assert e.late_count == 1, str(e)
    (late,) = e.late
    assert (late.where, late.action, late.start, late.end, late.sent) == \
        (late_side, "dropped", 5, 6, None)
    assert "dropped at 5 " in str(e)  # a point: at its time
    assert out.why(15).late_count == 0  # the window [10, 20) lost nothing


@pytest.mark.parametrize("late_side", ["a", "b"])
def test_late_events_adjusted_are_named_with_their_original_times(runtime, late_side):
    out = _two_sources(late_side, "adjust").collect(runtime=runtime)
    e = out.why(22)
    (late,) = e.late
    assert (late.where, late.action, late.start, late.end, late.sent) == \
        (late_side, "adjusted", 5, 25, (20, 25))
    assert "adjusted [5, 25), sent as [20, 25)" in str(e)
    assert out.why(35).late == ()


def test_a_deployed_query_names_its_late_events(ray_session):
    feed: queue.Queue = queue.Queue()
    q = (Stream.from_rows(_rows(feed), start="t", advance=AdvanceTime(every=1), name="src")
         .tumbling_window(10).aggregate(Count()).deploy("why-late", flush_ms=20))
    try:
        for t in (0, 10, 20, 5, 30, 7):
            feed.put({"t": t})
        _wait_for(lambda: q.stats()["src"]["late"] == 2, what="two late rows")
        # the source counted them; the CTI past the window reaches the sink a moment later
        _wait_for(lambda: q.why((0, 10)).status == "final", what="the window [0, 10) final")
        e = q.why((0, 10))
        assert [(r.where, r.action, r.start) for r in e.late] == \
            [("src", "dropped", 5), ("src", "dropped", 7)]
        assert q.why(35).status in ("speculative", "not yet produced")
    finally:
        feed.put(None)
        q.stop()


# -- the pure function --------------------------------------------------------------------------

def test_a_step_behind_what_its_input_has_sent_is_the_culprit():
    #   src has sent CTI 900; slow has processed up to 100 (batches in flight to it)
    p = Progress(steps={"src": StepProgress("src", cti=900, in_flight=4),
                        "slow": StepProgress("slow", cti=100, in_ctis=(100,)),
                        "sink": StepProgress("sink", cti=100, in_ctis=(100,))},
                 inputs={"slow": ((0, "src"),), "sink": ((0, "slow"),)}, output="sink")
    e = explain(p, 500, rows=[])
    assert e.culprit == "slow" and "4 batches in flight" in e.reason
    assert [h.step for h in e.hops] == ["sink", "slow"]


def test_timestamp_plans_read_as_times_and_durations():
    start = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
    p = Progress(steps={"src": StepProgress("src", cti=start + MINUTE, cti_wall=100.0,
                                            push_wall=100.0),
                        "sink": StepProgress("sink", cti=start + MINUTE)},
                 inputs={"sink": ((0, "src"),)}, output="sink", clock=TIMESTAMPS)
    e = explain(p, "2026-01-01T00:05:00Z", rows=[], now=102.5)
    text = str(e)
    assert "2026-01-01T00:05:00Z" in text and "2026-01-01T00:01:00Z" in text
    assert "2.5 s ago" in text
    assert str(start) not in text
    assert e.to_dict()["hops"][0]["cti_shown"] == "2026-01-01T00:01:00Z"
    plain = explain(Progress(steps={"s": StepProgress("s", cti=7)}, inputs={}, output="s"),
                    9, rows=[])
    assert "at 9" in str(plain) and "CTI is 7" in str(plain)


# -- cedar why ----------------------------------------------------------------------------------

def test_cedar_why_shows_times_and_names_the_idle_input(ray_session, capsys):
    import datetime as dt

    from topology.app.cli import main

    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    left = Stream.from_rows([{"k": 1, "ts": base + dt.timedelta(seconds=i)} for i in range(300)],
                            start="ts", advance=AdvanceTime(every=1), name="left")
    rf: queue.Queue = queue.Queue()
    right = Stream.from_rows(_rows(rf), start="ts", advance=AdvanceTime(every=3), name="right")
    q = left.join(right, on=("k", "k")).deploy("why-cli", flush_ms=20)
    try:
        for s in (0, 60, 120, 200):
            rf.put({"k": 1, "ts": base + dt.timedelta(seconds=s)})
        _wait_for(lambda: q.stats()["right"]["events_in"] == 4 and
                  q.stats()["left"]["finished"], what="both inputs taken")
        _wait_for(lambda: _settled(q), what="the join and the sink to take their inputs")
        assert main(["why", "why-cli", "--at", "2026-01-01T00:02:30Z"]) == 0
        text = capsys.readouterr().out
        assert "why sink at 2026-01-01T00:02:30Z (query why-cli)" in text
        assert "held back by right" in text
        assert "CTI 2026-01-01T00:02:00Z" in text  # right's, from its third row
        assert "idle_timeout=" in text and "2026-01-01T00:03:20.000001Z" in text
        assert " ago" in text and "1767225" not in text  # no ticks for a person
        assert main(["why", "why-cli", "--at", "02:30", "--tz", "Mars/Base"]) == 2
        assert main(["why", "why-cli", "--window", "2026-01-01T00:00:00Z",
                     "2026-01-01T00:00:01Z", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["status"] == "final" and data["what"].startswith("sink over [")
    finally:
        rf.put(None)
        q.stop()


def test_an_input_that_ended_is_never_the_culprit():
    # the join's right input ended at 5 (a reference table read to its end): only the left
    # one, at 20, can hold the join back; before, the walk took the smaller CTI, the right's
    steps = {"left": StepProgress("left", cti=20), "right": StepProgress("right", cti=5,
                                                                           finished=True),
             "join": StepProgress("join", cti=20, in_ctis=(20, 5), in_ended=(1,))}
    p = Progress(steps, {"join": ((0, "left"), (1, "right"))}, "join", "ticks")
    e = explain(p, 500, rows=[])
    assert (e.status, e.culprit, e.hops[0].min_from) == ("not yet produced", "left", "left")


# -- a busy step, a failed query, a final time whose row was let go -----------------------------
#
#   from_rows 0..19 ─▶ where#1 (holds its batch at t=5 until the test lets go) ─▶ sink
#   why() answers at once from what where#1 last reported, and says it is busy

def test_why_of_a_step_busy_in_one_batch_answers_at_once_and_says_so(ray_session, tmp_path):
    import os

    marker, entered = str(tmp_path / "hold"), str(tmp_path / "entered")
    open(marker, "w").close()
    rows = [{"t": t} for t in range(20)]
    q = (Stream.from_rows(rows, start="t").where(stall_at(5, marker, entered))
         .deploy("why-busy", history=True))
    try:
        _wait_for(lambda: os.path.exists(entered), 30, "the batch that holds")
        time.sleep(0.5)
        began = time.monotonic()
        e = q.why()
        assert time.monotonic() - began < 5
        assert [s for s, _ in e.busy] == ["where#1"], str(e)
        assert "busy: where#1 has been inside one batch for" in str(e)
        assert q.stats()["where#1"]["busy"] and q.state() == "running"
        assert json.loads(json.dumps(e.to_dict()))["busy"][0]["step"] == "where#1"
    finally:
        os.remove(marker)
    try:
        assert q.wait(60)
        assert not q.stats()["where#1"]["busy"]
    finally:
        q.stop()


def _bad_row(row):
    if row["t"] == 3:
        raise ValueError("row 3 is bad")
    return True


def test_why_of_a_failed_query_says_it_failed_and_where(ray_session):
    from topology.running.query import QueryFailed

    rows = [{"t": t} for t in range(10)]
    q = Stream.from_rows(rows, start="t").where(_bad_row).select(lambda r: r).deploy("why-fail")
    try:
        with pytest.raises(QueryFailed):
            q.wait(60)
        e = q.why()
        assert (e.status, e.culprit) == ("failed", "where#1"), str(e)
        assert "the query failed" in str(e) and "row 3 is bad" in e.reason
    finally:
        q.stop()


#   rows  [0, 5) a   [20, 25) b      CTI 30 ─ without history the sink lets [0, 5) go:
#   why(2) is final, and must not claim that no output covers it

@pytest.mark.parametrize("history", [False, True])
def test_why_of_a_final_time_whose_row_was_let_go(ray_session, history):
    from operators.events import Cti, Insert

    q = Stream.from_events([Insert("a", 0, 5, "a"), Insert("b", 20, 25, "b"), Cti(30)]).deploy(
        f"why-released-{history}", history=history)
    try:
        assert q.wait(60)
        e = q.why(2)
        assert e.status == "final"
        assert "no output covers it" not in str(e)
        if history:
            assert [p for _, _, p in e.rows] == ["'a'"]
            assert "no output covers it (and none will)" in str(q.why(10))  # nothing there
        else:
            assert "not kept (deploy with history=True" in str(e)
    finally:
        q.stop()


def _hold_while(marker):
    """A read for ``inspect`` that keeps the step's control thread while ``marker`` exists."""
    def read(proc):
        import os
        import time

        while os.path.exists(marker):
            time.sleep(0.05)
    return read


def test_wait_with_a_deadline_sees_the_end_a_second_handle_sees(ray_session, tmp_path):
    # where#1 holds its batch for ~1.5 s; meanwhile from_rows#0's control thread is kept
    # busy (as by a diagnosis that waits for it), so its stats do not answer. The query
    # ends at ~1.5 s: wait(8) must say True, as attach().wait() does, not spend its whole
    # deadline waiting for one step's stats and then say False
    import os
    import threading

    from topology import attach

    marker, entered = str(tmp_path / "hold"), str(tmp_path / "entered")
    control = str(tmp_path / "control")
    for path in (marker, control):
        open(path, "w").close()
    rows = [{"t": t} for t in range(20)]
    q = (Stream.from_rows(rows, start="t").where(stall_at(5, marker, entered))
         .deploy("wait-agrees", history=True))
    try:
        _wait_for(lambda: os.path.exists(entered), 30, "the batch that holds")
        q.handles["from_rows#0"].inspect.remote(_hold_while(control))
        threading.Timer(1.5, os.remove, (marker,)).start()
        began = time.monotonic()
        assert q.wait(8) is True
        assert time.monotonic() - began < 6
        assert attach("wait-agrees").wait(8) is True
    finally:
        for path in (marker, control):
            if os.path.exists(path):
                os.remove(path)
        q.stop()


# -- a join whose reference input is idle: import_ctis, not idle_timeout ------------------------
#
#   trades  00:00 ... 03:00 (points, CTI every row)          → CTI 03:00
#   rates   EUR [00:00 ─────────────────────────→ ∞  (an edge; CTI 00:00, then idle)
#   join    CTI 00:00: it advances with rates, which an idle timeout moves to 00:00.000001 only

def _reference_join(rates_cti: int, latest: int, shape: str = "edge") -> Progress:
    from operators.ingress import AdvanceTime as Advance
    from topology.running.progress import SourceFacts

    t0 = 1_767_225_600_000_000
    hours3 = t0 + 180 * MINUTE
    return Progress(
        steps={"trades": StepProgress("trades", cti=hours3, cti_wall=100.0, push_wall=100.0,
                                      source=SourceFacts(Advance(every=1), hours3,
                                                         shape="point")),
               "rates": StepProgress("rates", cti=rates_cti, cti_wall=10.0, push_wall=10.0,
                                     source=SourceFacts(Advance(every=1), latest, shape=shape)),
               "join": StepProgress("join", cti=rates_cti, in_ctis=(hours3, rates_cti),
                                    state_size=5000),
               "sink": StepProgress("sink", cti=rates_cti, in_ctis=(rates_cti,))},
        inputs={"join": ((0, "trades"), (1, "rates")), "sink": ((0, "join"),)},
        output="sink", clock=TIMESTAMPS)


@pytest.mark.parametrize("at", [None, "2026-01-01T02:00:00Z"])
def test_an_idle_reference_input_of_a_join_is_told_to_import_ctis(at):
    t0 = 1_767_225_600_000_000
    e = explain(_reference_join(t0, t0), at, rows=[], now=101.0)
    assert e.culprit == "rates" and e.advice_kind == "import_ctis", str(e)
    assert e.advice is not None and 'rates.import_ctis(trades, policy="adjust")' in e.advice
    assert "idle_timeout=" not in e.advice and "3 h ahead" in e.advice
    assert "docs/ctis.md" in e.advice
    # the report and the web view's JSON say it in the same words
    line = e.to_dict()["advice_text"]
    assert line.startswith("lagging input: join") and line in str(e).splitlines()
    assert "idle source" not in str(e)


def test_a_paused_live_input_whose_events_an_idle_timeout_covers_keeps_that_advice():
    #   a point input paused at 01:00 with an event waiting for a CTI: the idle timeout makes
    #   the output at 00:30 final; it is the fix, not import_ctis
    t0 = 1_767_225_600_000_000
    e = explain(_reference_join(t0, t0 + 60 * MINUTE, shape="point"), "2026-01-01T00:30:00Z",
                rows=[], now=101.0)
    assert e.advice_kind == "idle_timeout" and "idle_timeout=" in (e.advice or "")
    assert e.to_dict()["advice_text"].startswith("idle source: rates has AdvanceTime(")
    # asked past what the idle timeout reaches, it cannot help: import_ctis
    late = explain(_reference_join(t0, t0 + 60 * MINUTE, shape="point"),
                   "2026-01-01T02:00:00Z", rows=[], now=101.0)
    assert late.advice_kind == "import_ctis" and "idle_timeout=" not in (late.advice or "")


def test_payload_times_in_the_report_read_as_times():
    #   the output window [00:00, 00:05) holds a spike at 00:02 (its payload's ts, in ticks);
    #   a late reading at 00:01 was dropped out of it
    from topology.running.progress import Late, SourceFacts

    t0 = 1_767_225_600_000_000
    late = Late("src", "dropped", t0 + MINUTE, t0 + MINUTE + 1, None, "behind the CTI",
                f"{{'ts': {t0 + MINUTE}, 'kwh': 9.0}}")
    p = Progress(steps={"src": StepProgress("src", cti=t0 + 10 * MINUTE,
                                            source=SourceFacts(late=(late,), late_count=1)),
                        "sink": StepProgress("sink", cti=t0 + 10 * MINUTE)},
                 inputs={"sink": ((0, "src"),)}, output="sink", clock=TIMESTAMPS)
    e = explain(p, "2026-01-01T00:02:00Z",
                rows=[(t0, t0 + 5 * MINUTE, {"ts": t0 + 2 * MINUTE, "kwh": 4.2})])
    text = str(e)
    assert "{'kwh': 4.2, 'ts': 2026-01-01T00:02:00Z}" in text, text  # (reprlib sorts keys)
    assert "src: dropped at 2026-01-01T00:01:00Z {'ts': 2026-01-01T00:01:00Z" in text, text
    assert str(t0) not in text and str(t0 + MINUTE) not in text
    d = e.to_dict()
    assert d["rows"][0]["payload"] == "{'kwh': 4.2, 'ts': 2026-01-01T00:02:00Z}"
    assert d["late"][0]["text"].startswith("dropped at 2026-01-01T00:01:00Z {'ts': 2026-")
