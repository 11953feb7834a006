"""Root causes that tell the truth: through joins to the sources, with inputs changed in the
same batch as the output, for one-tick snapshot windows, for windows whose members change
under an unchanged result, and honest about traces bounded by ``Trace(start=, end=, limit=)``.

Each test is a small timeline whose cause is worked out by hand above the assertion.
"""

from __future__ import annotations

import json

from operators.aggregates import Count
from operators.events import MAX_TIME, Cti, Insert, Retract
from topology import Stream, Trace
from topology.app.cli import main
from topology.seeing.debug import Recording

INF = MAX_TIME


def _record(q: Stream, path: str, batch_size: int | None = None, trace: object = None) -> Recording:
    q.collect(runtime="inline", trace=trace or path, batch_size=batch_size)
    return Recording.open(path)


def _final(rec: Recording) -> list[dict]:
    """The sink's output events still alive at the end, with their final lifetimes."""
    rows: dict[str, dict] = {}
    for r in rec.events(step="sink", direction="out"):
        if r["kind"] == "insert":
            rows[r["id"]] = dict(r)
        elif r["kind"] == "retract":
            if r["new_end"] == r["start"]:
                rows.pop(r["id"], None)
            else:
                rows[r["id"]]["end"] = r["new_end"]
    return list(rows.values())


def _leaf_ids(rec: Recording, row: dict) -> set[tuple[str, str]]:
    return {(leaf["step"], leaf["id"]) for leaf in rec.root_cause("sink", row["id"]).leaves()}


def test_a_cause_runs_through_a_join_down_to_both_sources(tmp_path):
    #   left  l0 [0 ──── 6) k=0     l1 [2 ──── 8) k=1         (then where, select)
    #   right r0   [1 ─────── 9) k=0  r1 [3 ─ 5) k=1
    #   join  (l0, r0) [1, 6)   (l1, r1) [3, 5)              then a where after it
    left = Stream.from_events([Insert("l0", 0, 6, {"k": 0}), Insert("l1", 2, 8, {"k": 1}),
                               Cti(10)], name="left")
    right = Stream.from_events([Insert("r0", 1, 9, {"k": 0}), Insert("r1", 3, 5, {"k": 1}),
                                Cti(10)], name="right")
    q = (left.where(lambda p: True).select(lambda p: p)
         .join(right.select(lambda p: p), on=("k", "k")).where(lambda p: True))
    rec = _record(q, str(tmp_path))
    got = {(r["start"], r["end"]): _leaf_ids(rec, r) for r in _final(rec)}
    assert got == {(1, 6): {("left", "'l0'"), ("right", "'r0'")},
                   (3, 5): {("left", "'l1'"), ("right", "'r1'")}}


def test_a_cause_runs_through_anti_and_left_joins(tmp_path):
    #   left  a [0 ──────── 10)          right b [4 ─ 6)
    #   anti_join: a on [0, 4) and [6, 10);  left_join: (a, None) [0, 4), (a, b) [4, 6), ...
    left = Stream.from_events([Insert("a", 0, 10, {"k": 1}), Cti(12)], name="left")
    right = Stream.from_events([Insert("b", 4, 6, {"k": 1}), Cti(12)], name="right")
    anti = _record(left.select(lambda p: p).anti_join(right.select(lambda p: p),
                                                      on=("k", "k")), str(tmp_path / "anti"))
    assert sorted((r["start"], r["end"], frozenset(_leaf_ids(anti, r)))
                  for r in _final(anti)) == [
        (0, 4, frozenset({("left", "'a'")})), (6, 10, frozenset({("left", "'a'")}))]
    outer = _record(left.select(lambda p: p).left_join(right.select(lambda p: p),
                                                       on=("k", "k")), str(tmp_path / "lj"))
    both = frozenset({("left", "'a'"), ("right", "'b'")})
    only = frozenset({("left", "'a'")})
    assert sorted((r["start"], r["end"], frozenset(_leaf_ids(outer, r)))
                  for r in _final(outer)) == [(0, 4, only), (4, 6, both), (6, 10, only)]


def test_a_join_input_shortened_in_the_same_batch_stays_in_the_cause(tmp_path):
    #   left  l [2 ─────────────→ ∞  then, in the same batch, shortened to [2, 5)
    #   right r [0 ────────────── 20)
    #   join  (l, r) inserted as [2, ∞) and shortened to [2, 5) in the same batch
    left = Stream.from_events([Insert("l", 2, INF, {"k": 1}), Retract("l", 2, INF, 5, {"k": 1}),
                               Cti(30)], name="left")
    right = Stream.from_events([Insert("r", 0, 20, {"k": 1}), Cti(30)], name="right")
    rec = _record(right.join(left, on=("k", "k")), str(tmp_path))
    out, = _final(rec)
    assert (out["start"], out["end"]) == (2, 5)
    assert _leaf_ids(rec, out) == {("left", "'l'"), ("right", "'r'")}


def test_a_one_tick_snapshot_window_with_point_end_output(tmp_path):
    #   a [0 ──── 4)   b [4 5)          snapshot windows [0, 4) {a} and [4, 5) {b}
    #   output="point_end": [3, 4) counts a, [4, 5) counts b (not the window before it)
    evs = [Insert("a", 0, 4, 1), Insert("b", 4, 5, 2), Cti(10)]
    q = Stream.from_events(evs).snapshot_window(output="point_end").aggregate(Count())
    rec = _record(q, str(tmp_path))
    got = {(r["start"], r["end"]): {i for _, i in _leaf_ids(rec, r)} for r in _final(rec)}
    assert got == {(3, 4): {"'a'"}, (4, 5): {"'b'"}}


def test_members_that_change_under_an_unchanged_result(tmp_path):
    #   batch 1: a [1 2)  b [3 4)           window [0, 10): Count 2
    #   batch 2: a deleted, c [5 6) added   window [0, 10): still Count 2 (no new output)
    #   the cause is b and c, never the deleted a
    evs = [Insert("a", 1, 2, 1), Insert("b", 3, 4, 2),
           Retract("a", 1, 2, 1, 1), Insert("c", 5, 6, 3), Cti(20)]
    q = Stream.from_events(evs).tumbling_window(10).aggregate(Count())
    rec = _record(q, str(tmp_path), batch_size=2)
    out, = _final(rec)
    assert json.loads(out["payload"]) == 2
    assert {i for _, i in _leaf_ids(rec, out)} == {"'b'", "'c'"}


def test_a_bounded_trace_says_its_causes_may_be_incomplete(tmp_path, capsys):
    #   a [0 ─ 2)  b [5 ─ 7)  c [12 ─ 14)        tumbling [0, 10) and [10, 20)
    #   traced from 8 on: window [0, 10) misses a and b, [10, 20) is whole
    evs = [Insert("a", 0, 2, 1), Insert("b", 5, 7, 2), Insert("c", 12, 14, 3), Cti(30)]
    q = Stream.from_events(evs).tumbling_window(10).aggregate(Count())
    whole = _record(q, str(tmp_path / "whole"))
    assert all(whole.root_cause("sink", r["id"]).complete for r in _final(whole))
    path = str(tmp_path / "cut")
    cut = _record(q, path, trace=Trace(path, start=8))
    causes = {(r["start"], r["end"]): cut.root_cause("sink", r["id"]) for r in _final(cut)}
    assert not causes[(0, 10)].complete and causes[(10, 20)].complete
    assert any("start=8" in why for why in causes[(0, 10)].incomplete)
    assert main(["debug", path, "--cause", causes[(0, 10)].row["id"]]) == 0
    assert "incomplete" in capsys.readouterr().out
    assert main(["debug", path, "--cause", causes[(10, 20)].row["id"]]) == 0
    assert "incomplete" not in capsys.readouterr().out
    # limit=: the source's first 2 rows only; every cause through it may miss inputs
    path = str(tmp_path / "few")
    few = _record(q, path, trace=Trace(path, limit=2))
    for r in _final(few):
        cause = few.root_cause("sink", r["id"])
        assert not cause.complete
        assert any("limit=2" in why for why in cause.incomplete)
    # steps=: the source not traced, the cause stops at the window's input
    path = str(tmp_path / "steps")
    part = _record(q, path, trace=Trace(path, steps=["tumbling.aggregate#1", "sink"]))
    for r in _final(part):
        cause = part.root_cause("sink", r["id"])
        assert any("from_events#0" in why and "not traced" in why for why in cause.incomplete)


def test_the_timeline_brackets_a_snapshot_window_with_point_end_output(tmp_path):
    #   a [0 ──── 4)  b [4 5)     brackets [0, 4) and [4, 5), not the output points [3, 4)
    import pytest

    pytest.importorskip("matplotlib")
    from tests.topology.test_timeline import _groups, _xs
    from topology.seeing.timeline import timeline

    path = str(tmp_path / "trace")
    evs = [Insert("a", 0, 4, 1), Insert("b", 4, 5, 2), Cti(10)]
    Stream.from_events(evs).snapshot_window(output="point_end").aggregate(Count()).collect(
        runtime="inline", trace=path)
    out = tmp_path / "w.svg"
    timeline(path, "snapshot", out=str(out))
    g = _groups(out.read_text())
    x0, x4 = min(_xs(g["event-in-0"])), max(_xs(g["event-in-0"]))

    def tick(x: float) -> float:
        return (x - x0) * 4 / (x4 - x0)

    spans = sorted((round(tick(min(_xs(g[w])))), round(tick(max(_xs(g[w])))))
                   for w in g if w.startswith("window-"))
    assert spans == [(0, 4), (4, 5)]


def test_times_from_timestamps_are_shown_as_times(tmp_path, capsys):
    #   readings at 00:00:00, :01, :02 (UTC)     tumbling 2 s: [00:00:00, 00:00:02) holds two
    import datetime

    rows = [{"ts": datetime.datetime(2026, 1, 1, 0, 0, i), "v": i} for i in range(3)]
    q = Stream.from_rows(rows, start="ts").tumbling_window(2_000_000).aggregate(Count())
    rec = _record(q, str(tmp_path))
    first = min(_final(rec), key=lambda r: r["start"])
    assert main(["debug", str(tmp_path), "--cause", first["id"]]) == 0
    text = capsys.readouterr().out
    assert "[2026-01-01T00:00:00Z, 2026-01-01T00:00:02Z)" in text.splitlines()[0]
    assert text.count("from_rows#0  insert") == 2
    assert main(["debug", str(tmp_path), "--step", "sink", "--kind", "insert"]) == 0
    assert "2026-01-01T00:00:02Z" in capsys.readouterr().out
    # ticks stay ticks
    ticks = _record(Stream.from_rows([{"ts": 5}], start="ts"), str(tmp_path / "ticks"))
    out, = _final(ticks)
    assert "[5, 6)" in ticks.root_cause("sink", out["id"]).render()


def test_a_session_windows_members_are_the_events_that_start_in_it(tmp_path):
    #   a [0 ───────────────────── 12)      gap 3: sessions over the starts 0 | 10 11
    #   b                  [10 ─ 11)        [0, 3) holds a; [10, 14) holds b and c -- and a
    #   c                     [11 ─ 12)     overlaps [10, 14) but starts in the first session
    evs = [Insert("a", 0, 12, 1), Insert("b", 10, 11, 2), Insert("c", 11, 12, 3), Cti(20)]
    for output, rows in (("window", [(0, 3), (10, 14)]), ("point_end", [(2, 3), (13, 14)])):
        path = str(tmp_path / output)
        q = Stream.from_events(evs).session_window(3, output=output).aggregate(Count())
        rec = _record(q, path)
        got = {(r["start"], r["end"]): _leaf_ids(rec, r) for r in _final(rec)}
        src = "from_events#0"
        assert got == {rows[0]: {(src, "'a'")}, rows[1]: {(src, "'b'"), (src, "'c'")}}, output
        for r in _final(rec):
            assert rec.root_cause("sink", r["id"]).complete


def test_a_hopping_windows_clip_rows_name_their_window_when_only_one_holds_them(tmp_path):
    #   a [1 ── 3)  b [6 ─ 7)     tumbling_window(5), a UDO stamping its members, clip:
    #   rows [1, 3) and [6, 7): each inside one window, whose members made it
    from operators.udm import TimeSensitiveOperator

    class Stamp(TimeSensitiveOperator):
        def compute(self, events, window):
            return [(s, e, len(events)) for s, e, _ in events]

    evs = [Insert("a", 1, 3, 1), Insert("z", 3, 4, 9), Insert("b", 6, 7, 2), Cti(20)]
    q = Stream.from_events(evs).tumbling_window(5, output="clip").apply(Stamp())
    rec = _record(q, str(tmp_path))
    got = {(r["start"], r["end"]): _leaf_ids(rec, r) for r in _final(rec)}
    src = "from_events#0"
    assert got == {(1, 3): {(src, "'a'"), (src, "'z'")}, (3, 4): {(src, "'a'"), (src, "'z'")},
                   (6, 7): {(src, "'b'")}}
    assert all(rec.root_cause("sink", r["id"]).complete for r in _final(rec))
