"""Seeing a ``detect`` step (docs/patterns.md#seeing-a-detect-step): its live partial
matches per key (symbols bound so far, events, deadline) and the candidate runs that ended
without a match with what ended each, in the operator (row and column paths), in ``why``'s
report and the web view's JSON (times as times), on a deployed query; and the debugger's
root cause of a match, its events."""

from __future__ import annotations

import copy
import datetime as dt
import queue

import numpy as np
import pytest

from operators.cht import to_cht
from operators.columns import Columns
from operators.detect import Detect
from operators.detect_seeing import ENDED_KEPT, DetectView, Ended, Partial
from operators.events import Cti, Insert, Retract
from operators.expr import col
from tests.topology.live_kit import EVIL, open_why_panel
from tests.topology.live_kit import rows as _rows
from tests.topology.live_kit import wait_for as _wait_for
from topology import AdvanceTime, Stream
from topology.app.cli import main
from topology.building.times import TIMESTAMPS
from topology.running.progress import Progress, StepProgress
from topology.seeing.debug import Recording
from topology.seeing.ui import why_json
from topology.seeing.why import explain

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T0_TICKS = 1_767_225_600_000_000
SECOND = 1_000_000
ABC = {"A": lambda p, m: p["v"] == "a", "B": lambda p, m: p["v"] == "b",
       "C": lambda p, m: p["v"] == "c"}
AB = {"A": ABC["A"], "B": ABC["B"]}
ABC_COLUMNS = {"A": col("v") == 1, "B": col("v") == 2, "C": col("v") == 3}


def _inserts(rows):
    """``(id, start, v, k)`` rows as inserts of payload ``{"v": v, "k": k}``."""
    return [Insert(i, t, t + 1, {"v": v, "k": k}) for i, t, v, k in rows]


def _columns(rows):
    """``(id, start, v, k)`` rows (int ``v``) as one column batch."""
    ids = np.empty(len(rows), dtype=object)
    ids[:] = [r[0] for r in rows]
    starts = np.array([r[1] for r in rows], dtype=np.int64)
    return Columns(ids, starts, starts + 1, {"v": np.array([r[2] for r in rows]),
                                             "k": np.array([r[3] for r in rows])})


# -- the operator ------------------------------------------------------------------------------
#
#   'A B+ C' within 10, per k
#   k=1   a@1 b@2 b@3 ...         open: A B B so far, deadline 11
#   k=2   a@1 x@2                 ended at event x@2 (no B, no C there)
#   k=3   a@20                    open: A so far, deadline 30
#   Cti(4): nothing final yet but k=2's run (it read x@2 < 4)
#   Cti(12): k=1's run passed its deadline 11 while it wanted rows: ended by that CTI

ROWS = [("e0", 1, "a", 1), ("e1", 2, "b", 1), ("e2", 3, "b", 1), ("e3", 1, "a", 2),
        ("e4", 2, "x", 2), ("e5", 20, "a", 3)]
AS_INTS = {"a": 1, "b": 2, "c": 3, "x": 9}


@pytest.mark.parametrize("path", ["rows", "columns"])
def test_partials_and_ended_runs_in_the_row_and_the_column_path(path):
    if path == "rows":
        op = Detect("A B+ C", ABC, within=10, key=lambda p: p["k"])
        op.process(_inserts(ROWS) + [Cti(4)])
        assert not op.cols.keys
    else:
        op = Detect("A B+ C", ABC_COLUMNS, within=10, key=col("k"))
        op.process([_columns([(i, t, AS_INTS[v], k) for i, t, v, k in ROWS]), Cti(4)])
        assert set(op.cols.keys) == {1, 3} and not op.keys  # (k=2 is freed)
    v = op.partial_matches()
    assert v.partials == (
        Partial("1", (("A", 1), ("B", 2)), 3, ((1, "'e0'"), (2, "'e1'"), (3, "'e2'")), 11,
                False, 1),
        Partial("3", (("A", 1),), 1, ((20, "'e5'"),), 30, False, 1))
    assert v.ended == (Ended("2", 1, "'e3'", "event", 2, "'e4'", 11),)
    op.process([Cti(12)])
    v = op.partial_matches()
    assert [p.key for p in v.partials] == ["3"]
    assert v.ended[-1] == Ended("1", 1, "'e0'", "within", 12, None, 11)
    op._check()
    op.finish()
    last = op.partial_matches().ended[-1]
    assert (last.key, last.cause, last.deadline) == ("3", "end of input", 30)


def test_a_deleted_event_ends_the_match_that_bound_it():
    #   a@1 b@2 c@3: a match; delete b@2 → a c is no match: ended by that deletion
    op = Detect("A B+ C", ABC, within=10)
    op.process(_inserts([("e0", 1, "a", 0), ("e1", 2, "b", 0), ("e2", 3, "c", 0)]))
    op.process([Retract("e1", 2, 3, 2, {"v": "b", "k": 0})])
    assert op.partial_matches().ended == (Ended("", 1, "'e0'", "retraction", 2, "'e1'", 11),)
    # a match whose first event is deleted ends too
    op.process(_inserts([("e3", 2, "b", 0)]))
    op.process([Retract("e0", 1, 2, 1, {"v": "a", "k": 0})])
    assert op.partial_matches().ended[-1] == Ended("", 1, "'e0'", "retraction", 1, "'e0'", 11)
    op._check()


def test_a_greedy_match_that_may_still_extend_is_a_partial_match_too():
    op = Detect("A B+", {"A": ABC["A"], "B": ABC["B"]}, within=10)
    op.process(_inserts([("e0", 1, "a", 0), ("e1", 2, "b", 0)]))
    (p,) = op.partial_matches().partials
    assert (p.symbols, p.matched) == ((("A", 1), ("B", 1)), True)


def test_only_the_oldest_keys_are_shown_and_ended_runs_are_bounded():
    #   50 keys each with an open 'A' (key k at start 100 - k): the 20 oldest are shown
    op = Detect("A B", AB, within=1_000, key=lambda p: p["k"])
    op.process(_inserts([(k, 100 - k, "a", k) for k in range(50)]))
    v = op.partial_matches()
    assert [p.key for p in v.partials] == [str(k) for k in range(49, 29, -1)]
    assert v.keys == 50 and v.looked == 20
    assert [p.key for p in op.partial_matches(limit=3).partials] == ["49", "48", "47"]
    # every key's run ends at a failing event: only the last ENDED_KEPT are kept
    op.process(_inserts([(f"x{k}", 101, "x", k) for k in range(50)]) + [Cti(200)])
    ended = op.partial_matches().ended
    assert len(ended) == ENDED_KEPT and all(e.cause == "event" for e in ended)
    assert ended[-1].by == "'x49'"


def test_ended_runs_are_a_diagnostic_no_checkpoint_holds():
    op = Detect("A B", AB, within=10)
    op.process(_inserts([("e0", 1, "a", 0), ("e1", 2, "x", 0)]) + [Cti(5)])
    assert op.partial_matches().ended
    assert "ended" not in op.snapshot()
    assert copy.deepcopy(op).partial_matches().ended == ()


def test_a_long_run_lists_its_first_and_last_events():
    op = Detect("A B+ C", ABC, within=1_000)
    op.process(_inserts([("a", 0, "a", 0)] + [(f"b{t}", t, "b", 0) for t in range(1, 40)]))
    (p,) = op.partial_matches().partials
    assert p.symbols == (("A", 1), ("B", 39)) and p.bound == 40 and len(p.events) == 10
    assert p.events[0] == (0, "'a'") and p.events[-1] == (39, "'b39'")


# -- why: the report and the web view's JSON ----------------------------------------------------

def _detect_progress(key: str = "'m1'") -> Progress:
    """A query src → detect#1 → sink whose detect holds one partial match (of ``key``) and
    has ended two runs, on timestamps."""
    t = T0_TICKS
    view = DetectView("detect#1", "A B+ C", 10 * SECOND, (
        Partial(key, (("A", 1), ("B", 2)), 3,
                ((t, "0"), (t + SECOND, "1"), (t + 2 * SECOND, "2")), t + 10 * SECOND, False,
                1),), 4, 4, (
        Ended("'m2'", t, "3", "within", t + 12 * SECOND, None, t + 10 * SECOND),
        Ended("'m3'", t, "4", "event", t + SECOND, "5", t + 10 * SECOND)))
    return Progress(steps={"src": StepProgress("src", cti=t + 2 * SECOND),
                           "detect#1": StepProgress("detect#1", cti=t, detect=(view,)),
                           "sink": StepProgress("sink", cti=t)},
                    inputs={"detect#1": ((0, "src"),), "sink": ((0, "detect#1"),)},
                    output="sink", clock=TIMESTAMPS)


def test_why_reports_a_partial_match_with_times_and_durations():
    t = T0_TICKS
    p = _detect_progress()
    e = explain(p, rows=[])
    text = str(e)
    assert "detect#1: detect 'A B+ C' within 10 s: 1 partial match" in text, text
    assert ("key 'm1': A B B so far, events 0 at 2026-01-01T00:00:00Z, 1 at "
            "2026-01-01T00:00:01Z, 2 at 2026-01-01T00:00:02Z; deadline "
            "2026-01-01T00:00:10Z") in text, text
    assert ("the run from 3 at 2026-01-01T00:00:00Z ended at CTI 2026-01-01T00:00:12Z, past "
            "its deadline 2026-01-01T00:00:10Z") in text
    assert "ended at event 5 at 2026-01-01T00:00:01Z: it fit none of the symbols" in text
    # the detect's hop says what holds its CTI: the oldest partial match, till its deadline
    assert "its oldest partial match (A B B) until its deadline 2026-01-01T00:00:10Z" in \
        {h.step: h for h in e.hops}["detect#1"].holds
    assert str(t) not in text
    (d,) = e.to_dict()["detect"]
    assert d["within_shown"] == "10 s" and d["partials"][0]["symbols"] == "A B B"
    assert d["partials"][0]["deadline_shown"] == "2026-01-01T00:00:10Z"
    assert d["partials"][0]["events"][1]["start_shown"] == "2026-01-01T00:00:01Z"
    assert [x["cause"] for x in d["ended"]] == ["within", "event"]


def test_a_collected_query_reports_its_ended_runs_in_why():
    #   per meter, 'A B+ C' within 10 s, a CTI after every reading:
    #   m1  a@0s b@1s            then x@30s (another key) moves the CTI past 10 s: ended
    #   m2  a@2s x@3s            ended at the event x@3s
    #   m3  a@4s b@5s c@6s       a match
    rows = [("m1", 0, "a"), ("m1", 1, "b"), ("m2", 2, "a"), ("m2", 3, "x"), ("m3", 4, "a"),
            ("m3", 5, "b"), ("m3", 6, "c"), ("m9", 30, "x")]
    q = Stream.from_rows([{"m": m, "ts": T0 + dt.timedelta(seconds=s), "v": v}
                          for m, s, v in rows], start="ts", advance=AdvanceTime(every=1))
    out = q.detect("A B+ C", ABC, within="10 s", key="m").collect(runtime="inline")
    assert len(to_cht(out)) == 1
    e = out.why()
    text = str(e)
    assert ("key 'm2': the run from 2 at 2026-01-01T00:00:02Z ended at event 3 at "
            "2026-01-01T00:00:03Z") in text, text
    assert ("key 'm1': the run from 0 at 2026-01-01T00:00:00Z ended at CTI "
            "2026-01-01T00:00:30Z, past its deadline 2026-01-01T00:00:10Z") in text, text
    causes = {x["key"]: x["cause"] for x in e.to_dict()["detect"][0]["ended"]}
    assert causes == {"'m1'": "within", "'m2'": "event"}


def test_the_why_panel_lists_the_partial_matches_as_text(page):
    # the page's why panel, its /api/why answered here with why's JSON: a detect's partial
    # match and ended runs as lines of text (a key holding HTML shows as text)
    answer = explain(_detect_progress(key=repr(EVIL)), rows=[]).to_dict()
    open_why_panel(page, answer)
    partials = page.locator('#why [data-role="why-partials"] li')
    partials.first.wait_for(timeout=10_000)
    text = partials.first.inner_text()
    assert "A B B so far" in text and "deadline 2026-01-01T00:00:10Z" in text
    assert "<script>" in text and page.evaluate("() => window.__pwned") is None
    ended = page.locator('#why [data-role="why-ended"] li').all_inner_texts()
    assert len(ended) == 2 and "ended at CTI 2026-01-01T00:00:12Z" in ended[0]
    assert "detect 'A B+ C' within 10 s" in page.locator('#why [data-step="detect#1"] p').first \
        .inner_text()


@pytest.mark.slow  # 2-6 s: a live query on Ray, asked by why, /api/why and the CLI
def test_a_deployed_query_shows_its_partial_match_in_why(ray_session, capsys):
    #   a@0s b@1s b@2s of 'A B+ C' within 1 min, the query live: A B B so far
    feed: queue.Queue = queue.Queue()
    q = (Stream.from_rows(_rows(feed), start="ts", advance=AdvanceTime(every=1))
         .detect("A B+ C", ABC, within="1 min", key="m").deploy("detect-seeing", flush_ms=20))
    try:
        for s, v in ((0, "a"), (1, "b"), (2, "b")):
            feed.put({"m": "m1", "ts": T0 + dt.timedelta(seconds=s), "v": v})
        step = next(s for s in q.stats() if s.startswith("detect"))
        _wait_for(lambda: q.stats()[step]["state_size"] == 3, what="the detect step's rows")
        e = q.why()
        text = str(e)
        assert "key 'm1': A B B so far, events 0 at 2026-01-01T00:00:00Z" in text, text
        assert "deadline 2026-01-01T00:01:00Z" in text, text
        (d,) = e.to_dict()["detect"]
        assert d["partials"][0]["symbols"] == "A B B" and d["step"] == step
        # the web view's why panel reads the same from /api/why
        code, answer = why_json("/api/why?query=detect-seeing&step=sink")
        assert code == 200 and answer["detect"][0]["partials"][0]["deadline_shown"] == \
            "2026-01-01T00:01:00Z"
        # the query's handle and `cedar inspect` show them too
        ((view,),) = q.partial_matches().values()
        assert view.partials[0].symbols == (("A", 1), ("B", 2))
        assert main(["inspect", "detect-seeing"]) == 0
        assert "key 'm1': A B B so far" in capsys.readouterr().out
    finally:
        feed.put(None)
        q.stop()


# -- the debugger ------------------------------------------------------------------------------

def test_the_root_cause_of_a_match_is_its_events(tmp_path):
    #   m1  a@0 b@1 b@2 c@3: a match [0, 4)
    #   m2  a@0 x@1     c@3: no match, though its rows start at the match's first and last
    #       starts too: no cause of it (the match's payload shows m1's rows)
    rows = [("m1", 0, "a"), ("m2", 0, "a"), ("m1", 1, "b"), ("m2", 1, "x"), ("m1", 2, "b"),
            ("m1", 3, "c"), ("m2", 3, "c")]
    q = Stream.from_rows([{"id": f"{m}-{t}", "m": m, "t": t, "v": v} for m, t, v in rows],
                         start="t", id="id")
    out = q.detect("A B+ C", ABC, within=10, key="m").collect(runtime="inline",
                                                              trace=str(tmp_path))
    assert len(to_cht(out)) == 1
    rec = Recording.open(str(tmp_path))
    (match,) = [e for e in rec.events(step="sink", kind="insert") if e["direction"] == "in"]
    leaves = sorted(r["id"] for r in rec.root_cause("sink", match["id"]).leaves())
    assert leaves == ["'m1-0'", "'m1-1'", "'m1-2'", "'m1-3'"]  # (a trace writes id reprs)


def test_a_detect_under_group_apply_shows_each_groups_open_run_under_its_key():
    #   per meter 'A B+ C' within 1 min, mid-stream: m1 holds A B, m3 holds A; m2's a x
    #   ended (its group, holding nothing, is gone)
    from topology.planning.dag import DagProcessor
    from topology.running.progress import detect_views

    rows = [{"m": m, "ts": T0 + dt.timedelta(seconds=s), "v": v} for m, s, v in
            [("m1", 0, "a"), ("m1", 1, "b"), ("m2", 2, "a"), ("m2", 3, "x"), ("m3", 4, "a")]]
    q = Stream.from_rows(rows, start="ts", advance=AdvanceTime(every=1)).group_apply(
        "m", lambda g: g.detect("A B+ C", ABC, within="1 min"))
    dag = DagProcessor(q.plan(), inline_sink=True)
    dag.process(rows, 0)
    [view] = [v for p in dag.procs.values() for v in detect_views(p)]
    assert [(p.key, p.symbols) for p in view.partials] == [
        ("'m1'", (("A", 1), ("B", 1))), ("'m3'", (("A", 1),))]
    assert view.keys == 2
