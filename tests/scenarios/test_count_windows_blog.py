"""The count-window article (docs/windows.md) and the paper's section III-B-4 as timelines.

Count windows span N consecutive *distinct* start times; a window ends one tick after its N-th
start time; events are clipped to the window; the result is a point at the window's last start
time. Each test draws the article's picture above its assertion.
"""

from __future__ import annotations

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import Cti, Insert, Retract
from operators.udm import TimeSensitiveAggregate, TimeSensitiveOperator
from operators.windows import CountWindow
from operators.windows.count import CountWindowOperator
from tests.kit import INF, assert_equivalent, run_operator


class Clipped(TimeSensitiveAggregate):
    """What a time-sensitive UDA sees: the window and its clipped member events."""

    def compute(self, events, window):
        return (tuple(window), tuple(sorted(events)))


def run(spec, udm, messages, **options):
    return run_operator(lambda: CountWindowOperator(spec, udm, **options), messages, seed=None)


def test_three_interval_events_two_windows_clipped():
    # Figure "Count window for events", N = 2:
    #
    #   time   1   2   3   4   5   6   7   8
    #   e1     [----------------------)            [1, 7)
    #   e2             [---------------------)     [3, 8)
    #   e3                     [-------)           [5, 7)
    #   W1     [-----------)                       [1, 4): starts of e1, e2
    #   W2             [-----------)               [3, 6): starts of e2, e3
    #   clipped: W1 = e1 [1, 4), e2 [3, 4);  W2 = e2 [3, 6), e3 [5, 6)
    #   output:  a point at each window's last start time: W1 @ 3, W2 @ 5
    out = run(CountWindow(2), Clipped(), [
        Insert("e1", 1, 7, "e1"), Insert("e2", 3, 8, "e2"), Insert("e3", 5, 7, "e3"), Cti(9)])
    assert_equivalent(out, [
        (3, 4, ((1, 4), ((1, 4, "e1"), (3, 4, "e2")))),
        (5, 6, ((3, 6), ((3, 6, "e2"), (5, 6, "e3")))),
    ])


def test_collocated_point_events_count_as_one_start_time():
    # Figure "Count window" with point events, N = 3; b and c are collocated at 3:
    #
    #   time   1   2   3   4   5   6   7
    #   points a       b,c d       e   f
    #   W1     [---------------)            [1, 5): starts 1, 3, 4 -> a b c d  (4 events)
    #   W2             [---------------)    [3, 7): starts 3, 4, 6 -> b c d e  (4 events)
    #   W3                 [-----------)    [4, 8): starts 4, 6, 7 -> d e f    (3 events)
    #   Count:         4 @ 4,  4 @ 6,  3 @ 7
    points = [("a", 1), ("b", 3), ("c", 3), ("d", 4), ("e", 6), ("f", 7)]
    stream = [Insert(i, t, t + 1, i) for i, t in points] + [Cti(8)]
    assert_equivalent(run(CountWindow(3), Count(), stream), [(4, 5, 4), (6, 7, 4), (7, 8, 3)])
    # the window end (last start + 1 tick) takes every point in whole: clipping changes nothing
    out = run(CountWindow(3), Clipped(), stream)
    for _, _, (_window, events) in to_cht(out):
        assert all(e - s == 1 for s, e, _ in events), events


def test_no_window_until_n_distinct_start_times():
    # N = 3: as long as fewer than 3 distinct start times exist, no window (and no output)
    #
    #   time   1   2   3
    #   a,b    x           two events, one start time  -> nothing
    #   c          x       two start times             -> nothing
    #   d              x   three start times: [1, 4)   -> 4 events @ 3
    op = CountWindowOperator(CountWindow(3), Count())
    assert op.process([Insert("a", 1, 2), Insert("b", 1, 5), Insert("c", 2, 3)]) == []
    out = op.process([Insert("d", 3, 4)])
    assert to_cht(out) == [(3, 4, 4)]


def test_my_sum_over_count_by_start_time_window_of_ten():
    # the article's LINQ example: CountByStartTimeWindow(10) with a user-defined MySum over
    # e.i; twelve events at distinct times 0..11 give three windows
    #
    #   time   0 1 2 3 4 5 6 7 8 9 10 11
    #   W0     [-------------------)          sum 0..9  = 45 @ 9
    #   W1       [--------------------)       sum 1..10 = 55 @ 10
    #   W2         [---------------------)    sum 2..11 = 65 @ 11
    def my_sum(values):
        return sum(v["i"] for v in values)

    stream = [Insert(t, t, t + 1, {"i": t}) for t in range(12)] + [Cti(12)]
    assert_equivalent(run(CountWindow(10), my_sum, stream), [(9, 10, 45), (10, 11, 55),
                                                             (11, 12, 65)])


def test_time_sensitive_udo_timestamps_are_overwritten():
    # a time-sensitive UDO returns events with its own timestamps; the output policy turns
    # each into a point at the window end, aligned with the window's last start time
    #
    #   e1 [0 ------ 5)   e2 [2 -- 4)          N = 2, W = [0, 3)
    #   UDO says: (0, 100, "e1"), (2, 100, "e2")  ->  both become points @ 2
    class Echo(TimeSensitiveOperator):
        def compute(self, events, window):
            return [(s, 100, p) for s, _, p in events]

    out = run(CountWindow(2), Echo(), [Insert("e1", 0, 5, "e1"), Insert("e2", 2, 4, "e2")],
              kind="apply")
    assert_equivalent(out, [(2, 3, "e1"), (2, 3, "e2")])


def test_paper_figure_count_by_start_n2_with_disorder():
    # the paper's Figure 5/6, N = 2, with the middle event arriving late
    #
    #   time   1     4     6
    #   a      x                a, c arrive first: one window [1, 7) -> 2 @ 6
    #   c                  x
    #   b            x          b arrives late: [1, 7) splits into [1, 5) and [4, 7)
    #                           -> the speculative 2 @ 6 is retracted; 2 @ 4 and 2 @ 6
    op = CountWindowOperator(CountWindow(2), Count())
    first = op.process([Insert("a", 1, 2), Insert("c", 6, 7)])
    assert to_cht(first) == [(6, 7, 2)]
    late = op.process([Insert("b", 4, 5)])
    assert [type(m).__name__ for m in late] == ["Retract", "Insert", "Insert"]
    assert late[0] == Retract(first[0].id, 6, 7, 6, 2)
    assert_equivalent(first + late, [(4, 5, 2), (6, 7, 2)])
    # and b's full retraction merges them back
    back = op.process([Retract("b", 4, 5, 4)])
    assert_equivalent(first + late + back, [(6, 7, 2)])


def test_cti_finalizes_windows_and_frees_their_events():
    # N = 2, points at 1, 2, 3, 4 then Cti(4):
    #
    #   time   1   2   3   4
    #          x   x   x   x        windows [1,3) [2,4) [3,5): last starts 2, 3, 4
    #   Cti(4): windows ending at or before 4 are final; only start time 3 (the window
    #   [3, 5) is still open to changes at 4) and time 4 are kept; output Cti(4)
    op = CountWindowOperator(CountWindow(2), Count())
    out = op.process([Insert(t, t, t + 1) for t in (1, 2, 3, 4)] + [Cti(4)])
    assert out[-1] == Cti(4)
    assert list(op.times) == [3, 4]
    assert op.state_size() == 2 + 1  # two events, one complete window [3, 5)
    # a second event at 4 still changes [3, 5): its output is retracted and re-emitted
    more = op.process([Insert("x", 4, 5)])
    assert_equivalent(out + more, [(2, 3, 2), (3, 4, 2), (4, 5, 3)])


def test_output_cti_waits_for_the_nth_start_time():
    # N = 3 and only one start time before the CTI: a window needs two more distinct start
    # times, at 10 and 11 at the earliest, so nothing can be output before 11
    #
    #   time   2  ...  10  11
    #   a      x        |        Cti(10) -> output Cti(11)
    op = CountWindowOperator(CountWindow(3), Count())
    assert op.process([Insert("a", 2, 3), Cti(10)]) == [Cti(11)]
    out = op.process([Insert("b", 10, 11), Insert("c", 11, 12)])
    assert to_cht(out) == [(11, 12, 3)]


def test_count_by_end_places_edge_events_when_they_close():
    # by="end", N = 2: an edge event has no end time until its end edge arrives
    #
    #   time   0   2   3   5
    #   a      [-------)            ends 3
    #   e      [--------------> ∞   open: in no by-end window
    #   b          [-------)        ends 5  -> window [3, 6) = a, b  -> Count 2 @ 5
    #   e closed at 5: ends 5 like b      -> window [3, 6) = a, b, e -> Count 3 @ 5
    #   clipped by-end: a [3, 3) (ends where the window starts), b [3, 5), e [3, 5)
    op = CountWindowOperator(CountWindow(2, "end"), Count())
    out = op.process([Insert("a", 0, 3), Insert("e", 0, INF), Insert("b", 2, 5)])
    assert to_cht(out) == [(5, 6, 2)]
    assert op.state_size() == 2 + 1  # a and b, one window; the open e is not held
    out += op.process([Retract("e", 0, INF, 5)])
    assert_equivalent(out, [(5, 6, 3)])
    clipped = run(CountWindow(2, "end"), Clipped(), [
        Insert("a", 0, 3, "a"), Insert("e", 0, INF, "e"), Insert("b", 2, 5, "b"),
        Retract("e", 0, INF, 5, "e")])
    assert_equivalent(clipped, [
        (5, 6, ((3, 6), ((3, 3, "a"), (3, 5, "b"), (3, 5, "e"))))])
