"""A retraction must repeat its insert's payload. One that does not is a dead letter at the
source, and no operator ever reads its payload: before, ``where`` kept or dropped the
retraction by the forged payload and the windows summed it, so values appeared in the output
that no row of the input CHT holds. Inline and on Ray."""

from __future__ import annotations

from operators.aggregates import Sum
from operators.events import Cti, Insert, Retract
from operators.windows import tumbling_window
from tests.kit import assert_equivalent
from tests.reference_windows import window
from topology import Stream

#   a [0 ------------ 10)  v=1     the forged retraction shortens it to [0, 4) with v=100
#   b      [2 --- 6)       v=2
GOOD = [Insert("a", 0, 10, {"v": 1}), Insert("b", 2, 6, {"v": 2}), Cti(3)]
FORGED = Retract("a", 0, 10, 4, {"v": 100})


def _stream():
    return Stream.from_events(GOOD + [FORGED, Cti(20)])


def test_span_operators_never_read_the_forged_payload(runtime):
    q = _stream().where(lambda p: p["v"] < 500).select(lambda p: p["v"])
    out = q.collect(runtime)
    # the forged retraction is not applied: a keeps its whole lifetime and payload
    assert_equivalent(out, [(0, 10, 1), (2, 6, 2)])


def test_a_window_never_sums_the_forged_payload(runtime):
    q = _stream().tumbling_window(5).aggregate(Sum(lambda p: p["v"]))
    out = q.collect(runtime)
    expected = window(GOOD + [Cti(20)], tumbling_window(5), Sum(lambda p: p["v"]))
    assert_equivalent(out, expected)
    assert [row[2] for row in expected] == [3, 3]  # no 100 anywhere


def test_the_forged_retraction_is_a_dead_letter_with_its_reason(ray_session):
    q = _stream().where(lambda p: True).deploy("forged-retraction")
    try:
        q.wait()
        [dead] = q.dead_letters()
        assert dead.item == FORGED
        assert "is not the payload {'v': 1} its insert carried" in dead.reason
    finally:
        q.stop()
