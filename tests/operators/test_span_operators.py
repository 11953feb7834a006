"""Span operators against the reference evaluator on random valid physical streams.

Each case: an operator factory and its from-scratch reference. The runner feeds the stream in
random batches, checks invariants after each, checkpoints and restores the operator midway,
and validates the output (no message behind an output CTI, retractions match their inserts).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.alter_lifetime import AlterLifetime
from operators.clip_duration import ClipDuration
from operators.errors import OperatorError
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from operators.select import Select
from operators.shift import Shift
from operators.to_points import ToPoints
from operators.where import Where
from tests import reference as ref
from tests.kit import INF, PROPERTY, assert_equivalent, final_time, physical_streams, run_operator

#: case -> (operator factory, reference on CHT rows, the same query on a topology Stream);
#: tests/topology/test_differential.py runs the query_fn column through collect() inline and
#: on Ray.
CASES = {
    "where": (lambda: Where(lambda p: p % 2 == 0), lambda r: ref.where(r, lambda p: p % 2 == 0),
              lambda s: s.where(lambda p: p % 2 == 0)),
    "select": (lambda: Select(lambda p: (p, p * 3)), lambda r: ref.select(r, lambda p: (p, p * 3)),
               lambda s: s.select(lambda p: (p, p * 3))),
    "shift+": (lambda: Shift(7), lambda r: ref.shift(r, 7), lambda s: s.shift(7)),
    "shift-": (lambda: Shift(-5), lambda r: ref.shift(r, -5), lambda s: s.shift(-5)),
    # the ends of the time axis: events moved off it have no output (dead letters), and
    # retractions move them off and back on
    "shift_past_end": (lambda: Shift(MAX_TIME - 40), lambda r: ref.shift(r, MAX_TIME - 40),
                       lambda s: s.shift(MAX_TIME - 40)),
    "shift_before_start": (lambda: Shift(MIN_TIME - 20), lambda r: ref.shift(r, MIN_TIME - 20),
                           lambda s: s.shift(MIN_TIME - 20)),
    "alter_past_end": (lambda: AlterLifetime(start=lambda s: s + (MAX_TIME - 60), duration=8),
                       lambda r: ref.alter_lifetime(r, start=lambda s: s + (MAX_TIME - 60),
                                                    duration=8),
                       lambda s: s.alter_lifetime(start=lambda t: t + (MAX_TIME - 60),
                                                  duration=8)),
    "alter_end_past": (lambda: AlterLifetime(duration=lambda s, e: e - s + (MAX_TIME - 80)),
                       lambda r: ref.alter_lifetime(
                           r, duration=lambda s, e: e - s + (MAX_TIME - 80)),
                       lambda s: s.alter_lifetime(duration=lambda t, e: e - t + (MAX_TIME - 80))),
    "to_points": (ToPoints, ref.to_points, lambda s: s.to_points()),
    "clip_duration": (lambda: ClipDuration(4), lambda r: ref.clip_duration(r, 4),
                      lambda s: s.clip_duration(4)),
    "alter_start": (lambda: AlterLifetime(start=lambda s: s - s % 10),
                    lambda r: ref.alter_lifetime(r, start=lambda s: s - s % 10),
                    lambda s: s.alter_lifetime(start=lambda t: t - t % 10)),
    "alter_const": (lambda: AlterLifetime(start=lambda s: s + 3, duration=6),
                    lambda r: ref.alter_lifetime(r, start=lambda s: s + 3, duration=6),
                    lambda s: s.alter_lifetime(start=lambda t: t + 3, duration=6)),
    # a duration that depends on the end: retractions make outputs change, vanish and appear
    "alter_shrink": (lambda: AlterLifetime(duration=lambda s, e: e - s - 3),
                     lambda r: ref.alter_lifetime(r, duration=lambda s, e: e - s - 3),
                     lambda s: s.alter_lifetime(duration=lambda t, e: e - t - 3)),
    "alter_both": (lambda: AlterLifetime(start=lambda s: s // 2,
                                         duration=lambda s, e: (e - s) // 2),
                   lambda r: ref.alter_lifetime(r, start=lambda s: s // 2,
                                                duration=lambda s, e: (e - s) // 2),
                   lambda s: s.alter_lifetime(start=lambda t: t // 2,
                                              duration=lambda t, e: (e - t) // 2)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@PROPERTY
@given(stream=physical_streams(), data=st.data())
def test_span_operator_matches_reference(case, stream, data):
    factory, reference, _ = CASES[case]
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    out = run_operator(factory, stream, seed=cut, restore_at=cut)
    assert_equivalent(out, reference(ref_rows(stream)))
    # liveliness: the final input CTI reaches the output, mapped like a start time
    if case in CTI_MAP:
        assert final_time(out) == CTI_MAP[case](final_time(stream))


#: How each operator maps CTIs (duration functions may hold the CTI back instead).
CTI_MAP = {
    "where": lambda c: c, "select": lambda c: c, "to_points": lambda c: c,
    "clip_duration": lambda c: c, "shift+": lambda c: c + 7, "shift-": lambda c: c - 5,
    "alter_const": lambda c: c + 3,
}


def ref_rows(stream):
    from operators.cht import to_cht
    return to_cht(stream)


# -- scenarios ----------------------------------------------------------------------------------
def test_alter_lifetime_appear_change_vanish():
    #   input   a: [0 ────────────── ∞)      then closed at 2, reopened to 10, changed to 12
    #   output  a: [0 ─── ∞) ; vanishes (2 - 3 < 0) ; appears [0, 7) fresh id ; changes to [0, 9)
    op = AlterLifetime(duration=lambda s, e: e - s - 3)
    out = op.process([
        Insert("a", 0, INF, "x"),
        Retract("a", 0, INF, 2, "x"),
        Retract("a", 0, 2, 10, "x"),
        Retract("a", 0, 10, 12, "x"),
    ])
    assert [type(m).__name__ for m in out] == ["Insert", "Retract", "Insert", "Retract"]
    assert out[1].new_end == 0  # vanished
    assert out[2].id != "a" and (out[2].start, out[2].end) == (0, 7)  # fresh id
    assert (out[3].id, out[3].end, out[3].new_end) == (out[2].id, 7, 9)
    assert_equivalent(out, [(0, 9, "x")])


def test_alter_lifetime_holds_cti_for_open_events():
    #   a: [0 ── ∞) open; Cti(2) cannot pass 0: closing a at 2 (duration 2 - 3 < 0) deletes it
    op = AlterLifetime(duration=lambda s, e: e - s - 3)
    assert op.process([Insert("a", 0, INF, "x"), Cti(2)]) == [Insert("a", 0, INF, "x"), Cti(0)]
    assert op.process([Retract("a", 0, INF, 2, "x")]) == [Retract("a", 0, INF, 0, "x")]
    assert op.process([Cti(8)]) == [Cti(8)]  # nothing open any more


def test_start_function_must_not_decrease():
    op = AlterLifetime(start=lambda s: s if s < 15 else s - 20, duration=5)
    op.process([Insert("a", 10, 20, None), Cti(12)])
    with pytest.raises(OperatorError, match="never decrease"):
        op.process([Insert("b", 16, 20, None)])


def test_user_function_errors_name_the_step():
    op = Select(lambda p: p["missing"], name="select#2")
    with pytest.raises(OperatorError, match=r"select#2.*KeyError"):
        op.process([Insert("a", 0, 1, {})])


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_clip_duration_rejects_bad_limits(bad):
    with pytest.raises((TypeError, ValueError), match=r"clip_duration\(limit="):
        ClipDuration(bad)


def test_shift_keeps_infinity():
    assert Shift(-4).process([Insert("a", 10, MAX_TIME, 1)]) == [Insert("a", 6, MAX_TIME, 1)]


@PROPERTY
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=40), st.integers(1, 30))
def test_alter_lifetime_of_columns_equals_it_event_by_event(starts, duration):
    import numpy as np

    from operators.alter_lifetime import AlterLifetime
    from operators.columns import Columns, expand

    s = np.array(sorted(starts), dtype=np.int64)
    batch = Columns(np.arange(len(s)), s, None, {"v": np.arange(len(s))})
    fast = AlterLifetime(duration=duration).process([batch, Cti(60)])
    slow = AlterLifetime(duration=duration).process(batch.inserts() + [Cti(60)])
    assert isinstance(fast[0], Columns)
    assert list(expand(fast)) == slow
