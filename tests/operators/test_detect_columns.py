"""``detect`` on ``Columns`` batches: the predicates that ignore the match and trace column-wise
are decided for a whole batch at once; the output must be the per-event path's. Random valid
physical streams (disorder, deletions, lifetime corrections, CTIs) go through one ``Detect`` as
inserts and through another with every run of inserts as column batches; after each step the
two outputs' differences (consolidated: an insert +1, a retraction -1) and their CTIs are
equal, speculative and final, keyed and not, restored mid-stream."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.columns import Columns
from operators.detect import Detect
from operators.detect_columns import bind
from operators.errors import OperatorError
from operators.events import Cti, Insert, Message, Retract
from operators.expr import col
from tests.kit import PROPERTY, physical_streams
from tests.operators.test_detect import detect_cases, patterns


def consolidated(out: list[Message]) -> Counter[tuple[Any, ...]]:
    """The net change a list of output messages makes: per (start, end, payload), inserts
    minus retractions (detect retracts only whole events)."""
    net: Counter[tuple[Any, ...]] = Counter()
    for m in out:
        if type(m) is Insert:
            net[(m.start, m.end, repr(m.payload))] += 1
        elif type(m) is Retract:
            assert m.new_end == m.start, "detect retracts whole events"
            net[(m.start, m.end, repr(m.payload))] -= 1
    return Counter({k: v for k, v in net.items() if v})


def as_columns(msgs: list[Message], payload: Any = None) -> list[Any]:
    """``msgs`` with every run of inserts as one ``Columns`` (int payloads as one column, or
    as the columns ``payload(payloads)`` makes of the run's payloads)."""
    out: list[Any] = []
    run: list[Insert] = []

    def flush() -> None:
        if run:
            values = [m.payload for m in run]
            ids = np.empty(len(run), dtype=object)
            ids[:] = [m.id for m in run]
            cols = Columns(ids, np.array([m.start for m in run], dtype=np.int64),
                           np.array([m.end for m in run], dtype=np.int64),
                           np.array(values, dtype=np.int64) if payload is None
                           else payload(values))
            assert cols.inserts() == run
            out.append(cols)
            run.clear()

    for m in msgs:
        if type(m) is Insert:
            run.append(m)
        else:
            flush()
            out.append(m)
    flush()
    return out


def _steps(stream: list[Message], cuts: list[int]) -> list[list[Message]]:
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in pairwise(bounds)]


def _compare(make: Any, stream: list[Message], cuts: list[int], restore_at: int,
             payload: Any = None) -> list[Message]:
    """Run the steps of ``stream`` through a ``Detect`` as inserts and through another as
    column batches (checkpointed and restored after step ``restore_at``); the differences
    and CTIs after each step are equal. Returns the column path's output."""
    rows, cols = make(), make()
    out_rows: list[Message] = []
    out_cols: list[Message] = []
    for i, step in enumerate(_steps(stream, cuts)):
        if i == restore_at:
            state = cols.snapshot()
            cols = make()
            cols.restore(state)
        a = rows.process(step)
        b = cols.process(as_columns(step, payload))
        cols._check()
        assert consolidated(a) == consolidated(b), f"step {i}: {step}"
        assert [m for m in a if type(m) is Cti] == [m for m in b if type(m) is Cti]
        out_rows += a
        out_cols += b
    out_rows += rows.finish()
    out_cols += cols.finish()
    validate(out_cols)
    assert to_cht(out_cols) == to_cht(out_rows)
    assert [m for m in out_rows if type(m) is Cti] == [m for m in out_cols if type(m) is Cti]
    return out_cols


STREAMS = st.one_of(physical_streams(max_steps=40), physical_streams(span=6, max_length=6))


@PROPERTY
@given(stream=STREAMS, case=detect_cases(), emit=st.sampled_from(["speculative", "final"]),
       cuts=st.lists(st.integers(0, 60), max_size=6), restore_at=st.integers(0, 6))
def test_column_batches_give_the_per_event_output(stream, case, emit, cuts, restore_at):
    pattern, define, within, key, tie = case
    out = _compare(lambda: Detect(pattern, define, within=within, key=key, tie=tie, emit=emit),
                   stream, cuts, restore_at)
    if emit == "final":
        assert not any(type(m) is Retract for m in out)


@PROPERTY
@given(stream=STREAMS, cuts=st.lists(st.integers(0, 60), max_size=6),
       restore_at=st.integers(0, 6), keyed=st.booleans())
def test_column_expressions_and_payload_functions_mixed_with_match_readers(
        stream, cuts, restore_at, keyed):
    #   dict payloads {"v", "w"}: A a column expression, B a function of the payload, C
    #   reads the match (per row)
    define = {"A": col("v") < 3,
              "B": lambda p, m: (p["v"] + p["w"]) % 3 != 0,
              "C": lambda p, m: p["v"] >= min(m["B"], default=0)}

    def make() -> Detect:
        return Detect("A B+ C?", define, within=8,
                      key=(lambda p: p["v"] % 2) if keyed else None)

    def payload(values: list[Any]) -> dict[str, np.ndarray]:
        return {f: np.array([p[f] for p in values], dtype=np.int64) for f in ("v", "w")}

    widened = [m._replace(payload={"v": m.payload, "w": m.payload * 2})
               if type(m) in (Insert, Retract) else m for m in stream]
    _compare(make, widened, cuts, restore_at, payload)


@st.composite
def in_order_streams(draw):
    """Mostly point events in start order (a source in time order) with CTIs behind them,
    now and then a late insert or a deletion (which move detect out of the column mode)."""
    t, cti, n = 0, 0, 0
    live: dict[str, Insert] = {}
    out: list[Message] = []
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(["row"] * 12 + ["cti"] * 3 + ["late", "delete"]))
        if kind == "row":
            t += draw(st.integers(0, 2))
            m = Insert(f"e{n}", t, t + 1, draw(st.integers(0, 5)))
        elif kind == "late":
            s0 = draw(st.integers(cti, t))
            m = Insert(f"e{n}", s0, s0 + 1, draw(st.integers(0, 5)))
        elif kind == "delete":
            gone = sorted(i for i, e in live.items() if e.start >= cti)
            if not gone:
                continue
            e = live.pop(draw(st.sampled_from(gone)))
            out.append(Retract(e.id, e.start, e.end, e.start, e.payload))
            continue
        else:
            cti = max(cti, t - draw(st.integers(0, 4)))
            out.append(Cti(cti))
            continue
        n += 1
        live[m.id] = m
        out.append(m)
    out.append(Cti(t + 1))
    return out


@PROPERTY
@given(stream=in_order_streams(), pattern=patterns(3),
       kinds=st.lists(st.sampled_from(["any", "even", "big", "small"]), min_size=3,
                      max_size=3),
       within=st.integers(1, 12), keyed=st.booleans(),
       emit=st.sampled_from(["speculative", "final"]),
       cuts=st.lists(st.integers(0, 60), max_size=6), restore_at=st.integers(0, 6))
def test_the_column_mode_gives_the_per_event_output(stream, pattern, kinds, within, keyed,
                                                     emit, cuts, restore_at):
    #   every predicate of the payload only (the column mode's automaton), in order input
    tests = {"even": lambda p, m: p % 2 == 0, "big": lambda p, m: p >= 3,
             "small": lambda p, m: p <= 2}
    define = {s: tests[k] for s, k in zip("ABC", kinds) if k != "any" and s in pattern}
    key = (lambda p: p % 2) if keyed else None
    _compare(lambda: Detect(pattern, define, within=within, key=key, emit=emit), stream, cuts,
             restore_at)


def test_which_predicates_run_column_wise():
    op = Detect("A B C D E", {
        "A": lambda p, m: p["v"] < 10,                  # a column expression of the payload
        "B": col("v") > 3,                              # given as one
        "C": lambda p, m: p["v"] > m["A"][-1]["v"],     # reads the match: per row
        "D": lambda p, m: p["v"] > 1 and p["v"] < 5,    # and: per row
    }, within=10)
    assert [e is not None for e in op.columnwise()] == [True, True, False, False, False]
    bits = op.decided(Columns(np.arange(3), np.arange(3), None, {"v": np.array([2, 5, 12])}))
    assert bits == [0b0111, 0b1111, 0b1101]             # A: 2, 5 yes; B: 5, 12 yes


def test_a_batch_whose_values_do_not_run_column_wise_runs_per_row_and_raises_the_same():
    #   10 // v: v == 0 raises per row; the batch is decided per row, and fails as the rows do
    define = {"A": lambda p, m: 10 // p["v"] > 1}
    for msgs in ([Insert(0, 1, 2, {"v": 3}), Insert(1, 2, 3, {"v": 0})],
                 as_columns([Insert(0, 1, 2, {"v": 3}), Insert(1, 2, 3, {"v": 0})],
                            lambda ps: {"v": np.array([p["v"] for p in ps])})):
        with pytest.raises(OperatorError, match=r"define\['A'\].*ZeroDivisionError|"
                                                r"define\['A'\].*division"):
            Detect("A", define, within=5).process(msgs)


def test_a_long_run_that_never_completes_is_read_once_per_batch():
    #   'A B+ C' within 1000, a b b b ... (no c), in batches of 100 (column mode) and as
    #   inserts: the attempt from a is the one open attempt; inserts find it by a look at the
    #   attempts that read past their row (no walk back over within)
    define = {"A": col("v") == 0, "B": col("v") == 1, "C": col("v") == 2}
    op = Detect("A B+ C", define, within=1000)
    n = 500
    v = np.ones(n, dtype=np.int64)
    v[0] = 0
    for a in range(0, n, 100):
        op.process([Columns(np.arange(a, a + 100), np.arange(a, a + 100), None,
                            {"v": v[a:a + 100]})])
    op._check()
    assert op.state_size() == n and op.cols.keys[None].open == [0]
    rows = Detect("A B+ C", define, within=1000)
    rows.process([Insert(t, t, t + 1, {"v": int(v[t])}) for t in range(n)])
    assert rows.state_size() == n and len(rows.keys[None][2]) == 1


@PROPERTY
@given(pattern=patterns(3), masks=st.lists(st.integers(0, 7), min_size=1, max_size=14),
       within=st.integers(1, 16))
def test_the_automaton_reads_and_matches_as_the_backtracking_program(pattern, masks, within):
    #   rows whose payload is their symbol mask, row t at time t: every attempt's record (its
    #   match, the last row it read, whether it wanted more) and the symbols of its match are
    #   the program's
    define = {s: (lambda p, m, bit=i: p >> bit & 1 == 1) for i, s in enumerate("ABC")
              if s in pattern}
    op = Detect(pattern, define, within=within)
    auto = op.automaton()
    if auto is None:
        assert op.program.registers > 0
        return
    names = list(op.index)
    codes = [sum((mask >> "ABC".index(s) & 1 or s not in define) << i
                 for i, s in enumerate(names)) for mask in masks]
    rows = [(t, "", t, t, mask, 0) for t, mask in enumerate(masks)]
    for i in range(len(rows)):
        rec = op._attempt(rows, i)
        end, reach, wants = auto.run(codes, i, min(len(rows), i + within))
        assert (None if rec[0] is None else rec[0][0], rec[1][0], rec[2]) == (end, reach, wants)
        if end is not None:
            syms = bind(op.program, codes, i, end)
            bound = {s: tuple(masks[i + x] for x, k in enumerate(syms) if names[k] == s)
                     for s in names}
            assert rec[3][2] == bound


def test_a_late_row_moves_only_its_key_into_rows_until_its_rows_are_freed():
    #   keys 0 and 1 ('A B' any rows, within 5), in order: both in the column mode
    #   a late row of key 0: key 0 in rows, key 1 stays; once Cti(20) frees key 0's rows,
    #   its next batch is in the column mode again
    def batch(ts, ks):
        return Columns(np.array(ts), np.array(ts), None, {"k": np.array(ks)})

    op = Detect("A B", within=5, key=lambda p: p["k"])
    op.process([batch([1, 2, 3], [0, 1, 0])])
    assert set(op.cols.keys) == {0, 1} and not op.keys
    op.process([Insert(9, 2, 3, {"k": 0})])          # late for key 0 (its last row is at 3)
    assert set(op.cols.keys) == {1} and set(op.keys) == {0}
    op.process([batch([4, 5], [0, 1])])               # key 0's rows go in as rows
    assert set(op.cols.keys) == {1} and set(op.keys) == {0}
    op._check()
    op.process([Cti(20), batch([21, 22], [0, 0])])
    assert set(op.cols.keys) == {0} and not op.keys
    op._check()
