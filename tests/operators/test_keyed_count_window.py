"""The keyed by-end count window (the planner's fast path for ``group_apply(key,
count_window(1, by="end") → aggregate)``: Nexmark's winning bid at an auction's close) against
the general ``GroupApply`` of a ``CountWindowOperator``.

Random valid physical streams (disorder, interval, point and edge events, lifetime corrections
that move an end, reopen it to ∞ or close an edge, full retractions, CTIs) in random batch sizes,
with a snapshot/restore half-way: the fast operator's output must be a valid stream with the
general path's CHT, and the planner must choose it.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Aggregates, Count, Max, Min, Sum
from operators.cht import validate
from operators.columns import Columns, expand
from operators.events import Cti, Insert, Retract
from operators.group_apply import GroupApply
from operators.windows import CountWindow, WindowPolicy
from operators.windows.count import CountWindowOperator
from operators.windows.keyed_count import KeyedEndAggregate, supports
from operators.windows.spec import DEFAULT_POLICY
from tests.kit import PROPERTY, assert_equivalent, physical_streams, run_operator
from tests.operators.test_count_window import Multiset
from topology import Stream


def _key(p):
    return p[0]


def _text_key(p):
    return "k" if p[0] == 0 else p[0]  # keys of two types: never compared with each other


def _value(p):
    return p[1]


UDMS = {"multiset": Multiset, "max": lambda: Max(_value), "count": Count,
        "several": lambda: Aggregates(n=Count(), total=Sum(_value), top=Max(_value))}
KEYS = {"int": _key, "mixed": _text_key}

PAYLOADS = st.tuples(st.integers(0, 2), st.integers(0, 9))


def run_fast(factory, stream, sizes, restore):
    """``stream`` through ``factory()`` in batches of ``sizes`` (cycled), restored from its
    snapshot after batch ``restore``, checked after each, then ``finish()``; validated."""
    op, out, i, b = factory(), [], 0, 0
    while i < len(stream):
        if b == restore:
            state = op.snapshot()
            op = factory()
            op.restore(state)
        size = sizes[b % len(sizes)]
        out += op.process(stream[i:i + size])
        op._check()
        i, b = i + size, b + 1
    out += op.finish()
    validate(out, name="output of the keyed by-end count window")
    return out


@PROPERTY
@given(stream=physical_streams(payloads=PAYLOADS, max_steps=40), udm=st.sampled_from(sorted(UDMS)),
       key=st.sampled_from(sorted(KEYS)), seed=st.integers(0, 3),
       sizes=st.lists(st.integers(1, 8), min_size=1, max_size=4), restore=st.integers(0, 20),
       emit=st.sampled_from(["speculative", "final"]))
def test_fast_path_equals_group_apply_of_count_windows(stream, udm, key, seed, sizes, restore,
                                                       emit):
    make, get = UDMS[udm], KEYS[key]
    policy = WindowPolicy(emit=emit)
    fast = run_fast(lambda: KeyedEndAggregate(get, make(), policy=policy, name="ends"), stream,
                    sizes, restore)
    if emit == "final":  # never retracted
        assert all(type(m) is not Retract for m in fast)
    general = run_operator(
        lambda: GroupApply(get, lambda: CountWindowOperator(CountWindow(1, "end"), make())),
        stream, seed=seed)
    assert_equivalent(fast, general)
    ctis = [m.time for m in fast if type(m) is Cti]
    assert ctis == sorted(ctis)


def test_a_lifetime_correction_moves_an_event_between_windows():
    op = KeyedEndAggregate(_key, Max(_value), name="ends")
    first = op.process([Insert("a", 0, 5, (1, 7)), Insert("b", 1, 5, (1, 3))])
    assert [(m.start, m.payload) for m in first] == [(5, (1, 7))]
    out = op.process([Retract("a", 0, 5, 9, (1, 7))])  # "a" now ends at 9: 5 keeps only "b"
    assert out == [Retract(first[0].id, 5, 6, 5, (1, 7)), Insert(out[1].id, 5, 6, (1, 3)),
                   Insert(out[2].id, 9, 10, (1, 7))]
    assert op.process([Cti(6)]) == [Cti(6)]
    assert op.state_size() == 2  # the window at 5 is final and freed; "a" at 9 is held


def test_a_retraction_of_an_event_not_held_is_refused():
    op = KeyedEndAggregate(_key, Max(_value), name="ends")
    op.process([Insert("a", 0, 5, (1, 7))])
    with pytest.raises(Exception, match="does not match an event held"):
        op.process([Retract("a", 1, 5, 3, (1, 7))])
    with pytest.raises(Exception, match="duplicate id"):
        op.process([Insert("a", 2, 5, (1, 7))])


def test_only_what_it_computes_is_supported():
    p = DEFAULT_POLICY
    assert supports(CountWindow(1, "end"), Max(_value), "aggregate", p, "raise")
    assert not supports(CountWindow(2, "end"), Max(_value), "aggregate", p, "raise")
    assert not supports(CountWindow(1, "start"), Max(_value), "aggregate", p, "raise")
    assert not supports(CountWindow(1, "end"), Max(_value), "aggregate", p, "dead_letter")
    assert not supports(CountWindow(1, "end"), sorted, "aggregate", p, "raise")  # not incremental
    with pytest.raises(TypeError, match="incremental"):
        KeyedEndAggregate(_key, sorted)


def test_the_planner_runs_group_apply_of_a_by_end_count_window_keyed():
    rows = [{"t": t, "close": t + 3 + t % 4, "k": t % 3, "v": (t * 7) % 11} for t in range(60)]
    src = Stream.from_rows(rows, start="t", end="close", shape="interval")
    q = src.group_apply("k", lambda g: g.count_window(1, by="end").aggregate(Max("v")))
    ops = [s.factory() for s in q.plan().stages.values() if s.role == "operator"]
    assert any(isinstance(op, KeyedEndAggregate) for op in ops)
    # the same query the general way (n=2 is not the fast path; a window of one end by
    # hand): per key, the maximum of the events ending at each time, at that time
    expected = {}
    for r in rows:
        at = (r["close"], r["close"] + 1, r["k"])
        expected[at] = max(expected.get(at, r["v"]), r["v"])
    assert_equivalent(q.collect(runtime="inline"),
                      [(s, e, (k, v)) for (s, e, k), v in expected.items()])


@PROPERTY
@given(stream=physical_streams(payloads=PAYLOADS, max_steps=40, retractions=False),
       udm=st.sampled_from(sorted(UDMS)), key=st.sampled_from(sorted(KEYS)),
       split=st.integers(1, 6))
def test_column_batches_give_the_per_event_cht(stream, udm, key, split):
    """Inserts as ``Columns`` batches (an integer key runs on the columns; the mixed one
    event by event), CTIs between them."""
    batches, run = [], []
    for m in stream + [None]:
        if type(m) is Insert and len(run) < split:
            run.append(m)
            continue
        if run:
            batches.append(Columns(np.array([r.id for r in run], dtype=object),
                                   np.array([r.start for r in run]),
                                   np.array([r.end for r in run]),
                                   (np.array([r.payload[0] for r in run]),
                                    np.array([r.payload[1] for r in run]))))
            run = []
        if type(m) is Insert:
            run.append(m)
        elif m is not None:
            batches.append(m)
    make, get = UDMS[udm], KEYS[key]
    op = KeyedEndAggregate(get, make(), name="ends")
    fast = []
    for b in batches:
        fast += op.process([b])
        op._check()
    general = run_operator(
        lambda: GroupApply(get, lambda: CountWindowOperator(CountWindow(1, "end"), make())),
        stream, seed=0)
    assert_equivalent(fast, general)


# -- the column-wise path (emit="final", Min or Max) -------------------------------------------
#: payloads ``(key, small int, float, text)``: ties on the int, ``0.0`` beside ``-0.0``, NaN
ROWS = st.tuples(st.integers(0, 2), st.integers(0, 2),
                 st.sampled_from([0.0, -0.0, 1.5, -2.0, float("nan")]),
                 st.sampled_from(["x", "y", "z"]))


def _number(p):
    return p[1]


def _float(p):
    return p[2]  # NaN ranks above every number in Max, below in Min


def _ordered(p):
    return (p[1], -p[1], p[3])  # a prefix of two int columns, then text


def _zeros(p):
    return (p[1], p[2] * 0, p[3])  # 0.0 beside -0.0 (NaN * 0 is NaN: the prefix stops)


def _text_first(p):
    return (p[3], p[1])  # no prefix: every window runs the UDM


def _flag(p):
    return (p[1] > 0, p[3])  # a bool column


FIELDS = {"number": _number, "float": _float, "ordered": _ordered, "zeros": _zeros,
          "text_first": _text_first, "flag": _flag}


def _tuple_columns(run, int_ids):
    ids = [int(r.id[1:]) if int_ids else r.id for r in run]
    return Columns(np.array(ids, dtype=np.int64 if int_ids else object),
                   np.array([r.start for r in run]), np.array([r.end for r in run]),
                   (np.array([r.payload[0] for r in run]), np.array([r.payload[1] for r in run]),
                    np.array([r.payload[2] for r in run], dtype=float),
                    np.array([r.payload[3] for r in run], dtype=object)))


def _with_int_ids(stream):
    return [m._replace(id=int(m.id[1:])) if type(m) is Insert else m for m in stream]


@PROPERTY
@given(stream=physical_streams(payloads=ROWS, max_steps=40, retractions=False),
       udm=st.sampled_from(["max", "min"]), field=st.sampled_from(sorted(FIELDS)),
       split=st.integers(1, 8), int_ids=st.booleans(), alone=st.integers(-1, 12),
       restore=st.integers(-1, 12))
def test_final_min_max_on_column_batches_equal_the_general_path(stream, udm, field, split,
                                                                int_ids, alone, restore):
    """Column batches of inserts (CTIs between them) through the column-wise path of
    ``emit="final"`` Max and Min: the general path's CHT. Batch ``alone`` comes as single
    inserts instead (the held rows go per event), batch ``restore`` after a
    snapshot/restore."""
    batches, run = [], []
    for m in stream + [None]:
        if type(m) is Insert and len(run) < split:
            run.append(m)
            continue
        if run:
            batches.append([_tuple_columns(run, int_ids)] if len(batches) != alone
                           else _with_int_ids(run) if int_ids else run)
            run = []
        if type(m) is Insert:
            run.append(m)
        elif m is not None:
            batches.append([m])
    agg = Max if udm == "max" else Min
    get = FIELDS[field]

    def make():
        return KeyedEndAggregate(_key, agg(get), policy=WindowPolicy(emit="final"), name="ends")

    op, fast = make(), []
    for i, b in enumerate(batches):
        if i == restore:
            state = op.snapshot()
            op = make()
            op.restore(state)
        fast += expand(op.process(b))
        op._check()
    fast += op.finish()
    validate(fast, name="output of the keyed by-end count window")
    if alone < 0 or alone >= len(batches):
        assert op.columns is not None  # the rows stayed columns throughout
    general = run_operator(
        lambda: GroupApply(_key, lambda: CountWindowOperator(CountWindow(1, "end"), agg(get))),
        _with_int_ids(stream) if int_ids else stream, seed=0)
    assert_equivalent(fast, general)


def test_a_duplicate_id_in_a_window_is_refused_on_the_column_path():
    op = KeyedEndAggregate(_key, Max(_value), policy=WindowPolicy(emit="final"), name="ends")
    cols = Columns(np.array([4, 4]), np.array([0, 1]), np.array([5, 5]),
                   (np.array([1, 1]), np.array([3, 8])))
    assert op.process([cols]) == [] and op.columns is not None
    with pytest.raises(Exception, match="duplicate id 4"):
        op.process([Cti(6)])


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_nan_keys_stay_one_group_across_a_checkpoint(emit):
    # a pickled snapshot holds other NaN objects than the ones it was saved with (issue #41):
    #   a [0 ---------- 5)        (checkpoint)
    #   b    [1 ------- 5)        one window (nan, 5) of 2, never two of 1
    #   a [0 ---- 3)              a retraction finds "a" after the restore
    def make():
        return KeyedEndAggregate(_key, Count(), policy=WindowPolicy(emit=emit), name="ends")

    before = make()
    out = before.process([Insert("a", 0, 5, (float("nan"), 1))])
    after = make()
    after.restore(pickle.loads(pickle.dumps(before.snapshot())))
    out += after.process([Insert("b", 1, 5, (float("nan"), 2)), Cti(3)])
    after._check()
    out += after.process([Retract("a", 0, 5, 3, (float("nan"), 1)), Cti(10)])
    out += after.finish()
    validate(out)
    assert_equivalent(out, [(3, 4, (float("nan"), 1)), (5, 6, (float("nan"), 1))])
