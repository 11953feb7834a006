"""The ends of the time axis do not stop a query: an event whose start ``shift`` (or a start
function) moves off the axis is a dead letter with the reason, and a finite end moved past it
is cut to the axis's last finite instant, ``MAX_TIME - 1`` (it does not turn into ∞). Before,
the first raised ``OperatorError`` and stopped everything, the second silently made a finite
event open-ended. Inline and on Ray."""

from __future__ import annotations

from operators.cht import to_cht
from operators.events import MAX_TIME, MIN_TIME, Cti, Insert
from tests.kit import assert_equivalent
from topology import Stream

LAST = MAX_TIME - 1
EVENTS = [Insert("early", 0, 5, "a"), Insert("late", 100, 110, "b"),
          Insert("open", 50, MAX_TIME, "c"), Cti(120)]


def test_shift_past_the_end(runtime):
    d = MAX_TIME - 60
    out = Stream.from_events(EVENTS).shift(d).collect(runtime)
    #   early [d, d + 5)        open [d + 50, ∞)       late would start past the axis: dead
    assert_equivalent(out, [(d, d + 5, "a"), (d + 50, MAX_TIME, "c")])


def test_a_finite_end_past_the_end_stays_finite(runtime):
    d = MAX_TIME - 105  # late starts at MAX_TIME - 5 and would end at MAX_TIME + 5
    out = Stream.from_events(EVENTS).shift(d).collect(runtime)
    assert (MAX_TIME - 5, LAST, "b") in to_cht(out)


def test_alter_lifetime_before_the_start(runtime):
    out = (Stream.from_events(EVENTS).alter_lifetime(start=lambda t: t + (MIN_TIME - 10))
           .collect(runtime))
    # early starts before MIN_TIME: dead; the others keep their lengths
    assert_equivalent(out, [(MIN_TIME + 90, MIN_TIME + 100, "b"),
                            (MIN_TIME + 40, MAX_TIME, "c")])


def test_the_dead_letter_says_why(ray_session):
    q = Stream.from_events(EVENTS).shift(MAX_TIME - 60).deploy("shift-off-axis")
    try:
        q.wait()
        [dead] = q.dead_letters()
        assert dead.item == EVENTS[1]
        assert "at or past the end of the time axis" in dead.reason
    finally:
        q.stop()

