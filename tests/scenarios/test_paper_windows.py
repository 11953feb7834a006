"""The paper's (001) window examples as timelines: Figure 2(B)'s tumbling count and section
IV-C's time-weighted average (MyTimeWeightAverage), incremental and from scratch.
"""

from __future__ import annotations

from operators.aggregates import Avg, Count, TimeWeightedAverage
from operators.cht import to_cht
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.udm import TimeSensitiveAggregate
from operators.windows import HoppingWindow, make_window
from tests.kit import assert_equivalent, run_operator

INF = MAX_TIME


def test_figure_2b_count_over_a_5_tick_tumbling_window():
    #  time    0    1    2    3    4    5    6    7    8    9   10   11   12   13   14   15
    #  e1           [───────────────────────────)                                     [1, 7)
    #  e2                     [─────────────────────────────────────────────)          [3, 13)
    #  e3                                            [────)                           [8, 9)
    #  windows [0 ─────────────────────)[5 ──────────────────────)[10 ────────────────)
    #  Count   2                        3                         1
    stream = [Insert("e2", 3, 13, "b"), Insert("e1", 1, 7, "a"), Cti(2),
              Insert("e3", 8, 9, "c"), Cti(20)]
    out = run_operator(lambda: make_window(HoppingWindow(5, 5), Count()), stream, seed=None)
    assert to_cht(out) == [(0, 5, 2), (5, 10, 3), (10, 15, 1)]
    assert out[-1] == Cti(20)


def test_figure_2b_count_arrives_speculatively_and_is_corrected():
    #  e2 first arrives as an open edge [3, ∞): window [5, 10) counts it before e1 and e3 come;
    #  the edge is then closed at 13, so the windows after [10, 15) lose it
    stream = [Insert("e2", 3, INF, "b"), Cti(1), Insert("e1", 1, 7, "a"),
              Insert("e3", 8, 9, "c"), Cti(9), Retract("e2", 3, INF, 13, "b"), Cti(30)]
    out = run_operator(lambda: make_window(HoppingWindow(5, 5), Count()), stream, seed=None)
    assert_equivalent(out, [(0, 5, 2), (5, 10, 3), (10, 15, 1)])
    #  after Cti(9) the window [5, 10) may still change, so the output CTI waits at 5
    assert Cti(5) in out and Cti(9) not in out


class MyTimeWeightAverage(TimeSensitiveAggregate):
    """The paper's section IV-C UDA, written the non-incremental way: each value weighted by
    the share of the window its (clipped) lifetime covers."""

    def compute(self, events, window):
        length = window.end - window.start
        return sum(p * (e - s) for s, e, p in events) / length if events else None


def test_time_weighted_average_of_a_sampled_signal():
    #  a meter sampled as edge events: each value holds until the next sample
    #  time    0         4                   10                  16       20
    #  e1      [10 ──────)
    #  e2                [20 ─────────────────────────────────── ∞ ... closed at 16
    #  e3                                                        [30 ─────)
    #  tumbling(10)  [0 ────────────────────)[10 ─────────────────────────)
    #  TWA (clip=full)   (10·4 + 20·6)/10 = 16      (20·6 + 30·4)/10 = 24
    #  MyAverage         (10 + 20)/2 = 15           (20 + 30)/2 = 25
    stream = [Insert("e1", 0, 4, 10), Insert("e2", 4, INF, 20), Cti(12),
              Retract("e2", 4, INF, 16, 20), Insert("e3", 16, 20, 30), Cti(30)]
    for udm in (TimeWeightedAverage(), MyTimeWeightAverage()):
        out = run_operator(lambda u=udm: make_window(HoppingWindow(10, 10), u), stream, seed=None)
        assert_equivalent(out, [(0, 10, 16.0), (10, 20, 24.0)])
        #  Cti(12): the window [0, 10) is final, [10, 20) can still change (e2 is open)
        assert Cti(10) in out and Cti(12) not in out
        assert out[-1] == Cti(30)
    average = run_operator(lambda: make_window(HoppingWindow(10, 10), Avg()), stream, seed=None)
    assert_equivalent(average, [(0, 10, 15.0), (10, 20, 25.0)])


def test_time_weighted_average_speculates_on_the_open_edge():
    #  before e2 is closed, window [10, 20) already shows 20 (e2 covers it, clipped)
    op = make_window(HoppingWindow(10, 10), TimeWeightedAverage())
    out = op.process([Insert("e1", 0, 4, 10), Insert("e2", 4, INF, 20), Cti(20)])
    assert_equivalent(out, [(0, 10, 16.0), (10, 20, 20.0)])
    assert out[-1] == Cti(20)
    #  the window [20, 30) is produced only as the CTI reaches it, never beyond
    out += op.process([Cti(25)])
    assert_equivalent(out, [(0, 10, 16.0), (10, 20, 20.0), (20, 30, 20.0)])
