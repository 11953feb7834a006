"""Bad input of every kind docs/errors.md names: each one is processed, dropped or adjusted by a
declared policy (and visible in ``late``), or sent to the dead letters with a reason that says
what was wrong and how to fix it. Nothing takes the query down, except a bug inside the engine
(an event behind a CTI between two operators), which fails loudly naming the operator."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from operators.aggregates import Count, Sum
from operators.alter_lifetime import AlterLifetime
from operators.anti_join import AntiJoin
from operators.cht import to_cht
from operators.clip_duration import ClipDuration
from operators.errors import OperatorError
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.ingress import AdvanceTime
from operators.join import Join
from operators.processor import Processor
from operators.select import Select
from operators.shift import Shift
from operators.sources import EventsSource
from operators.to_points import ToPoints
from operators.union import Union
from operators.where import Where
from operators.windows import (
    count_window,
    hopping_window,
    make_window,
    snapshot_window,
    tumbling_window,
)
from tests.kit import PROPERTY, assert_equivalent
from tests.reliability import assert_accounted, records, run_dag
from topology import Stream

GOOD = [{"t": 1, "e": 3, "kwh": 1.0}, {"t": 4, "e": 6, "kwh": 2.0}]


def _rows_query(bad, shape="interval", **kw):
    end = "e" if shape != "point" else None
    return Stream.from_rows([GOOD[0], bad, GOOD[1]], start="t", end=end, shape=shape, **kw)


# -- rows: every bad time is a dead letter with a reason ------------------------------------------
BAD_ROWS = [
    ({"t": 5, "e": 2}, "end 2 is not after start 5"),
    ({"t": 5, "e": 5}, "end 5 is not after start 5"),
    ({"e": 9}, "start time is missing"),
    ({"t": None, "e": 9}, "start time is missing"),
    ({"t": float("nan"), "e": 9}, "missing time (NaN)"),
    ({"t": 2, "e": float("nan")}, "missing time (NaN)"),
    ({"t": "yesterday-ish", "e": 9}, "cannot parse 'yesterday-ish'"),
    ({"t": 2, "e": "2010-13-45"}, "cannot parse '2010-13-45'"),
    ({"t": 2**70, "e": 2**71}, "outside [MIN_TIME, MAX_TIME]"),
    ({"t": -(2**64), "e": 9}, "outside [MIN_TIME, MAX_TIME]"),
    ({"t": 2.5, "e": 9}, "not a whole number of ticks"),
    ({"t": math.inf, "e": 9}, "not finite"),
    ({"t": True, "e": 9}, "a bool (True) is not a time"),
    ({"t": [2], "e": 9}, "cannot read a time from [2]"),
    ("t=2,e=9", "a row must be a dict"),
    (None, "a row must be a dict"),
]


@pytest.mark.parametrize(("bad", "words"), BAD_ROWS, ids=[repr(b) for b, _ in BAD_ROWS])
def test_a_bad_row_is_a_dead_letter_and_the_others_are_processed(bad, words):
    out, dag, fed = run_dag(_rows_query(bad))
    src = dag.procs["from_rows#0"]
    #   rows   [1 -- 3)   <bad>   [4 -- 6)
    #   output [1 -- 3)           [4 -- 6)      and the bad row in dead_letters
    assert_equivalent(out, [(1, 3, GOOD[0]), (4, 6, GOOD[1])])
    [dead] = records(dag, "dead_letters")
    assert dead.item is bad or dead.item == bad
    assert dead.where == "from_rows#0"
    assert words in dead.reason, dead.reason
    assert fed == [3]
    assert src.stats == {"received": 3, "processed": 2, "dropped": 0, "adjusted": 0,
                         "dead_lettered": 1, "ctis": 1}
    assert_accounted(src.stats)


def test_reasons_say_how_to_fix_the_row():
    out, dag, _ = run_dag(Stream.from_rows([{"t": None}, {"t": "noon"}, {"t": 3, "e": 1}],
                                           start="t", end="e", shape="interval"))
    reasons = [d.reason for d in records(dag, "dead_letters")]
    assert "give every row a start time" in reasons[0]
    assert "ISO-8601" in reasons[1]
    assert "needs end > start" in reasons[2]
    assert out == []


def test_edges_unknown_end_duplicate_start_and_reused_ids_are_dead_letters():
    rows = [{"k": "a", "t": 1}, {"k": "zz", "t": 2, "e": 5}, {"k": "a", "t": 2},
            {"k": "a", "e": 4}, {"k": "a", "t": 6}, {"k": None, "t": 7}, {"k": "b", "e": 3}]
    out, dag, _ = run_dag(Stream.from_rows(rows, start="t", end="e", shape="edge", id="k"))
    #   a  [1 ---- ∞) closed at 4  →  [1 -- 4)
    assert_equivalent(out, [(1, 4, rows[0])])
    reasons = [d.reason for d in records(dag, "dead_letters")]
    assert len(reasons) == 5
    assert "no edge with that id is open" in reasons[0]
    assert "duplicate start edge" in reasons[1]
    assert "duplicate id 'a'" in reasons[2]
    assert "the id is missing" in reasons[3]
    assert "no edge with that id is open" in reasons[4]
    assert_accounted(dag.procs["from_rows#0"].stats)


def test_duplicate_ids_of_points_are_dead_letters():
    rows = [{"id": 1, "t": 1}, {"id": 1, "t": 2}, {"id": 2, "t": 2}]
    out, dag, _ = run_dag(Stream.from_rows(rows, start="t", id="id"))
    assert_equivalent(out, [(1, 2, rows[0]), (2, 3, rows[2])])
    [dead] = records(dag, "dead_letters")
    assert "duplicate id 1" in dead.reason and dead.item == rows[1]


def test_late_rows_are_dropped_or_adjusted_and_visible_in_late():
    rows = [{"t": 10, "e": 20}, {"t": 3, "e": 4}, {"t": 5, "e": 15}, {"t": 12, "e": 13}]
    #   CTI after every event: Cti(10) after the first row
    #   [3 -- 4)   behind the CTI, ends before it       → dropped
    #   [5 -- 15)  behind the CTI, ends after it        → adjusted to [10 -- 15)
    out, dag, _ = run_dag(Stream.from_rows(rows, start="t", end="e", shape="interval",
                                           advance=AdvanceTime(every=1, policy="adjust")))
    assert_equivalent(out, [(10, 20, rows[0]), (10, 15, rows[2]), (12, 13, rows[3])])
    late = records(dag, "late")
    assert [(x.action, x.item) for x in late] == [("dropped", rows[1]), ("adjusted", rows[2])]
    assert "behind the CTI 10" in late[0].reason
    assert late[1].event == Insert(1, 10, 15, rows[2])  # dropped rows use no id
    stats = dag.procs["from_rows#0"].stats
    assert (stats["dropped"], stats["adjusted"], stats["processed"]) == (1, 1, 2)
    assert_accounted(stats)


# -- physical messages: every broken stream rule (docs/model.md) is a dead letter ------------
BAD_MESSAGES = [
    (Retract("zz", 1, 2, 1), "retraction of unknown id 'zz'"),
    (Retract("a", 1, 9, 4), "does not match the live event [1, 3)"),
    (Retract("a", 1, 3, 2, "forged"), "retraction payload 'forged' is not the payload 'x'"),
    (Retract("a", 1, 3, 1, "forged"), "retraction payload 'forged' is not the payload 'x'"),
    (Cti(1), "CTI goes back from 2 to 1"),
    (Insert("a", 5, 6), "duplicate id 'a'"),
    (Insert("c", 1, 2), "insert starts at 1, behind the CTI 2"),
    (Retract("a", 1, 3, 1, "x"), "retraction changes time 1, behind the CTI 2"),
    ("Insert(a, 1, 2)", "not a physical message"),
    (None, "not a physical message"),
    ((0, "x", 1, 2, None), "not a physical message"),
]


@pytest.mark.parametrize(("bad", "words"), BAD_MESSAGES, ids=[repr(b) for b, _ in BAD_MESSAGES])
def test_a_message_breaking_a_rule_is_a_dead_letter(bad, words):
    good = [Insert("a", 1, 3, "x"), Cti(2), Insert("b", 4, 8, "y"), Cti(9)]
    out, dag, fed = run_dag(Stream.from_events(good[:2] + [bad] + good[2:]))
    #   a [1 -- 3)  b [4 ---- 8)   whatever the bad message between them
    assert out == good
    [dead] = records(dag, "dead_letters")
    assert dead.item == bad and dead.where == "from_events#0"
    assert words in dead.reason, dead.reason
    # the from_events accounting: received = processed + dead-lettered
    assert fed == [5] and fed[0] == len(out) + len(records(dag, "dead_letters"))


def test_replace_cannot_build_a_message_that_breaks_its_invariants():
    # NamedTuple's _replace would skip the constructor: an end before its start would reach
    # the engine unchecked (and a window would drop it silently)
    with pytest.raises(ValueError, match="end 3 is not after start 5"):
        Insert("a", 5, 6)._replace(end=3)
    with pytest.raises(ValueError, match="new_end equals end"):
        Retract("a", 1, 5, 3)._replace(new_end=5)
    with pytest.raises(TypeError, match="must be an int number of ticks"):
        Cti(3)._replace(time=float("nan"))
    assert Insert("a", 1, 2)._replace(payload=7) == Insert("a", 1, 2, 7)


UNCHECKED = [
    tuple.__new__(Insert, ("u", 5, 3, None)),
    tuple.__new__(Insert, ("u", "soon", None, None)),
    tuple.__new__(Cti, (float("nan"),)),
    tuple.__new__(Retract, ("a", 1, 3, 3, None)),
]


@pytest.mark.parametrize("bad", UNCHECKED, ids=repr)
def test_a_message_built_without_its_checks_is_a_dead_letter(bad):
    good = [Insert("a", 1, 3, "x"), Cti(2), Insert("b", 4, 8, "y"), Cti(9)]
    out, dag, _ = run_dag(Stream.from_events(good[:2] + [bad] + good[2:]))
    assert out == good
    assert [d.item for d in records(dag, "dead_letters")] == [bad]


@pytest.mark.parametrize(("bad", "words"), [
    (UNCHECKED[0], ("Insert('u', 5, 3, None): its fields break the rules of Insert: Insert "
                    "'u': end 3 is not after start 5")),
    (UNCHECKED[1], "start must be an int number of ticks, got 'soon'"),
    (UNCHECKED[2], "Cti(nan,): its fields break the rules of Cti"),
    (UNCHECKED[3], "new_end equals end (3)"),
    (tuple.__new__(Insert, ("u", 5)), "Insert('u', 5): its fields break the rules of Insert"),
    (tuple.__new__(Cti, (3, 4)), "Cti(3, 4): its fields break the rules of Cti"),
    (tuple.__new__(Insert, ("u", True, 9, None)), "got True (bool)"),
    (Insert(["u"], 5, 6), "unhashable type: 'list'; an event id must be hashable"),
    (Cti, "not a physical message: expected Insert, Retract or Cti, got type"),
], ids=["end-before-start", "str-start", "nan-cti", "no-change", "too-few-fields",
        "too-many-fields", "bool-start", "unhashable-id", "a-class"])
def test_the_reason_of_an_unchecked_message_says_what_is_wrong(bad, words):
    src = EventsSource("from_events#0")
    assert src.process([Insert("a", 1, 3), Cti(2), bad, Cti(4)]) == [Insert("a", 1, 3), Cti(2),
                                                                      Cti(4)]
    [dead] = src.dead_letters
    assert words in dead.reason, dead.reason
    assert dead.reason.startswith("input, message #2 ")
    assert "build messages with their constructors" in dead.reason or type(bad) is not tuple


def test_unchecked_messages_dead_letter_into_a_checkpoint():
    # a message object that skipped its checks cannot be unpickled (unpickling re-runs the
    # constructor): its dead letter keeps the fields as a plain tuple, so the source's
    # state still goes to a checkpoint and the records to a driver
    src = EventsSource("from_events#0")
    src.process([Insert("a", 1, 3), *UNCHECKED, tuple.__new__(Insert, ("u", 5))])
    state = pickle.loads(pickle.dumps(src.snapshot()))
    fresh = EventsSource("from_events#0")
    fresh.restore(state)
    assert [repr(d.item) for d in fresh.dead_letters] == [  # repr: NaN is not NaN
        "('u', 5, 3, None)", "('u', 'soon', None, None)", "(nan,)", "('a', 1, 3, 3, None)",
        "('u', 5)"]
    assert fresh.process([Retract("a", 1, 3, 2)]) == [Retract("a", 1, 3, 2)]


def _raw_fields(kind):
    """Messages of ``kind`` built without their checks: any times, one time short or over,
    with or without the payload (which has a default)."""
    # a few values, so that equal times (an empty lifetime, a retraction that changes
    # nothing) come often
    time = st.sampled_from([MIN_TIME - 1, MIN_TIME, 0, 1, 2, MAX_TIME - 1, MAX_TIME,
                            MAX_TIME + 1, True, 1.0, float("nan"), None, "1"])
    n = {Insert: 2, Retract: 3, Cti: 1}[kind]
    times = st.lists(time, min_size=n - 1, max_size=n + 1)
    if kind is Cti:
        return times.map(lambda ts: tuple.__new__(Cti, ts))
    return st.tuples(times, st.sampled_from([(None,), ("p",), ()])).map(
        lambda tp: tuple.__new__(kind, ("x", *tp[0], *tp[1])))


@PROPERTY
@given(st.sampled_from([Insert, Retract, Cti]).flatmap(_raw_fields))
@example(tuple.__new__(Insert, ("x", 1, 1, None)))  # the edges of each rule, for certain
@example(tuple.__new__(Insert, ("x", MAX_TIME - 1, MAX_TIME, None)))
@example(tuple.__new__(Retract, ("x", 0, 1, 1, None)))
@example(tuple.__new__(Retract, ("x", 1, 2, 0, None)))
@example(tuple.__new__(Retract, ("x", 1, 2, 1, None)))
@example(tuple.__new__(Retract, ("x", 2, 2, 5, None)))
@example(tuple.__new__(Cti, (MAX_TIME + 1,)))
def test_the_source_accepts_the_fields_its_constructor_accepts(msg):
    # the source checks fields inline (cheaper than calling the constructor for every
    # message): it must agree with the constructor on every field value, at every length
    try:
        rebuilt = type(msg)(*msg)
        constructed = True
    except (TypeError, ValueError):
        constructed = False
    src = EventsSource("from_events#0")
    out = src.process([msg])
    broken = [d for d in src.dead_letters if "break the rules" in d.reason]
    assert bool(broken) != constructed, (msg, src.dead_letters)
    if constructed and type(msg) is not Retract:  # a retraction of an unknown id: dead
        assert out == [rebuilt] and len(out[0]) == len(rebuilt)


def test_a_message_without_its_payload_gets_the_default_one():
    # the payload has a default: the constructor takes three fields (an explicit Hypothesis
    # example above cannot hold this message, whose repr needs four)
    src = EventsSource("from_events#0")
    out = src.process([tuple.__new__(Insert, ("x", 1, 2)), tuple.__new__(Retract, ("x", 1, 2, 1))])
    assert out == [Insert("x", 1, 2, None), Retract("x", 1, 2, 1, None)]
    assert [len(m) for m in out] == [4, 5] and not src.dead_letters


def test_a_column_batch_is_checked_event_by_event():
    import numpy as np

    from operators.columns import Columns

    #   CTI 5, then columns [7 - 8) [3 - 4) [9 - 9) [6 - 8): the second is behind the CTI,
    #   the third has an empty lifetime; the others go on as inserts, between the CTIs
    cols = Columns(np.arange(4), np.array([7, 3, 9, 6]), np.array([8, 4, 9, 8]),
                   {"v": np.array([1.0, 2.0, 3.0, 4.0])})
    src = EventsSource("from_events#0")
    assert src.process([Cti(5), cols, Cti(7)]) == [
        Cti(5), Insert(0, 7, 8, {"v": 1.0}), Insert(3, 6, 8, {"v": 4.0}), Cti(7)]
    reasons = [d.reason for d in src.dead_letters]
    assert "insert starts at 3, behind the CTI 5" in reasons[0]
    assert "end 9 is not after start 9" in reasons[1]
    assert [d.item for d in src.dead_letters] == [(1, 3, 4, {"v": 2.0}), (2, 9, 9, {"v": 3.0})]


# -- wrong types: cedar has no declared schema -----------------------------------------------------
# A payload is whatever the row or message carries; the nearest thing to "a wrong type for a
# declared field" is a user function or UDM that cannot handle the value. That fails the query
# with an error naming the step (and, for a UDM, the UDM and the window), or, for a window
# with on_error="dead_letter", sends the window's input to the dead letters.
def test_a_wrong_field_type_in_a_udm_names_operator_udm_and_window():
    rows = [{"t": 1, "kwh": 1.0}, {"t": 2, "kwh": "1.5 kWh"}, {"t": 7, "kwh": 2.0}]
    q = Stream.from_rows(rows, start="t").tumbling_window(5).aggregate(Sum("kwh"))
    with pytest.raises(OperatorError) as err:
        q.collect(runtime="inline")
    text = str(err.value)
    assert "tumbling.aggregate#1" in text and "Sum" in text and "[0, 5)" in text
    assert "TypeError" in text


def test_a_wrong_field_type_with_dead_letters_keeps_the_query_going():
    rows = [{"t": 1, "kwh": 1.0}, {"t": 2, "kwh": "1.5 kWh"}, {"t": 7, "kwh": 2.0}]
    q = (Stream.from_rows(rows, start="t").tumbling_window(5)
         .aggregate(Sum("kwh"), on_error="dead_letter"))
    out, dag, _ = run_dag(q)
    #   window [0, 5) holds "1.5 kWh": dead letter;   window [5, 10): 2.0
    assert_equivalent(out, [(5, 10, 2.0)])
    dead = records(dag, "dead_letters")
    assert dead and all(d.where == "tumbling.aggregate#1" for d in dead)
    window, members = dead[-1].item
    assert (window.start, window.end) == (0, 5)
    assert sorted(m[2]["t"] for m in members) == [1, 2]


def test_a_wrong_field_type_in_a_predicate_names_the_step():
    rows = [{"t": 1, "kwh": 1.0}, {"t": 2, "kwh": None}]
    q = Stream.from_rows(rows, start="t").where(lambda r: r["kwh"] > 0)
    with pytest.raises(OperatorError, match=r"operator 'where#1' failed on .*TypeError"):
        q.collect(runtime="inline")


# -- an event behind a CTI inside the engine: a bug, fails loudly naming the operator --------------
OPS = {
    "tumbling": lambda: make_window(tumbling_window(5), Count(), name="op-under-test"),
    "hopping": lambda: make_window(hopping_window(6, 2), Count(), name="op-under-test"),
    "snapshot": lambda: make_window(snapshot_window(), Count(), name="op-under-test"),
    "compressed": lambda: make_window(hopping_window(6, 2), Count(), output="compressed",
                                      name="op-under-test"),
    "count": lambda: make_window(count_window(2), Count(), name="op-under-test"),
    "alter_lifetime": lambda: AlterLifetime(duration=3, name="op-under-test"),
    "join": lambda: Join(name="op-under-test"),
    "where": lambda: Where(bool, name="op-under-test"),
    "select": lambda: Select(lambda p: p, name="op-under-test"),
    "shift": lambda: Shift(1, name="op-under-test"),
    "to_points": lambda: ToPoints(name="op-under-test"),
    "clip_duration": lambda: ClipDuration(4, name="op-under-test"),
    "union": lambda: Union(2, name="op-under-test"),
    "anti_join": lambda: AntiJoin(name="op-under-test"),
    "group_apply": lambda: GroupApply(lambda p: p, lambda: Where(bool), name="op-under-test"),
}
CASES = [pytest.param(op, kind, id=f"{op}-{kind}") for op in OPS for kind in ("insert", "retract")]


@pytest.mark.parametrize(("op", "kind"), CASES)
def test_an_event_behind_the_cti_inside_the_engine_fails_naming_the_operator(op, kind):
    proc: Processor = OPS[op]()
    for p in range(proc.n_inputs):
        proc.process([Insert(("a", p), 10, 20, 1), Cti(15)], p)
    late = Retract(("a", 0), 10, 20, 12, 1) if kind == "retract" else Insert("b", 3, 4, 1)
    #   input  a [10 ------- 20)   CTI 15   then   b [3 - 4)  (or a shortened to 12)
    #   the message changes the time axis behind the CTI: a bug upstream
    with pytest.raises(OperatorError) as err:
        proc.process([late], 0)
    assert "'op-under-test'" in str(err.value)
    assert "behind" in str(err.value)


def test_the_error_says_how_to_fix_it():
    proc = Where(bool, name="where#3")
    proc.process([Insert("a", 10, 20, 1), Cti(15)])
    with pytest.raises(OperatorError) as err:
        proc.process([Insert("b", 3, 4, 1)])
    text = str(err.value)
    assert "'where#3'" in text and "behind the input CTI 15" in text
    assert "bug in cedar, or in a user-defined operator" in text


def test_an_event_at_the_cti_is_not_behind_it():
    #   CTI 15   then   b [15 - 16)  and  a shortened to 15: both at the CTI, valid
    proc = Where(bool)
    proc.process([Insert("a", 10, 20, 1), Cti(15)])
    assert proc.process([Insert("b", 15, 16, 1), Retract("a", 10, 20, 15, 1)]) == [
        Insert("b", 15, 16, 1), Retract("a", 10, 20, 15, 1)]


def test_the_input_cti_is_per_port():
    #   input 0   CTI 15          input 1   CTI 5   then   b [7 - 8): behind 15, not behind 5
    u = Union(2, name="op-under-test")
    u.process([Cti(15)], 0)
    u.process([Cti(5)], 1)
    assert u.process([Insert("b", 7, 8, 1)], 1) == [Insert((1, "b"), 7, 8, 1)]
    with pytest.raises(OperatorError, match=r"'op-under-test'.*\(input 0\).*behind"):
        u.process([Insert("c", 7, 8, 1)], 0)


def test_a_column_batch_behind_the_cti_fails_naming_the_operator():
    import numpy as np

    from operators.columns import Columns, expand

    #   CTI 15   then a column batch [20 - 21) [3 - 4): its earliest start is behind the CTI
    cols = Columns(np.arange(2), np.array([20, 3]), np.array([21, 4]), np.array([1, 2]))
    proc = Where(lambda p: p > 0, name="op-under-test")
    proc.process([Cti(15)])
    with pytest.raises(OperatorError, match=r"'op-under-test'.*behind the input CTI 15"):
        proc.process([cols])
    ok = Columns(np.arange(2), np.array([20, 15]), np.array([21, 16]), np.array([1, 2]))
    assert to_cht(expand(proc.process([ok]))) == [(15, 16, 2), (20, 21, 1)]


def test_in_a_chain_the_first_stage_names_itself():
    from operators.chain import Chain

    chain = Chain([Where(bool, name="where#1"), Shift(1, name="shift#2")])
    chain.process([Insert("a", 10, 20, 1), Cti(15)])
    with pytest.raises(OperatorError, match=r"'where#1'.*behind the input CTI 15"):
        chain.process([Insert("b", 3, 4, 1)])


@pytest.mark.parametrize("op", ["where", "union", "join", "tumbling"])
def test_the_input_cti_survives_a_checkpoint(op):
    proc: Processor = OPS[op]()
    for p in range(proc.n_inputs):
        proc.process([Insert(("a", p), 10, 20, 1), Cti(15)], p)
    fresh: Processor = OPS[op]()
    fresh.restore(proc.snapshot())
    with pytest.raises(OperatorError, match="behind the input CTI 15"):
        fresh.process([Insert("b", 3, 4, 1)], 0)


def test_times_at_the_ends_of_the_axis_are_accepted_or_dead_lettered():
    rows = [{"t": MIN_TIME}, {"t": MAX_TIME - 1}, {"t": MAX_TIME}, {"t": MIN_TIME - 1}]
    out, dag, _ = run_dag(Stream.from_rows(rows, start="t"))
    assert sorted(to_cht(out)) == [(MIN_TIME, MIN_TIME + 1, rows[0]),
                                   (MAX_TIME - 1, MAX_TIME, rows[1])]
    assert [d.item for d in records(dag, "dead_letters")] == rows[2:]
    assert_accounted(dag.procs["from_rows#0"].stats)


@pytest.mark.parametrize("output", ["window", "point_end"])
@pytest.mark.parametrize("hop", [1000, 300])
def test_windows_at_the_ends_of_the_axis_are_cut_to_it(hop, output):
    # found by the Arrow fuzz test: a point at MAX_TIME - 807 lies in a window [k·1000,
    # k·1000 + 1000) that ends past MAX_TIME; its output event could not be built
    #   axis     MIN_TIME [.. window cut ..)            (.. window cut ..) MAX_TIME
    #   points      MIN_TIME + 3                          MAX_TIME - 807
    events = [Insert("lo", MIN_TIME + 3, MIN_TIME + 4, 1),
              Insert("hi", MAX_TIME - 807, MAX_TIME - 806, 2), Cti(MAX_TIME)]
    out, _, _ = run_dag(Stream.from_events(events).hopping_window(1000, hop, output=output)
                        .aggregate(Count()))
    rows = to_cht(out)
    assert rows and all(MIN_TIME <= s < e <= MAX_TIME for s, e, _ in rows)
    assert {c for _, _, c in rows} == {1}
    if output == "window":
        assert rows[0][0] == MIN_TIME and rows[-1][1] == MAX_TIME
