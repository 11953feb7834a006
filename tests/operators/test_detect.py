"""``detect``: row pattern recognition against the from-scratch backtracking matcher
(:func:`tests.reference_patterns.detect`) on random valid physical streams (disorder, lifetime
corrections, deletions, CTIs) with random patterns over 2-3 symbols and random predicates,
speculative and final, keyed and not, restored mid-stream, in random batches; scenarios that
read like timelines; the errors, pointing at the spot."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.detect import EMITS, Detect
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.pattern import PatternError
from tests import reference_patterns as ref
from tests.kit import HEAVY, PROPERTY, assert_equivalent, final_time, physical_streams, run_operator

SYMBOLS = ("A", "B", "C")
QUANTIFIERS = ("?", "*", "+", "??", "*?", "+?", "{2}", "{1,}", "{0,2}", "{1,3}?", "{,2}")


def patterns(n_symbols: int) -> st.SearchStrategy[str]:
    """Random patterns over the first ``n_symbols`` symbols: concatenation, alternation,
    groups and every repetition, greedy and reluctant."""
    leaves = st.sampled_from(SYMBOLS[:n_symbols])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(" ".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda xs: f"({' | '.join(xs)})"),
            st.tuples(inner, st.sampled_from(QUANTIFIERS)).map(lambda t: f"({t[0]}){t[1]}"),
        )

    return st.recursive(leaves, extend, max_leaves=5)


def _predicate(kind: str, sym: str):
    """One of a family of predicates over int payloads, some reading the match so far."""
    return {
        "even": lambda p, m: p % 2 == 0,
        "big": lambda p, m: p >= 3,
        "small": lambda p, m: p <= 2,
        "rising": lambda p, m: not m[sym] or p > m[sym][-1],      # above its own last row
        "not_first": lambda p, m: p != next((v[0] for v in m.values() if v), -1),
        "few": lambda p, m: sum(len(v) for v in m.values()) < 3,   # the match so far is short
    }[kind]


PREDICATES = ("any", "even", "big", "small", "rising", "not_first", "few")


@st.composite
def detect_cases(draw, keyed: bool | None = None):
    """``(pattern, define, within, key, tie)`` drawn at random."""
    n = draw(st.integers(2, 3), label="symbols")
    pattern = draw(patterns(n), label="pattern")
    define = {}
    for sym in SYMBOLS[:n]:
        kind = draw(st.sampled_from(PREDICATES), label=f"define {sym}")
        if kind != "any" and sym in pattern:
            define[sym] = _predicate(kind, sym)
    within = draw(st.integers(1, 15), label="within")
    if keyed is None:
        keyed = draw(st.booleans(), label="keyed")
    key = (lambda p: p // 3) if keyed else None
    tie = draw(st.sampled_from([None, lambda p: -p]), label="tie")
    return pattern, define, within, key, tie


STREAMS = st.one_of(physical_streams(max_steps=40), physical_streams(span=6, max_length=6))


def _expected(stream, pattern, define, within, key, tie, measures=None):
    return ref.detect(to_cht(stream), pattern, define, within, measures, key, tie)


def _factory(pattern, define, within, key, tie, emit="speculative", measures=None):
    return lambda: Detect(pattern, define, within=within, measures=measures, key=key, tie=tie,
                          emit=emit)


# -- against the reference ----------------------------------------------------------------------
@PROPERTY
@given(stream=STREAMS, case=detect_cases(), data=st.data())
def test_speculative_output_is_the_matches_over_the_input_cht(stream, case, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    out = run_operator(_factory(*case), stream, seed=cut, restore_at=cut)
    assert_equivalent(out, _expected(stream, *case))
    last = final_time(stream)
    if last is not None:  # held back to the first open attempt: less than `within` behind
        assert last - case[2] < final_time(out) <= last, "the output CTI is out of bounds"


@PROPERTY
@given(stream=STREAMS, case=detect_cases(), data=st.data())
def test_final_output_is_never_retracted_and_is_the_matches_once_time_has_passed(
        stream, case, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    expected = _expected(stream, *case)
    # before the last CTI has passed `within`: only matches that are in the end result
    early = run_operator(_factory(*case, emit="final"), stream, seed=cut, restore_at=cut)
    assert not any(type(m) is Retract for m in early), "final output is never retracted"
    extra = [r for r in to_cht(early) if r not in expected]
    assert not extra, f"final matches that are not matches: {extra}"
    # a CTI `within` past the last: everything is final
    flushed = stream + [Cti((final_time(stream) or 0) + case[2])]
    out = run_operator(_factory(*case, emit="final"), flushed, seed=cut + 1, restore_at=cut)
    assert not any(type(m) is Retract for m in out)
    assert_equivalent(out, expected)
    assert final_time(out) == final_time(flushed)


@HEAVY
@given(stream=physical_streams(max_steps=120, span=10, max_length=8), case=detect_cases(),
       data=st.data())
def test_long_streams_in_one_batch_and_in_random_batches(stream, case, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    expected = _expected(stream, *case)
    op = _factory(*case)()
    whole = op.process(stream)
    validate(whole)
    assert_equivalent(whole, expected)
    out = run_operator(_factory(*case), stream, seed=cut, restore_at=cut)
    assert_equivalent(out, expected)


@PROPERTY
@given(stream=STREAMS, case=detect_cases(keyed=True))
def test_keyed_is_per_key_detection_united(stream, case):
    pattern, define, within, key, tie = case
    rows = to_cht(stream)
    expected = []
    for k in {key(p) for _, _, p in rows}:
        expected += ref.detect([r for r in rows if key(r[2]) == k], pattern, define, within,
                               None, None, tie)
    out = run_operator(_factory(*case), stream, seed=1)
    assert_equivalent(out, expected)


@PROPERTY
@given(stream=STREAMS, case=detect_cases(keyed=False), emit=st.sampled_from(sorted(EMITS)),
       data=st.data())
def test_under_group_apply_each_key_has_its_own_detect(stream, case, emit, data):
    # group_apply drops a key whose detect holds no state and starts a fresh one at its next
    # event: detect's state_size() is 0 only when a fresh one would behave the same
    pattern, define, within, _, tie = case
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    flushed = stream + [Cti((final_time(stream) or 0) + within)]
    out = run_operator(lambda: GroupApply(lambda p: p % 2, _factory(*case, emit=emit)),
                       flushed, seed=cut, restore_at=cut)
    rows = to_cht(stream)
    expected = [(s, e, (k, m)) for k in (0, 1) for s, e, m in ref.detect(
        [r for r in rows if r[2] % 2 == k], pattern, define, within, None, None, tie)]
    assert_equivalent(out, expected)


# -- scenarios -------------------------------------------------------------------------------------
def _abc(**kw):
    return Detect("A B+ C", {"A": lambda p, m: p == "a", "B": lambda p, m: p == "b",
                             "C": lambda p, m: p == "c"}, **kw)


def _points(*pairs):
    return [Insert(f"{p}{t}", t, t + 1, p) for t, p in pairs]


def test_a_match_appears_when_complete_and_a_late_row_changes_it():
    #   a@1  b@2  b@3  c@5           → A B B C, [1, 6)
    #   b@4 arrives late (CTI 1)     → [1, 6) retracted; A B B B C, [1, 6)
    op = _abc(within=10)
    out = op.process(_points((1, "a"), (2, "b"), (3, "b"), (5, "c")) + [Cti(1)])
    assert to_cht(out) == [(1, 6, {"A": ("a",), "B": ("b", "b"), "C": ("c",)})]
    late = op.process(_points((4, "b")))
    assert [type(m) for m in late] == [Retract, Insert]
    assert to_cht(out + late) == [(1, 6, {"A": ("a",), "B": ("b",) * 3, "C": ("c",)})]


def test_a_deleted_row_breaks_its_match_and_the_rows_after_match_anew():
    #   a@1  a@2  b@3  c@4             → the attempt from a@1 fails (a@2 is no B);
    #                                    from a@2: A B C, [2, 5)
    #   b@3 deleted                    → no match
    #   b@3 shortened instead          → still a row: the match stays
    op = _abc(within=10)
    out = op.process(_points((1, "a"), (2, "a"), (3, "b"), (4, "c")))
    assert to_cht(out) == [(2, 5, {"A": ("a",), "B": ("b",), "C": ("c",)})]
    out += op.process([Retract("b3", 3, 4, 3, "b")])
    assert to_cht(out) == []
    op = _abc(within=10)
    out = op.process([Insert("b3", 3, 9, "b"), *_points((2, "a"), (4, "c")),
                      Retract("b3", 3, 9, 4, "b")])
    assert to_cht(out) == [(2, 5, {"A": ("a",), "B": ("b",), "C": ("c",)})]


def test_a_deletion_uncovers_rows_that_start_a_match_of_their_own():
    #   a@1  b@2  c@3  a@4  b@5  c@6   pattern 'A B C | A B C A'? no: 'A B+ C A?' greedy
    #   A B C A covers a@4: one match [1, 5); b@5 c@6 alone do not match
    #   a@1 deleted → a@4 starts a match: A B C, [4, 7)
    op = Detect("A B C A?", {"A": lambda p, m: p == "a", "B": lambda p, m: p == "b",
                             "C": lambda p, m: p == "c"}, within=10)
    out = op.process(_points((1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b"), (6, "c")))
    assert [(s, e) for s, e, _ in to_cht(out)] == [(1, 5)]
    out += op.process([Retract("a1", 1, 2, 1, "a")])
    assert [(s, e) for s, e, _ in to_cht(out)] == [(4, 7)]


def test_within_breaks_a_candidate_and_the_next_preferred_is_tried():
    #   a@0  b@1  b@2  b@3  c@4  c@9     within 5: last start - first start < 5
    #   A B+ C*: greedy takes b b b c; c@9 is 9 past a@0: not in the match
    op = Detect("A B+ C*", {"A": lambda p, m: p == "a", "B": lambda p, m: p == "b",
                            "C": lambda p, m: p == "c"}, within=5)
    out = op.process(_points((0, "a"), (1, "b"), (2, "b"), (3, "b"), (4, "c"), (9, "c")))
    assert [(s, e) for s, e, _ in to_cht(out)] == [(0, 5)]
    #   'A B+ C' within 4: a@0 .. c@4 spans 4: no match from a@0 (there is no shorter one)
    op = _abc(within=4)
    assert to_cht(op.process(_points((0, "a"), (1, "b"), (2, "b"), (4, "c")))) == []


def test_greedy_takes_more_reluctant_fewer_and_alternation_prefers_its_left():
    #   rows   x@1 x@2 x@3 x@4    (every symbol matches any row)
    rows = _points((1, "x"), (2, "x"), (3, "x"), (4, "x"))

    def spans(pattern):
        return [(s, e) for s, e, _ in to_cht(Detect(pattern, within=10).process(rows))]

    assert spans("A B*") == [(1, 5)]                    # one match: all four rows
    assert spans("A B*?") == [(1, 2), (2, 3), (3, 4), (4, 5)]  # the fewest: A alone
    assert spans("A B{1,2}?") == [(1, 3), (3, 5)]
    assert spans("A B?? C") == [(1, 3), (3, 5)]
    out = to_cht(Detect("A | A B", within=10).process(rows))
    assert out[0][2] == {"A": ("x",), "B": ()}          # the left alternative, one row


def test_predicates_see_the_rows_bound_so_far():
    #   a V-bottom: prices falling then rising, 'D+ U+' with D below the last D, U above the
    #   last row bound to either
    #   price   9@1  7@2  5@3  6@4  8@5  4@6
    #   match   D: 9 7 5   U: 6 8        [1, 6)
    def below_last(p, m):
        return not m["D"] or p < m["D"][-1]

    def above_last(p, m):
        last = (m["U"] or m["D"])[-1]
        return p > last

    op = Detect("D{2,} U+", {"D": below_last, "U": above_last}, within=100)
    out = op.process([Insert(t, t, t + 1, p) for t, p in
                      [(1, 9), (2, 7), (3, 5), (4, 6), (5, 8), (6, 4)]])
    assert to_cht(out) == [(1, 6, {"D": (9, 7, 5), "U": (6, 8)})]


def test_measures_shape_the_payload_and_equal_starts_go_by_tie():
    #   at 5: "x" and "y" arrive in either order; tie puts "y" first (reverse)
    rows = [Insert("1", 5, 6, "x"), Insert("2", 5, 6, "y")]

    def first_two(m):
        return m["A"] + m["B"]

    for order in (rows, rows[::-1]):
        out = Detect("A B", within=3, measures=first_two, tie=lambda p: -ord(p)).process(order)
        assert to_cht(out) == [(5, 6, ("y", "x"))]


def test_final_mode_outputs_a_match_once_no_input_can_change_it():
    #   a@1 b@2 c@3           Cti(4): the attempt from a@1 is final (it read up to c@3, it
    #                         wants no more rows): A B C output, the output CTI goes to 4
    #   a@5 b@6 (B+ greedy)   Cti(8): the attempt from a@5 may still take b@8 (within 10):
    #                         held back; the output CTI stays at 5, its first row
    #   c@9, Cti(10)          read up to c@9, wants no more: final
    op = Detect("A B+ C", {"A": lambda p, m: p == "a", "B": lambda p, m: p == "b",
                           "C": lambda p, m: p == "c"}, within=10, emit="final")
    out = op.process(_points((1, "a"), (2, "b"), (3, "c")) + [Cti(4)])
    assert to_cht(out) == [(1, 4, {"A": ("a",), "B": ("b",), "C": ("c",)})]
    assert out[-1] == Cti(4)
    more = op.process(_points((5, "a"), (6, "b")) + [Cti(8)])
    assert more == [Cti(5)]
    more = op.process(_points((9, "c")) + [Cti(10)])
    assert to_cht(more) == [(5, 10, {"A": ("a",), "B": ("b",), "C": ("c",)})]
    assert more[-1] == Cti(10)
    assert op.state_size() == 0


def test_speculative_output_cti_is_held_back_to_the_first_open_attempt():
    #   a@1 b@2, Cti(20), within 5: the attempt from a@1 wanted a C before 6, which the CTI
    #   has passed: final, freed, the output CTI is the input's
    op = _abc(within=5)
    out = op.process(_points((1, "a"), (2, "b")) + [Cti(3)])
    assert out == [Cti(1)]                          # a@1's attempt is open until 6
    assert op.process([Cti(20)]) == [Cti(20)] and op.state_size() == 0


def test_state_stays_bounded_by_within_when_the_pattern_never_completes():
    #   a b b b b ... (no c ever): 'A B+ C' within 50, a CTI every 10 rows
    op = _abc(within=50)
    sizes = []
    for t in range(5000):
        msgs = _points((t, "a" if t % 7 == 0 else "b"))
        if t % 10 == 9:
            msgs.append(Cti(t - 2))
        op.process(msgs)
        sizes.append(op.state_size())
    assert max(sizes[1000:]) <= 70, max(sizes)          # within + a CTI's lag, not 5000
    assert len(op.ids) == op.state_size()               # ids of freed rows are freed too


def test_a_checkpoint_restores_through_pickle():
    op = _abc(within=10)
    op.process(_points((1, "a"), (2, "b")) + [Cti(1)])
    again = _abc(within=10)
    again.restore(pickle.loads(pickle.dumps(op.snapshot())))
    out = again.process(_points((3, "c")))
    assert to_cht(out) == [(1, 4, {"A": ("a",), "B": ("b",), "C": ("c",)})]
    again._check()


def test_keyed_matches_stay_within_their_key_and_the_key_function_is_declared():
    #   key "x": a@1 b@3 c@5      key "y": b@2 c@4 (no a)
    def key(p):
        return p[0]

    op = Detect("A B C", {"A": lambda p, m: p[1] == "a", "B": lambda p, m: p[1] == "b",
                          "C": lambda p, m: p[1] == "c"}, within=10, key=key)
    out = op.process([Insert(t, t, t + 1, p) for t, p in
                      [(1, ("x", "a")), (2, ("y", "b")), (3, ("x", "b")), (4, ("y", "c")),
                       (5, ("x", "c"))]])
    assert [(s, e) for s, e, _ in to_cht(out)] == [(1, 6)]
    assert op.key_functions() == (key,)
    assert _abc(within=1).key_functions() is None


def test_within_takes_durations():
    assert _abc(within="5 min").within == 300_000_000
    assert _abc(within=timedelta(seconds=2)).within == 2_000_000
    assert _abc(within=7).within == 7


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("pattern", "message"), [
    ("A B+ (C", "pattern 'A B+ (C': unclosed '(' at column 7 (opened at column 5); add ')'\n"
                "  A B+ (C\n         ^"),
    ("A )", "unmatched ')' at column 2"),
    ("A | | B", "nothing to match before '|' at column 4"),
    ("*A", "'*' at column 0 repeats nothing"),
    ("A+*", "'*' at column 2 repeats a repetition"),
    ("A{3,1}", "the most (1) is below the least (3)"),
    ("A{x}", "bad repetition '{x}' at column 1"),
    ("A & B", "unexpected '&' at column 2"),
    ("  ", "the pattern is empty"),
])
def test_a_bad_pattern_is_refused_pointing_at_the_spot(pattern, message):
    with pytest.raises(PatternError) as err:
        Detect(pattern, within=5)
    assert message in str(err.value)
    assert str(err.value).endswith("^")


def test_bad_arguments_are_refused_saying_what_to_give():
    with pytest.raises(ValueError, match=r"define names 'D', which the pattern does not use; "
                                         r"its symbols are A, B, C"):
        Detect("A B+ C", {"D": lambda p, m: True}, within=5)
    with pytest.raises(ValueError, match=r"within is required.*within=\"5 min\""):
        Detect("A B")
    with pytest.raises(ValueError, match=r"within must be a positive duration"):
        Detect("A B", within=0)
    with pytest.raises(ValueError, match=r"within must be a positive duration"):
        Detect("A B", within="-5 min")
    with pytest.raises(TypeError, match=r"define\['A'\]=3 is not callable"):
        Detect("A B", {"A": 3}, within=5)
    with pytest.raises(ValueError, match=r"emit='later'"):
        Detect("A B", within=5, emit="later")
    with pytest.raises(TypeError, match=r"pattern=3 is not a string"):
        Detect(3, within=5)  # type: ignore[arg-type]


def test_a_predicate_that_raises_fails_naming_the_step_and_the_symbol():
    op = Detect("A B", {"B": lambda p, m: p["v"] > 1}, within=5, name="detect#2")
    with pytest.raises(OperatorError, match=r"detect#2.*define\['B'\].*payload 7"):
        op.process(_points((1, 5), (2, 7)))
    op = Detect("A B", {"B": lambda p, m: m["Z"]}, within=5)
    with pytest.raises(OperatorError, match=r"no symbol 'Z'; its symbols are A, B"):
        op.process(_points((1, 5), (2, 7)))


def test_the_module_docstrings_timeline():
    #   a@1  b@2  b@3  c@5  a@6  b@7  c@8      'A B+ C' within 10
    #   matches  [1 ─────────── 6)  [6 ───── 9)
    #   b@4 late: [1, 6) retracted and inserted again with B = (b, b, b); [6, 9) untouched
    #   a@1 deleted: [1, 6) retracted; [6, 9) untouched
    op = _abc(within=10)
    out = op.process(_points((1, "a"), (2, "b"), (3, "b"), (5, "c"), (6, "a"), (7, "b"),
                             (8, "c")))
    assert [(s, e) for s, e, _ in to_cht(out)] == [(1, 6), (6, 9)]
    late = op.process(_points((4, "b")))
    assert [(type(m), m.start) for m in late] == [(Retract, 1), (Insert, 1)]
    gone = op.process([Retract("a1", 1, 2, 1, "a")])
    assert [(type(m), m.start) for m in gone] == [(Retract, 1)]
    assert [(s, e) for s, e, _ in to_cht(out + late + gone)] == [(6, 9)]


def test_an_id_used_again_after_its_event_ended_names_the_new_event():
    #   x [1 ─ 2) "a"   Cti(3)   x [4 ─ 5) "b" (the id again)   then x deleted: "b" goes,
    #   "a" stays (it ended before the CTI); 'A B' over any rows, within 10: a b → b gone
    op = Detect("A B", within=10)
    out = op.process([Insert("x", 1, 2, "a"), Cti(3), Insert("x", 4, 5, "b")])
    assert to_cht(out) == [(1, 5, {"A": ("a",), "B": ("b",)})]
    out += op.process([Retract("x", 4, 5, 4, "b")])
    assert to_cht(out) == []
    op._check()
    assert op.state_size() == 1


def test_a_repetition_of_what_can_match_no_row_stops():
    #   '(A?)* B' and '(A*)+ B' over x x y: the loops end when an iteration takes no row
    rows = _points((1, "x"), (2, "x"), (3, "y"))
    for pattern in ("(A?)* B", "(A*)+ B", "(A? A?)*? B"):
        op = Detect(pattern, {"A": lambda p, m: p == "x", "B": lambda p, m: p == "y"},
                    within=10)
        assert [(s, e) for s, e, _ in to_cht(op.process(rows))] == [(1, 4)], pattern
    with pytest.raises(TypeError, match=r"define=\['A'\] is not a dict"):
        Detect("A", ["A"], within=5)  # type: ignore[arg-type]
