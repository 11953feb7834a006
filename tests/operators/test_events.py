"""Message value objects: invariants at construction, value equality, pickling."""

from __future__ import annotations

import pickle
from datetime import datetime

import pytest

from operators.events import (
    MAX_TIME,
    MIN_TIME,
    Cti,
    FreshId,
    Insert,
    Retract,
    add_time,
    edge_end,
    edge_start,
    fmt_time,
    interval,
    point,
)


def test_value_equality_and_hashing():
    assert Insert("a", 1, 2, {"x": 1}) == Insert("a", 1, 2, {"x": 1})
    assert hash(Cti(3)) == hash(Cti(3))
    assert Insert("a", 1, 2, None) != Retract("a", 1, 2, 1, None)


def test_fields_have_spec_names():
    r = Retract("a", 1, 9, 4, "p")
    assert (r.id, r.start, r.end, r.new_end, r.payload) == ("a", 1, 9, 4, "p")
    assert Cti(5).time == 5


@pytest.mark.parametrize("end", [5, 4])
def test_empty_lifetime_is_a_clear_value_error(end):
    with pytest.raises(ValueError, match="not after start"):
        Insert("a", 5, end, None)


def test_bad_times():
    with pytest.raises(TypeError, match="int number of ticks"):
        Insert("a", datetime(2020, 1, 1), 5, None)
    with pytest.raises(TypeError):
        Insert("a", True, 5, None)
    with pytest.raises(ValueError, match="outside"):
        Insert("a", 0, MAX_TIME + 1, None)
    with pytest.raises(ValueError, match="before start"):
        Retract("a", 5, 9, 4, None)
    with pytest.raises(ValueError, match="must change"):
        Retract("a", 5, 9, 9, None)


def test_shapes():
    assert point("p", 7) == Insert("p", 7, 8, None)
    assert interval("i", 1, 4, "x") == Insert("i", 1, 4, "x")
    assert edge_start("e", 2) == Insert("e", 2, MAX_TIME, None)
    assert edge_end("e", 2, 6) == Retract("e", 2, MAX_TIME, 6, None)
    assert edge_end("e", 2, 2).is_full


def test_messages_and_fresh_ids_pickle():
    for m in [Insert(FreshId("a", 2), 1, 2, [1]), Retract(1, 1, 5, 3, None), Cti(4)]:
        assert pickle.loads(pickle.dumps(m)) == m
    assert FreshId("a", 1) != ("a", 1) and FreshId("a", 1) == FreshId("a", 1)


def test_time_arithmetic_keeps_infinity():
    assert add_time(MAX_TIME, -5) == MAX_TIME
    assert add_time(MIN_TIME + 1, -5) == MIN_TIME
    assert fmt_time(MAX_TIME) == "∞" and fmt_time(3) == "3"
