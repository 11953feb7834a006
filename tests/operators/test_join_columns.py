"""The temporal join's column-wise path gives the per-event path's CHT: random two-input
streams whose inserts arrive as ``Columns`` batches (split at random), with and without
retractions (the first one hands the arrays over to the per-event state mid-stream), edge
events, CTIs, a checkpoint and restore midway, traced and untraced ``select`` and keys."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.columns import Columns, expand
from operators.events import Cti, Insert
from operators.join import Join
from tests import reference_joins as ref
from tests.kit import PROPERTY, assert_equivalent, physical_streams
from tests.reference_joins import final_cti

KV = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 3)})


def _mod2(p):
    return p["k"] % 2


def _traced(a, b):
    return (a["v"], b["v"] * 10, a["k"])


def _untraced(a, b):
    return a["v"] if a["v"] > b["v"] else -b["v"]


def _keep_left(a, b):
    return a


def _keep_right(a, b):
    return b


CASES = {
    "keyed": (("k", "k"), None),
    "keep_left": (("k", "k"), _keep_left),
    "keep_right": (("k", "k"), _keep_right),
    "keyed_traced_select": (("k", "k"), _traced),
    "keyed_untraced_select": (("k", "k"), _untraced),
    "key_functions": ((_mod2, _mod2), _traced),
    "cross": (None, _traced),
}


def _columns(inserts: list[Insert], float_keys: bool) -> Columns:
    ids = np.array([m.id for m in inserts], dtype=object)
    k = np.array([m.payload["k"] for m in inserts], dtype=float if float_keys else np.int64)
    v = np.array([m.payload["v"] for m in inserts], dtype=np.int64)
    return Columns(ids, np.array([m.start for m in inserts]), np.array([m.end for m in inserts]),
                   {"k": k, "v": v})


def batches(pairs, rng: random.Random, float_right: bool):
    """``(port, batch)``: runs of inserts on one port as Columns (cut at random), the rest
    one message a batch."""
    out, run, run_port = [], [], None

    def flush():
        if run:
            out.append((run_port, [_columns(run, float_right and run_port == 1)]))
            run.clear()

    for port, msg in pairs:
        if type(msg) is Insert and (port == run_port or not run) and rng.random() < 0.85:
            run_port = port
            run.append(msg)
            continue
        flush()
        if type(msg) is Insert:
            run_port = port
            run.append(msg)
        else:
            out.append((port, [msg]))
    flush()
    return out


@st.composite
def streams(draw, retractions: bool):
    left = draw(physical_streams(payloads=KV, max_steps=25, id_prefix="l",
                                 retractions=retractions))
    right = draw(physical_streams(payloads=KV, max_steps=25, id_prefix="r",
                                  retractions=retractions))
    order = draw(st.permutations([0] * len(left) + [1] * len(right)))
    it = (iter(left), iter(right))
    return [(p, next(it[p])) for p in order], left, right


def run(on, select, feed, restore_at):
    op = Join(on=on, select=select)
    out = []
    for n, (port, batch) in enumerate(feed):
        if n == restore_at:
            state = op.snapshot()
            op = Join(on=on, select=select)
            op.restore(state)
        out.extend(expand(op.process(batch, port)))
        op._check()
    return out, op


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("retractions", [False, True])
@PROPERTY
@given(data=st.data())
def test_column_batches_give_the_per_event_cht(case, retractions, data):
    on, select = CASES[case]
    pairs, left, right = data.draw(streams(retractions))
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    float_right = data.draw(st.booleans(), label="float_right")  # 1 and 1.0: one key
    feed = batches(pairs, rng, float_right)
    restore_at = data.draw(st.integers(0, len(feed)), label="restore_at")
    out, op = run(on, select, feed, restore_at)
    assert_equivalent(out, ref.join(to_cht(left), to_cht(right), on=on, select=select))
    assert final_cti(out) == min(final_cti(left), final_cti(right))
    if not retractions:  # nothing made it leave the arrays
        assert op.columns is not None


def test_a_retraction_hands_the_arrays_over_to_the_per_event_state():
    #   left   a: [0 ──────── 10) k=1         right  b: [4 ──────────── 20) k=1
    #   output     [4 ─── 10)   then a is cut to [0, 6): the pair shrinks to [4, 6)
    op = Join(on=("k", "k"), select=_traced)
    left = Columns(np.array(["a"], dtype=object), np.array([0]), np.array([10]),
                   {"k": np.array([1]), "v": np.array([2])})
    right = Columns(np.array(["b"], dtype=object), np.array([4]), np.array([20]),
                    {"k": np.array([1]), "v": np.array([3])})
    assert op.process([left], 0) == []
    (pairs,) = op.process([right], 1)
    assert type(pairs) is Columns and pairs.inserts() == [Insert(0, 4, 10, (2, 30, 1))]
    assert op.columns is not None and op.state_size() == 3
    from operators.events import Retract

    out = op.process([Retract("a", 0, 10, 6, {"k": 1, "v": 2}), Cti(6)], 0)
    assert op.columns is None
    assert out == [Retract(0, 4, 10, 6, (2, 30, 1))]
    op._check()


def test_keys_that_do_not_code_exactly_go_event_by_event():
    op = Join(on=("k", "k"))
    nan = Columns(np.array([0, 1]), np.array([0, 1]), np.array([5, 6]),
                  {"k": np.array([np.nan, 1.0])})
    assert op.process([nan], 0) == [] and op.columns is None
    op._check()


@given(st.lists(st.lists(st.one_of(st.integers(-2**63, 2**64 - 1), st.booleans(),
                                   st.floats(allow_nan=False), st.sampled_from([1, 1.0, -0.0])),
                         min_size=1, max_size=8), min_size=1, max_size=4))
def test_key_codes_follow_python_equality(batches):
    from operators.two_input_columns import KeyCodes

    kc, seen = KeyCodes(), {}
    for values in batches:
        try:
            column = np.array(values)
        except OverflowError:
            continue
        if column.dtype.kind not in "iubf":
            continue
        codes = kc.encode(column)
        assert codes is not None
        for value, code in zip(column.tolist(), codes.tolist()):
            assert seen.setdefault(value, code) == code  # a dict's notion of one key
    assert len(set(seen.values())) == len(seen)


def test_a_failing_select_fails_as_on_the_per_event_path():
    # the same error as a join that goes event by event (it left the arrays) gives
    from operators.errors import OperatorError
    from operators.events import Retract

    def boom(a, b):
        return 1 // (a["v"] - b["v"])

    left = Columns(np.array(["a", "b"], dtype=object), np.array([0, 1]), np.array([9, 9]),
                   {"k": np.array([1, 1]), "v": np.array([2, 3])})
    right = Columns(np.array(["c"], dtype=object), np.array([2]), np.array([5]),
                    {"k": np.array([1]), "v": np.array([3])})
    errors = []
    for per_event in (False, True):
        op = Join(on=("k", "k"), select=boom, name="j")
        op.process([right], 1)
        if per_event:  # a retraction hands the arrays over; the event comes back the same
            op.process([Retract("c", 2, 5, 2, {"k": 1, "v": 3}),
                        Insert("c", 2, 5, {"k": 1, "v": 3})], 1)
            assert op.columns is None
        with pytest.raises(OperatorError, match="ZeroDivisionError") as failed:
            op.process([left], 0)
        errors.append(str(failed.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("form", ["dict", "tuple"])
def test_a_select_of_one_side_keeps_its_columns(form):
    """``select=lambda l, r: l`` (Nexmark's ``keep_left``) outputs the side's own payload
    columns, not one select call per pair into an object column."""
    op = Join(on=((lambda p: p[0]) if form == "tuple" else "k", "k"), select=_keep_left)
    k, v = np.array([1, 2, 1]), np.array([10, 20, 30])
    left = {"k": k, "v": v} if form == "dict" else (k, v)
    assert op.process([Columns(np.arange(3), np.array([0, 1, 2]), np.array([9, 9, 9]), left)],
                      0) == []
    out = op.process([Columns(np.array([7]), np.array([5]), np.array([6]),
                              {"k": np.array([1]), "v": np.array([0])})], 1)
    assert len(out) == 1 and type(out[0]) is Columns
    payload = out[0].payload
    assert type(payload) is type(left)
    rows = out[0].payloads()
    assert rows == ([{"k": 1, "v": 10}, {"k": 1, "v": 30}] if form == "dict"
                    else [(1, 10), (1, 30)])
