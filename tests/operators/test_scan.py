"""``scan``: a user-defined stream operator against the from-scratch reference
(:func:`tests.reference_scan.scan`) on random valid physical streams, restored mid-stream, in
one batch and in random batches, through the builder (per key under ``group_apply``) inline
and on Ray; scenarios that read like timelines; errors named where they were written."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.cht import to_cht, validate
from operators.errors import OperatorError
from operators.events import MAX_TIME, Cti, Insert, Retract
from operators.scan import Scan
from operators.udm import StreamOperator, register
from tests import reference_scan as ref
from tests.kit import (
    ON_RAY,
    PROPERTY,
    assert_equivalent,
    final_time,
    physical_streams,
    run_operator,
)
from topology import Stream

STREAMS = st.one_of(physical_streams(), physical_streams(span=6, max_length=6))


def echo(state, p):
    """Order-sensitive: every output names its position in the sequence and the sum so far;
    ``p % 3`` outputs (often none, sometimes two)."""
    n, total = state
    return (n + 1, total + p), [(n, p, total)] * (p % 3)


def echo_list(state, p):
    """Updates its state in place (a list), as a user's step may."""
    state.append(p)
    return state, [tuple(state[-3:])]


def _reference(stream, step=echo, initial=(0, 0), tie=None):
    return ref.scan(to_cht(stream), final_time(stream), step, initial, tie)


def _case(step, initial, tie=None):
    """``(factory, reference over CHT rows, query)`` for tests/topology/test_differential.py,
    whose streams end with a CTI past every start: every row is stepped."""
    return (lambda: Scan(step, initial, tie),
            lambda rows: ref.scan(rows, MAX_TIME, step, initial, tie),
            lambda s: s.scan(step, initial, tie))


CASES = {
    "echo": _case(echo, (0, 0)),
    "in_place": _case(echo_list, []),
    "tie": _case(echo, (0, 0), lambda p: -p),
}


# -- against the reference ----------------------------------------------------------------------
@PROPERTY
@given(stream=STREAMS, data=st.data())
def test_scan_matches_reference(stream, data):
    cut = data.draw(st.integers(0, len(stream)), label="restore_at")
    for step, initial, tie in ((echo, (0, 0), None), (echo_list, [], None),
                               (echo, (0, 0), lambda p: -p)):
        def factory(step=step, initial=initial, tie=tie):
            return Scan(step, initial, tie)

        out = run_operator(factory, stream, seed=cut, restore_at=cut)
        expected = _reference(stream, step, initial, tie)
        assert_equivalent(out, expected)
        assert not any(type(m) is Retract for m in out), "scan's output is final"
        assert final_time(out) == final_time(stream)
        op = factory()
        whole = op.process(stream)
        validate(whole)
        assert_equivalent(whole, expected)
        assert len(op.pending) == 0, "every event starts before the final CTI"


@ON_RAY
@given(stream=STREAMS)
def test_scan_per_key_through_the_builder(stream):
    out = (Stream.from_events(stream)
           .group_apply(lambda p: p % 2, lambda g: g.scan(echo, (0, 0)))
           .collect(runtime="inline"))
    rows = to_cht(stream)
    expected = [(s, e, (k, o)) for k in (0, 1)
                for s, e, o in ref.scan([r for r in rows if r[2] % 2 == k],
                                        final_time(stream), echo, (0, 0))]
    assert_equivalent(out, expected)


# -- scenarios ------------------------------------------------------------------------------------
def _recorder():
    seen: list = []

    def record(state, p):
        seen.append(p)
        return state, [p]

    return seen, record


def test_events_are_stepped_in_start_order_once_final():
    #   arrival   c [4 ── 9) "b"   a [1 ─ 2) "z"   Cti(3)   b [4 ─ 5) "a"   Cti(5)
    #   Cti(3) makes a final (starts at 1); c waits: an event at 4 may still come
    #   Cti(5) steps 4's events by tie (repr): "a" before "b", whatever the arrival order
    seen, record = _recorder()
    op = Scan(record, None)
    out = op.process([Insert("c", 4, 9, "b"), Insert("a", 1, 2, "z"), Cti(3)])
    assert seen == ["z"] and to_cht(out) == [(1, 2, "z")]
    out += op.process([Insert("b", 4, 5, "a"), Cti(5)])
    assert seen == ["z", "a", "b"]
    assert to_cht(out) == [(1, 2, "z"), (4, 5, "a"), (4, 5, "b")]
    assert out[-1] == Cti(5)


def test_deleted_before_its_cti_it_is_never_seen_and_corrections_after_do_not_matter():
    #   a [2 ──── 8) "keep"   b [3 ─ 6) "gone"   Retract b → deleted   Cti(4)
    #   then Retract a [2, 8) → [2, 5): a was stepped at Cti(4); its point output stays
    seen, record = _recorder()
    op = Scan(record, None)
    out = op.process([Insert("a", 2, 8, "keep"), Insert("b", 3, 6, "gone"),
                      Retract("b", 3, 6, 3, "gone"), Cti(4), Retract("a", 2, 8, 5, "keep"),
                      Cti(9)])
    assert seen == ["keep"]
    assert out == [Insert(out[0].id, 2, 3, "keep"), Cti(4), Cti(9)]


class Rising(StreamOperator):
    """Three rising prices in a row: the state is the last three prices."""

    def initial(self):
        return ()

    def step(self, last, price):
        last = (*last, price)[-3:]
        return last, ([last] if len(last) == 3 and last[0] < last[1] < last[2] else [])


def test_three_rising_prices_in_a_row():
    #   price   10 @1   11 @2   12 @3   9 @4   10 @5   13 @6   14 @7
    #   out                    (10,11,12)@3                   (9,10,13)@6 (10,13,14)@7
    prices = [10, 11, 12, 9, 10, 13, 14]
    stream = [Insert(i, t, t + 1, p) for i, (t, p) in enumerate(zip(range(1, 8), prices))]
    stream = stream[::-1] + [Cti(8)]  # arrival order does not matter
    out = Stream.from_events(stream).scan(Rising).collect(runtime="inline")
    assert to_cht(out) == [(3, 4, (10, 11, 12)), (6, 7, (9, 10, 13)), (7, 8, (10, 13, 14))]


def test_a_registered_stream_operator_runs_by_name_and_per_key():
    register("rising3", Rising)
    #   key a: 1 2 3 (rising)      key b: 3 2 1 (falling)   interleaved in time
    rows = [Insert(f"a{t}", t, t + 1, ("a", t)) for t in (1, 3, 5)]
    rows += [Insert(f"b{t}", t, t + 1, ("b", 7 - t)) for t in (2, 4, 6)]
    out = (Stream.from_events(rows + [Cti(10)])
           .group_apply(lambda p: p[0], lambda g: g.select(lambda p: p[1]).scan("rising3"))
           .collect(runtime="inline"))
    assert to_cht(out) == [(5, 6, ("a", (1, 3, 5)))]


def test_a_key_keeps_its_state_while_idle_under_group_apply():
    #   key 0: @1 ........ Cti(5) ........ @10   Cti(20)
    #   a running count per key: the second event of key 0 is its 2nd, though the key held
    #   no pending event in between (a key whose state changed is not dropped)
    def count(n, p):
        return n + 1, [n + 1]

    stream = [Insert("x", 1, 2, 0), Cti(5), Insert("y", 10, 11, 0), Insert("z", 11, 12, 1),
              Cti(20)]
    out = (Stream.from_events(stream).group_apply(lambda p: p, lambda g: g.scan(count, 0))
           .collect(runtime="inline"))
    assert to_cht(out) == [(1, 2, (0, 1)), (10, 11, (0, 2)), (11, 12, (1, 1))]


def test_a_key_whose_state_is_back_to_initial_is_dropped():
    #   a toggle: the state flips 0 → 1 → 0; back at 0 the key holds nothing any more
    op = Scan(lambda s, p: (1 - s, [s]), 0)
    op.process([Insert("a", 1, 2, "x"), Cti(3)])
    assert op.state_size() == 1
    op.process([Insert("b", 4, 5, "x"), Cti(6)])
    assert op.state_size() == 0


def test_state_survives_a_snapshot_through_pickle():
    op = Scan(echo_list, [])
    op.process([Insert("a", 1, 2, 5), Insert("b", 3, 4, 6), Cti(2)])
    again = Scan(echo_list, [])
    again.restore(pickle.loads(pickle.dumps(op.snapshot())))
    assert again.state == [5] and again.process([Cti(4)])[0].payload == (5, 6)


def test_the_pattern_examples_in_the_docs_run():
    page = (Path(__file__).resolve().parents[2] / "docs" / "patterns.md").read_text()
    blocks = [b.split("```")[0] for b in page.split("```python")[1:]]
    assert len(blocks) == 2
    scope: dict = {}
    exec(compile("\n".join(blocks), "docs/patterns.md", "exec"), scope)
    out = scope["alerts"].collect(runtime="inline")
    assert to_cht(out) == [(s, s + 1, (sym, (s - 4, s - 2, s))) for s, sym in
                           ((4, "B"), (5, "A"), (6, "B"), (7, "A"), (8, "B"), (9, "A"))]


# -- on both runtimes ---------------------------------------------------------------------------
def test_scan_on_each_runtime(runtime):
    stream = [Insert(f"e{i}", (i * 7) % 50, (i * 7) % 50 + 3, i % 5) for i in range(50)]
    stream += [Retract("e3", 21, 24, 21, 3), Cti(25)]
    stream += [Insert(f"f{i}", 25 + i, 27 + i, i % 4) for i in range(30)] + [Cti(60)]
    expected = _reference(stream)
    out = Stream.from_events(stream).scan(echo, (0, 0)).collect(runtime=runtime)
    assert_equivalent(out, expected)
    keyed = (Stream.from_events(stream)
             .group_apply(lambda p: p % 2, lambda g: g.scan(echo, (0, 0)), partitions=2)
             .collect(runtime=runtime))
    rows = to_cht(stream)
    assert_equivalent(keyed, [(s, e, (k, o)) for k in (0, 1) for s, e, o in ref.scan(
        [r for r in rows if r[2] % 2 == k], 60, echo, (0, 0))])


def test_a_registered_stream_operator_runs_by_name_on_each_runtime(runtime):
    register("rising3-anywhere", Rising)  # in the driver only: the plan carries the instance
    stream = [Insert(t, t, t + 1, p) for t, p in enumerate([3, 4, 5, 1, 2])] + [Cti(9)]
    out = Stream.from_events(stream).scan("rising3-anywhere").collect(runtime=runtime)
    assert to_cht(out) == [(2, 3, (3, 4, 5))]


# -- errors ---------------------------------------------------------------------------------------
def test_a_non_callable_step_is_refused_when_the_query_is_built():
    s = Stream.from_events([])
    with pytest.raises(TypeError, match=r"scan: step=3 is not callable"):
        s.scan(3, 0)
    with pytest.raises(TypeError, match=r"scan: tie='x' is not callable"):
        s.scan(echo, (0, 0), tie="x")
    with pytest.raises(ValueError, match=r"initial=0 is given with the stream operator Rising"):
        s.scan(Rising, 0)
    with pytest.raises(TypeError, match=r"Count.*not a StreamOperator"):
        s.scan(Count())
    with pytest.raises(KeyError, match=r"no UDM is registered as 'nope'"):
        s.scan("nope")


def test_a_step_that_returns_no_pair_fails_naming_the_step():
    def bad(state, p):
        return [p]

    op = Scan(bad, None, name="scan#3")
    with pytest.raises(OperatorError, match=r"scan#3.*bad returned \[1\].*pair"):
        op.process([Insert("a", 1, 2, 1), Cti(2)])
    op = Scan(lambda s, p: (s, 5), None, name="scan#4")
    with pytest.raises(OperatorError, match=r"scan#4.*outputs 5.*not an iterable"):
        op.process([Insert("a", 1, 2, 1), Cti(2)])


def test_explain_names_the_step():
    q = Stream.from_events([]).scan(echo, (0, 0), tie=abs)
    assert "scan(echo, tie=abs)" in q.explain(stages=False)


# -- checkpointed on Ray: the scan actor dies mid-stream ---------------------------------------
def running_total(total, p):
    """Any lost or repeated step shows: every output is the total so far."""
    return total + p["v"], [total + p["v"]]


@pytest.mark.slow
@pytest.mark.ray
def test_a_killed_scan_actor_recovers_its_state_from_the_checkpoint(ray_session, tmp_path):
    from tests.reliability.test_recovery import check_exactly_once, readings, run_with_kill

    def slow_total(total, p):
        # 0.5 ms a step, so that the whole run takes seconds and the kill, after 3,000 of
        # 8,000 events, lands while the query runs (a fast run could finish first)
        time.sleep(0.0005)
        return running_total(total, p)

    def query():
        return Stream.from_events(readings(8_000)).group_apply(
            lambda p: p["k"], lambda g: g.scan(slow_total, 0))

    expected = query().collect(runtime="inline")
    out, _, recs = run_with_kill("rec-scan", query(), tmp_path, "ray", "group_apply", 3_000)
    check_exactly_once(out, expected)
    assert len(recs) == 1


class _Counted:
    """A payload that counts the calls of its ``repr``."""

    calls = 0

    def __init__(self, v: int) -> None:
        self.v = v

    def __repr__(self) -> str:
        _Counted.calls += 1
        return f"_Counted({self.v})"


def test_a_users_tie_is_made_total_by_repr_only_where_keys_are_equal():
    # equal starts, tie keys p.v % 2: 3 and 1 share a key and are ordered by repr (1 first);
    # 2 has a key of its own, and no repr is taken of it
    ps = {v: _Counted(v) for v in (3, 2, 1)}
    op = Scan(lambda s, p: (s, [p.v]), None, tie=lambda p: p.v % 2)
    _Counted.calls = 0
    out = op.process([Insert(v, 5, 9, p) for v, p in ps.items()] + [Cti(6)])
    assert [m.payload for m in out if isinstance(m, Insert)] == [2, 1, 3]
    assert _Counted.calls == 2  # one repr per event of the tied key, none for the others
    many = [Insert(i, i, i + 1, _Counted(i)) for i in range(100)]
    _Counted.calls = 0
    op = Scan(lambda s, p: (s, [p.v]), None, tie=lambda p: p.v)
    assert len([m for m in op.process(many + [Cti(200)]) if isinstance(m, Insert)]) == 100
    assert _Counted.calls == 0
