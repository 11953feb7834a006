"""The CHT, the equivalence check and the stream validator."""

from __future__ import annotations

import pytest
from hypothesis import given

from operators.cht import (
    InvalidStream,
    NotEquivalent,
    StreamValidator,
    check_equivalent,
    equivalent,
    to_cht,
    validate,
)
from operators.events import MAX_TIME, Cti, Insert, Retract
from tests.kit import PROPERTY, physical_streams


def test_equivalence_ignores_ids_order_and_speculation():
    a = [Insert(1, 0, 5, "x"), Insert(2, 3, 4, "y")]
    b = [Insert("q", 3, 4, "y"), Insert("r", 0, MAX_TIME, "x"), Retract("r", 0, MAX_TIME, 5, "x"),
         Insert("s", 9, 10, "z"), Retract("s", 9, 10, 9, "z")]
    check_equivalent(a, b)


def test_equivalence_is_a_multiset_comparison():
    assert not equivalent([Insert(1, 0, 5, "x")], [Insert(1, 0, 5, "x"), Insert(2, 0, 5, "x")])


def test_difference_is_reported_readably():
    with pytest.raises(NotEquivalent) as err:
        check_equivalent([Insert(1, 0, 5, {"kwh": 1})], [(0, 6, {"kwh": 1})])
    text = str(err.value)
    assert "first difference at [0, 5)" in text
    assert "only in actual:\n    [0, 5) {'kwh': 1}" in text
    assert "only in expected:\n    [0, 6) {'kwh': 1}" in text


def test_float_payloads_compare_to_nine_digits():
    check_equivalent([(0, 1, 0.1 + 0.2)], [(0, 1, 0.3)])
    assert not equivalent([(0, 1, 0.31)], [(0, 1, 0.3)])


@pytest.mark.parametrize("stream, problem", [
    ([Insert(1, 0, 5, None), Cti(3), Insert(2, 2, 5, None)], "behind the CTI 3"),
    ([Insert(1, 0, 5, None), Insert(1, 1, 5, None)], "duplicate id"),
    ([Insert(1, 0, 5, None), Retract(1, 0, 5, 0, None), Insert(1, 1, 5, None)], "duplicate id"),
    ([Retract(1, 0, 5, 3, None)], "unknown id"),
    ([Insert(1, 0, 5, None), Retract(1, 0, 6, 3, None)], "does not match"),
    ([Insert(1, 0, 9, None), Cti(6), Retract(1, 0, 9, 4, None)], "behind the CTI 6"),
    ([Cti(6), Cti(5)], "CTI goes back"),
])
def test_validator_rejects(stream, problem):
    with pytest.raises(InvalidStream, match=problem):
        validate(stream)


def test_validator_names_the_position():
    v = StreamValidator("left input")
    v.check(Cti(4))
    with pytest.raises(InvalidStream, match=r"left input, message #1"):
        v.check(Insert(1, 0, 5, None))


@PROPERTY
@given(physical_streams())
def test_generated_streams_are_valid_and_fully_retracted_ids_vanish(stream):
    validate(stream)
    rows = to_cht(stream)
    deleted = {m.id for m in stream if type(m) is Retract and m.new_end == m.start}
    inserted = {m.id for m in stream if type(m) is Insert}
    assert len(rows) == len(inserted - deleted)
    assert all(s < e for s, e, _ in rows)


def test_a_validator_that_keeps_some_ids_stays_bounded_and_still_refuses_recent_reuse():
    v = StreamValidator("source", keep_ids=100)
    for i in range(10_000):
        v.check(Insert(i, i, i + 1))
        v.check(Cti(i + 1))
    assert len(v.dead) == 100 and len(v.dead_order) == 100
    with pytest.raises(InvalidStream, match="duplicate id 9999"):
        v.check(Insert(9_999, 10_000, 10_001))
    v.check(Insert(5, 10_000, 10_001))  # long gone: not remembered


def test_a_column_batch_counts_as_its_inserts():
    """Column-wise operators send Columns batches; to_cht and the comparisons read them as
    their inserts (before, to_cht skipped them as it skips CTIs: an empty CHT, silently)."""
    import numpy as np

    from operators.columns import Columns

    batch = Columns(np.array(["a", "b"], dtype=object), np.array([1, 5]), np.array([3, 9]),
                    np.array([10, 20]))
    stream = [batch, Retract("b", 5, 9, 7, 20), Cti(9)]
    assert to_cht(stream) == [(1, 3, 10), (5, 7, 20)]
    assert to_cht(stream) == to_cht([Insert("a", 1, 3, 10), Insert("b", 5, 9, 20),
                                     Retract("b", 5, 9, 7, 20)])
    check_equivalent(stream, [(1, 3, 10), (5, 7, 20)])
