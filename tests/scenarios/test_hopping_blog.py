"""The StreamInsight team's hopping-window blog (002) as a timeline: an open start edge under
hopping windows, and the "compressed" output policy that emits one row to ∞ for it.

The blog's figure assigns each hopping window W the interval [W.end − hop, W.end) of the
timeline, stretches every event over the assignments of the windows it overlaps ("altered
events") and takes snapshot windows of those: consecutive windows with the same members share
one output row. Its example input (the "Adjusted Events" table) is an edge e0 opened at 12:00:01
and never closed, e1 [03, 07), e2 [05, 15) and e3 at 11; the text does not give the window
parameters, so here they are a 4-second window hopping every 2 seconds (1 tick = 1 second).
"""

from __future__ import annotations

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.windows import HoppingWindow, make_window
from tests import reference_windows as ref
from tests.kit import assert_equivalent, run_operator

INF = MAX_TIME
SPEC = HoppingWindow(size=4, hop=2)
EVENTS = [Insert("e0", 1, INF, "e0"), Insert("e1", 3, 7, "e1"), Insert("e2", 5, 15, "e2"),
          Insert("e3", 11, 12, "e3")]


def test_blog_figure_compressed_rows():
    #  time        0    2    4    6    8   10   12   14   16   18   20 ...
    #  e0            [1 ──────────────────────────────────────────────────── ∞)
    #  e1                 [3 ──── 7)
    #  e2                      [5 ─────────────────────────── 15)
    #  e3                                    [11)
    #  windows     [-2, 2) [0, 4) [2, 6) [4, 8) ... each owns its last hop [W.end − 2, W.end)
    #  altered e0  [0 ───────────────────────────────────────────────────── ∞)
    #  altered e1       [2 ────────────── 10)
    #  altered e2            [4 ───────────────────────────── 18)
    #  altered e3                           [10 ──── 14)
    #  rows        [0,2)[2,4)[4 ────── 10)[10 ─── 14)[14 ── 18)[18 ──────────── ∞)
    #  Count        1    2    3            3          2         1
    #  members     e0   +e1  +e2          −e1 +e3    −e3       −e2
    stream = [*EVENTS, Cti(20)]
    out = run_operator(lambda: make_window(SPEC, Count(), output="compressed"), stream,
                       seed=None)
    assert to_cht(out) == [(0, 2, 1), (2, 4, 2), (4, 10, 3), (10, 14, 3), (14, 18, 2),
                           (18, INF, 1)]
    #  [4, 10) and [10, 14) both count 3 but hold different events: two rows
    assert_equivalent(out, ref.window(stream, SPEC, Count(), output="compressed"))


def test_window_policy_produces_the_open_edge_only_as_time_reaches_it():
    #  under output="window" e0 lies in infinitely many windows: only those that start before
    #  the CTI are produced, one per hop, and the query keeps up as the CTI moves on
    op = make_window(SPEC, Count())
    out = op.process([*EVENTS, Cti(20)])
    rows = to_cht(out)
    assert [(s, e) for s, e, _ in rows] == [(s, s + 4) for s in range(-2, 20, 2)]
    assert rows[-1] == (18, 22, 1) and out[-1] == Cti(18)
    out += op.process([Cti(1_000)])
    assert len(to_cht(out)) == len(range(-2, 1_000, 2)) and op.state_size() <= 3


def test_compressed_open_edge_is_one_row_whatever_the_cti():
    #  e0 alone, CTIs far apart: one row [0, ∞), no windows enumerated, state stays tiny
    op = make_window(SPEC, Count(), output="compressed")
    out = op.process([EVENTS[0]])
    for t in range(10**6, 10**7, 10**6):
        out += op.process([Cti(t)])
        assert op.state_size() <= 2
    assert to_cht(out) == [(0, INF, 1)]
    assert out[-1] == Cti(9 * 10**6)


def test_closing_the_edge_ends_the_row():
    #  e0 is closed at 9: its altered end is the end of the last window starting before 9,
    #  [8, 12), so the row of e0 alone now ends at 12
    stream = [EVENTS[0], Cti(5), Retract("e0", 1, INF, 9, "e0"), Cti(40)]
    out = run_operator(lambda: make_window(SPEC, Count(), output="compressed"), stream,
                       seed=None)
    assert to_cht(out) == [(0, 12, 1)]
    assert_equivalent(out, ref.window(stream, SPEC, Count(), output="compressed"))


def test_the_blogs_stated_result_one_window_from_12_00_15_to_the_end_of_time():
    # "instead of producing a massive number of windows for the open start edge e0, a single
    # window is emitted from 12:00:15 AM until the end of time". The blog does not give its
    # window; with 5-second windows hopping every 5 seconds (1 tick = 1 second after
    # 12:00:00), e2 [05, 15) and e3 at 11 are over by 12:00:15, and e0 alone is left: one row
    # from 15 to ∞, however far the CTI goes.
    spec = HoppingWindow(size=5, hop=5)
    stream = [*EVENTS, Cti(10**6)]
    out = run_operator(lambda: make_window(spec, lambda payloads: sorted(payloads),
                                           output="compressed"), stream)
    rows = to_cht(out)
    assert [r for r in rows if r[1] == INF] == [(15, INF, ["e0"])]
    assert rows[-1] == (15, INF, ["e0"])
    assert all(e <= 15 for _, e, _ in rows[:-1])
    assert_equivalent(out, ref.window(stream, spec, lambda payloads: sorted(payloads),
                                      output="compressed"))
