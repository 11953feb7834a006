"""Session windows against the from-scratch reference on random valid physical streams.

Each case of :data:`CASES` is a session spec (gap, max_duration), a UDM, a kind and the
clipping and output policies; the operator (:class:`SessionWindowOperator`) runs it in random
batch sizes, checkpointed and restored at a random message, and must give the CHT of the
reference (:mod:`tests.reference_session`) over the input's CHT, the output CTI the CTIs allow
and no more state than the sessions not final yet. The same queries run through the builder
inline and on Ray, and with ``emit="final"`` (one row per session, never retracted). The test
UDMs return their whole input, so a wrong membership, clipping or delta shows in the CHT.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Max, Sum, TimeWeightedAverage
from operators.cht import to_cht, validate
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.windows import SessionWindow, WindowPolicy, make_window
from operators.windows.final_output import FinalOutput
from operators.windows.session import SessionWindowOperator
from tests import reference_session as ref
from tests.kit import (
    ON_RAY,
    PROPERTY,
    assert_equivalent,
    final_time,
    physical_streams,
    run_operator,
)
from tests.operators.test_count_window import (
    ClippedEvents,
    ClippedMultiset,
    ClippedSpans,
    EvenValues,
    Fragile,
    Multiset,
    SortedValues,
    _long_stream,
    distinct,
    total,
)
from topology import Stream


class Case:
    """One session-window query: its operator, its reference and its builder form."""

    def __init__(self, gap, udm, kind="aggregate", max_duration=None, clip="full",
                 output="window"):
        self.spec = SessionWindow(gap, max_duration)
        self.make_udm, self.kind, self.clip, self.output = udm, kind, clip, output

    def operator(self):
        return SessionWindowOperator(self.spec, self.make_udm(), kind=self.kind,
                                     policy=WindowPolicy(self.clip, self.output), name="sw")

    def reference(self, rows):
        return ref.session_window(rows, self.spec.gap, self.make_udm(), self.kind,
                                  self.spec.max_duration, self.clip, self.output)

    def query(self, stream, emit="speculative"):
        windowed = stream.session_window(self.spec.gap, self.spec.max_duration, clip=self.clip,
                                         output=self.output, emit=emit)
        return getattr(windowed, self.kind)(self.make_udm())


CASES: dict[str, Case] = {
    "g3_values": Case(3, SortedValues),
    "g1_values": Case(1, SortedValues),
    "g7_values_max9": Case(7, SortedValues, max_duration=9),
    "g3_values_max3": Case(3, SortedValues, max_duration=3),
    "g5_function": Case(5, lambda: total),
    "g3_clipped": Case(3, ClippedEvents),
    "g4_clipped_none": Case(4, ClippedEvents, clip="none"),
    "g4_clipped_max6": Case(4, ClippedEvents, max_duration=6),
    "g3_incremental": Case(3, Multiset),
    "g6_incremental_max8": Case(6, Multiset, max_duration=8),
    "g3_incremental_clipped": Case(3, ClippedMultiset),
    "g5_incremental_unclipped": Case(5, ClippedMultiset, clip="left"),
    "g3_udo": Case(3, EvenValues, "apply"),
    "g4_udo_clipped": Case(4, ClippedSpans, "apply"),
    "g4_udo_stamped": Case(4, ClippedSpans, "apply", output="clip"),
    "g3_function_apply": Case(3, lambda: distinct, "apply"),
    "g3_count": Case(3, Count),
    "g3_count_point_end": Case(3, Count, output="point_end"),
    "g5_values_point_end_max7": Case(5, SortedValues, max_duration=7, output="point_end"),
    "g4_sum": Case(4, Sum),
    "g4_max_max5": Case(4, Max, max_duration=5),
    "g3_twa": Case(3, TimeWeightedAverage),
}

#: wide streams, and narrow ones where equal starts and touching sessions are frequent
STREAMS = st.one_of(physical_streams(), physical_streams(span=8, max_length=6))


def held_from(rows, case: Case, c: int):
    """The first session a CTI at ``c`` does not free (the reference's view), or None: the
    first whose window ends after ``c`` or, under an unclipped time-sensitive UDM, that holds
    an event ending at or after ``c``."""
    unclipped = case.clip in ("none", "left") and case.operator().ts
    for window, members in ref.sessions(rows, case.spec.gap, case.spec.max_duration):
        if window.end > c or (unclipped and any(e >= c for _, e, _ in members)):
            return window, members
    return None


def expected_cti(stream, case: Case) -> int:
    c = final_time(stream)
    held = held_from(to_cht(stream), case, c)
    if held is None or case.output == "keep":
        return c
    window = held[0]
    return min(c, window.end - 1 if case.output == "point_end" else window.start)


def state_bound(stream, case: Case) -> int:
    """After the final CTI the operator holds only the sessions from the first held one on."""
    rows = to_cht(stream)
    held = held_from(rows, case, final_time(stream))
    if held is None:
        return 0
    first = held[0].start
    later = [w for w, _ in ref.sessions(rows, case.spec.gap, case.spec.max_duration)
             if w.start >= first]
    return sum(1 for s, _, _ in rows if s >= first) + len(later)


def check_case(name: str, stream, cut: int, seed: int) -> None:
    case = CASES[name]
    expected = case.reference(to_cht(stream))
    try:
        out = run_operator(case.operator, stream, seed=seed, restore_at=cut)
        assert_equivalent(out, expected)
        assert final_time(out) == expected_cti(stream, case), "output CTI"
        op = case.operator()
        whole = op.process(stream)  # one batch: every session evaluated once per CTI
        op._check()
        validate(whole)
        assert_equivalent(whole, expected)
        assert op.state_size() <= state_bound(stream, case), "state after the final CTI"
    except AssertionError as exc:
        raise AssertionError(f"case {name}: {exc}") from exc


@pytest.mark.parametrize("name", sorted(CASES))
@PROPERTY
@given(stream=STREAMS, data=st.data())
def test_session_window_matches_reference(name, stream, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    seed = data.draw(st.integers(0, 3), label="seed")
    check_case(name, stream, cut, seed)


@PROPERTY
@given(stream=STREAMS, name=st.sampled_from(sorted(CASES)), data=st.data())
def test_emit_final_is_the_speculative_cht_without_retractions(stream, name, data):
    case = CASES[name]

    def final():
        return FinalOutput(case.operator(), final_at_end=True)

    op, out, cti = final(), [], None
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    for i, msg in enumerate(stream):
        if i == cut:
            state, op = op.snapshot(), final()
            op.restore(state)
        if type(msg) is Cti:
            cti = msg.time
        for m in op.process([msg]):
            if type(m) is Insert:  # sent once final: a CTI has passed its session's end
                assert cti is not None and m.end <= cti, (m, cti)
            out.append(m)
    out += op.finish()
    validate(out, name="final output")
    assert not any(type(m) is Retract for m in out)
    assert_equivalent(out, case.reference(to_cht(stream)))


@pytest.mark.parametrize("name", ["g3_values", "g7_values_max9", "g3_incremental_clipped",
                                  "g4_udo_stamped", "g3_count_point_end"])
@ON_RAY
@given(stream=STREAMS)
def test_builder_query_matches_reference(name, stream):
    case = CASES[name]
    expected = case.reference(to_cht(stream))
    for emit in ("speculative", "final"):
        out = case.query(Stream.from_events(stream), emit).collect(runtime="inline")
        validate(out)
        assert_equivalent(out, expected)
        if emit == "final":
            assert not any(type(m) is Retract for m in out)


# -- on both runtimes, per key, restored -------------------------------------------------------
def _keyed_reference(stream, case: Case):
    """group_apply(payload % 2, session) by the definition: the reference per key."""
    rows = to_cht(stream)
    return [(s, e, (k, r)) for k in (0, 1)
            for s, e, r in case.reference([row for row in rows if row[2] % 2 == k])]


@pytest.mark.parametrize("name", ["g3_values_max3", "g5_incremental_unclipped"])
@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_group_apply_on_every_runtime(runtime, name, emit):
    case = CASES[name]
    for stream in (_long_stream(40), _long_stream(25)[::-1][::-1]):
        q = Stream.from_events(stream).group_apply(lambda p: p % 2,
                                                   lambda g: case.query(g, emit),
                                                   partitions=2)
        out = q.collect(runtime, batch_size=3)
        validate(out)
        assert_equivalent(out, _keyed_reference(stream, case))
        if emit == "final":
            assert not any(type(m) is Retract for m in out)


# -- a timeline --------------------------------------------------------------------------------
def test_sessions_grow_merge_split_and_close_as_a_timeline():
    #   time     0    2    4    6    8   10   12   14   16   18   20   22     gap 5, Count
    #   a·0 b·2                                     → [0, 7) 2
    #   c·10 d·12                                   → [10, 17) 2
    #   e·6 bridges them (6 < 2 + 5, 10 < 6 + 5)    → [0, 17) 5, both earlier rows retracted
    #   CTI 5: [0, 17) can still change: output CTI 0 (its start)
    #   e retracted: the hole 2 → 10 is 5 ≥ gap     → split again: [0, 7) 2 and [10, 17) 2
    #   f·15 grows the second                       → [10, 20) 3
    #   CTI 21 passes 20: every session is final and freed, output CTI 21
    op = SessionWindowOperator(SessionWindow(5), Count(), name="sw")
    out = op.process([Insert(n, t, t + 1) for n, t in (("a", 0), ("b", 2), ("c", 10),
                                                        ("d", 12))])
    assert to_cht(out) == [(0, 7, 2), (10, 17, 2)]
    out += op.process([Insert("e", 6, 7)])
    assert to_cht(out) == [(0, 17, 5)]
    step = op.process([Cti(5)])
    assert step == [Cti(0)]
    out += step
    out += op.process([Retract("e", 6, 7, 6)])
    assert to_cht(out) == [(0, 7, 2), (10, 17, 2)]
    out += op.process([Insert("f", 15, 16)])
    assert to_cht(out) == [(0, 7, 2), (10, 20, 3)]
    step = op.process([Cti(21)])
    assert step == [Cti(21)] and op.state_size() == 0
    validate(out + step)
    op._check()


def test_max_duration_cuts_a_long_session():
    #   points every 2 ticks from 0 to 12, gap 3, max_duration 5: cut greedily from the left
    #   [0, 5) holds 0 2 4, [6, 11) holds 6 8 10, [12, 15) holds 12
    op = SessionWindowOperator(SessionWindow(3, max_duration=5), Count())
    out = op.process([Insert(t, t, t + 1) for t in range(0, 14, 2)] + [Cti(20)])
    assert to_cht(out) == [(0, 5, 3), (6, 11, 3), (12, 15, 1)]
    # an event at -1 shifts every cut of the run after it
    op = SessionWindowOperator(SessionWindow(3, max_duration=5), Count())
    out = op.process([Insert(t, t, t + 1) for t in range(0, 14, 2)])
    out += op.process([Insert("x", -1, 0), Cti(20)])
    assert to_cht(out) == [(-1, 4, 3), (4, 9, 3), (10, 15, 2)]


def test_an_edge_keeps_an_unclipped_session_open_until_it_closes():
    # clip="none": the UDM sees the edge's end, so its session is not final at CTI 10
    op = SessionWindowOperator(SessionWindow(3), ClippedEvents(),
                               policy=WindowPolicy(clip="none"))
    out = op.process([Insert("a", 0, MAX_TIME, "x"), Cti(10)])
    assert out[-1] == Cti(0) and op.state_size() == 2
    out += op.process([Retract("a", 0, MAX_TIME, 12, "x"), Cti(13)])
    assert out[-1] == Cti(13) and op.state_size() == 0
    assert to_cht(out) == [(0, 3, ((0, 3), ((0, 12, "x"),)))]


# -- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "match"), [
    ((0,), r"\(gap=0\): gap must be a positive duration"),
    ((-5,), r"\(gap=-5\): gap must be"), ((2.5,), r"\(gap=2.5\): a float is not a duration"),
    (("5",), r"\(gap='5'\): '5' has no unit"),
    ((10, 5), r"\(max_duration=...\): max_duration \(5\) must be at least the gap \(10\)"),
    ((10, 0), r"\(max_duration=0\): max_duration must be a positive"),
])
def test_bad_arguments_are_refused_when_the_query_is_built(args, match):
    with pytest.raises((TypeError, ValueError), match=f"^session_window{match}"):
        Stream.from_events([]).session_window(*args)


def test_bad_policies_are_refused_when_the_query_is_built():
    with pytest.raises(ValueError, match="clip='middle'"):
        Stream.from_events([]).session_window(5, clip="middle")
    with pytest.raises(ValueError, match="compressed"):
        Stream.from_events([]).session_window(5, output="compressed")
    with pytest.raises(ValueError, match="emit="):
        Stream.from_events([]).session_window(5, emit="later")


def test_udm_error_names_the_session_and_dead_letters_when_final():
    op = SessionWindowOperator(SessionWindow(3), Fragile(), name="sw#1")
    op.process([Insert("a", 1, 2, 1)])
    with pytest.raises(OperatorError, match=r"sw#1.*Fragile.*\[1, 6\).*ZeroDivisionError"):
        op.process([Insert("b", 3, 4, 13)])
    op = SessionWindowOperator(SessionWindow(3), Fragile(), on_error="dead_letter")
    out = op.process([Insert("a", 1, 2, 1), Insert("b", 3, 4, 13), Insert("c", 10, 11, 2)])
    assert to_cht(out) == [(10, 13, 2)] and op.dead_letters == []
    out += op.process([Cti(7)])
    [letter] = op.dead_letters
    assert "Fragile" in letter.reason and sorted(letter.item[1]) == [(1, 2, 1), (3, 4, 13)]


def test_make_window_builds_it():
    op = make_window(SessionWindow(4), Count(), name="w")
    assert isinstance(op, SessionWindowOperator)
    assert to_cht(op.process([Insert(1, 0, 1), Insert(2, 3, 4), Cti(9)])) == [(0, 7, 2)]
