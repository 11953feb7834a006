"""The column mode's flat state: an attempt is a column of parallel lists on its key (no
object of its own), emptied keys are used again, payload columns are read through
``array.array`` where ``tolist()`` would give the same values; none of it shows in the output,
and a snapshot taken mid-stream still restores to the same output."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from operators.cht import to_cht
from operators.columns import Columns
from operators.detect import Detect
from operators.detect_columns import _values
from operators.events import Cti, Message


def batch(rows: list[tuple[int, int, int]]) -> Columns:
    """Point events ``(start, key, v)``."""
    t = np.array([r[0] for r in rows], dtype=np.int64)
    return Columns(np.array([f"e{s}" for s in t.tolist()], dtype=object), t, None,
                   {"k": np.array([r[1] for r in rows]), "v": np.array([r[2] for r in rows])})


def detect(emit: str = "speculative") -> Detect:
    return Detect("A B+ C", {"A": lambda p, m: p["v"] == 0, "B": lambda p, m: p["v"] == 1,
                             "C": lambda p, m: p["v"] == 2},
                  within=10, key=lambda p: p["k"], emit=emit)


#   key 0:  a@1 b@2 b@3 | c@5 a@6 b@7 | a@22 b@23 c@24
#   key 1:  a@4         | b@8         | a@21
#   CTI 20 frees both keys (every attempt final: within 10 passed); they come back from the
#   spare keys
FEED: list[list[Any]] = [
    [batch([(1, 0, 0), (2, 0, 1), (3, 0, 1), (4, 1, 0)]), Cti(5)],
    [batch([(5, 0, 2), (6, 0, 0), (7, 0, 1), (8, 1, 1)]), Cti(20)],
    [batch([(21, 1, 0), (22, 0, 0), (23, 0, 1), (24, 0, 2)]), Cti(40)],
]


def run(op: Detect, feed: list[list[Any]]) -> list[Message]:
    out: list[Message] = []
    for msgs in feed:
        out += op.process(msgs)
        op._check()
        for ck in op.cols.keys.values():  # one record per attempt across the lists
            assert len({len(ck.firsts), len(ck.ends), len(ck.reach), len(ck.wants),
                        len(ck.results), len(ck.oids)}) == 1
            assert ck.firsts == sorted(ck.firsts) and ck.open == sorted(ck.open)
    return out


@pytest.mark.parametrize("emit", ["speculative", "final"])
def test_flat_records_give_the_per_event_output_and_restore_mid_stream(emit: str) -> None:
    cols = run(detect(emit), FEED)
    rows = detect(emit)
    rows_out: list[Message] = []
    for msgs in FEED:
        rows_out += rows.process(msgs[0].inserts() + msgs[1:])
    assert to_cht(cols) == to_cht(rows_out) and len(to_cht(cols)) == 2
    assert [m for m in cols if type(m) is Cti] == [m for m in rows_out if type(m) is Cti]
    for at in range(1, len(FEED)):
        op = detect(emit)
        head = run(op, FEED[:at])
        again = detect(emit)
        again.restore(pickle.loads(pickle.dumps(op.snapshot())))
        assert not again.cols.spare and not again.cols.readers  # (not part of a snapshot)
        assert to_cht(head + run(again, FEED[at:])) == to_cht(cols)


def test_an_emptied_key_is_used_again() -> None:
    op = detect()
    run(op, FEED[:2])
    spare = list(op.cols.spare)
    assert not op.cols.keys and len(spare) == 2  # every row final at CTI 20: both freed
    op.process([FEED[2][0]])
    assert set(op.cols.keys) == {0, 1} and not op.cols.spare
    assert {id(ck) for ck in op.cols.keys.values()} == {id(ck) for ck in spare}


@pytest.mark.parametrize("column", [
    np.array([1, -2, 2**62], dtype=np.int64), np.array([1, 2], dtype=np.int8),
    np.array([3, 2**31], dtype=np.uint32), np.array([2**64 - 1], dtype=np.uint64),
    np.array([0.5, np.nan, -0.0]), np.array([0.5], dtype=np.float32),
    np.array([True, False]), np.array(["a", None], dtype=object),
    np.array([1, 2], dtype=">i8")])
def test_payload_values_are_what_tolist_gives(column: np.ndarray) -> None:
    values = _values(column)
    got, want = [values[i] for i in range(len(column))], column.tolist()
    assert [(type(v), repr(v)) for v in got] == [(type(v), repr(v)) for v in want]
