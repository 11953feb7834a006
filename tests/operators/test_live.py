"""LiveEvents against a plain model: the live rows, what each CTI makes final, the problems
it reports (the validator's), and a heap that does not grow with retracted ends."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht
from operators.columns import Columns
from operators.events import MAX_TIME, Insert, Retract
from operators.live import LiveEvents
from tests.kit import PROPERTY, physical_streams


def _columns(inserts: list[Insert]) -> Columns:
    ids, pay = np.empty(len(inserts), dtype=object), np.empty(len(inserts), dtype=object)
    ids[:], pay[:] = [m.id for m in inserts], [m.payload for m in inserts]
    return Columns(ids, np.array([m.start for m in inserts]), np.array([m.end for m in inserts]),
                   pay)


@PROPERTY
@given(physical_streams(), st.sampled_from([0.0, 0.7]), st.randoms(use_true_random=False))
def test_live_events_match_the_cht_and_free_what_ctis_make_final(stream, columns, rnd) -> None:
    # with columns > 0, runs of inserts come as checked column batches (insert_columns): they
    # stay columns until a row message needs them one by one
    events = LiveEvents()
    final: list[tuple[int, int, object]] = []
    run: list[Insert] = []
    for msg in stream:
        if type(msg) is Insert and rnd.random() < columns:
            run.append(msg)
            continue
        if run:
            events.insert_columns(_columns(run))
            run.clear()
        if type(msg) is Insert:
            assert events.insert(msg) is None
        elif type(msg) is Retract:
            assert events.retract(msg) is None
        else:
            freed = events.advance_to(msg.time)
            assert all(e < msg.time for _, _, e, _ in freed)
            assert [r[2] for r in freed] == sorted(r[2] for r in freed)  # by end
            final.extend((s, e, p) for _, s, e, p in freed)
        events.check()
        assert all(e >= events.cti for _, e, _ in events.rows())
    if run:
        events.insert_columns(_columns(run))
    assert len(events) == len(list(events.items()))
    left = sorted(events.items(), key=repr)
    rows = final + [(s, e, p) for _, s, e, p in left]
    assert sorted(rows, key=repr) == sorted(to_cht(stream), key=repr)
    assert sorted(events.drain(), key=repr) == left and len(events) == 0


@given(st.integers(1, 3_000))
def test_retracted_ends_do_not_pile_up(n) -> None:
    events = LiveEvents()
    for i in range(n):
        assert events.insert(Insert(i, 0, MAX_TIME, i)) is None
        assert events.retract(Retract(i, 0, MAX_TIME, 0, i)) is None
    assert len(events) == 0 and len(events.by_end) <= 65


def test_problems_are_the_validators() -> None:
    events = LiveEvents()
    assert events.insert(Insert("a", 0, 10, "x")) is None
    assert "duplicate id 'a'" in events.insert(Insert("a", 2, 3, "y"))
    assert "lifetime [0, 9) does not match" in events.retract(Retract("a", 0, 9, 5, "x"))
    assert "payload 'z' is not the payload 'x'" in events.retract(Retract("a", 0, 10, 5, "z"))
    assert events.advance_to(6) == []
    assert "behind the CTI 6" in events.retract(Retract("a", 0, 10, 5, "x"))
    assert "behind the CTI 6" in events.insert(Insert("b", 5, 8, "y"))
    assert events.advance_to(11) == [("a", 0, 10, "x")]
    assert "unknown id 'a'" in events.retract(Retract("a", 0, 10, 12, "x"))
    assert events.drain() == [] and events.cti == MAX_TIME

