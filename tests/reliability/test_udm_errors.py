"""A UDM that raises: by default the query fails with an error naming the operator, the UDM and
the window; with ``on_error="dead_letter"`` the window's input goes to the dead letters and the
query goes on. A UDM result that cannot be serialised: inline it is simply the payload (nothing
is serialised in one process); on Ray the error must name the operator."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import IncrementalAggregate
from operators.cht import to_cht
from operators.errors import OperatorError
from operators.events import Cti, Insert, Retract
from operators.select import Select
from operators.udm import Aggregate, TimeSensitiveOperator
from operators.windows import count_window, snapshot_window, tumbling_window
from tests.kit import HEAVY, assert_equivalent, physical_streams
from tests.reference_windows import window as reference_window
from tests.reliability import records, run_dag
from topology import Stream

POISON = 3


class NoThrees(Aggregate):
    """Counts the window's events; raises on a payload of 3."""

    def compute(self, values):
        if POISON in values:
            raise ZeroDivisionError("a three")
        return len(values)


class NoThreesIncremental(IncrementalAggregate):
    def initial_state(self):
        return 0

    def add(self, state, values):
        if POISON in values:
            raise ZeroDivisionError("a three")
        return state + len(values)

    def remove(self, state, values):
        return state - len(values)

    def result(self, state):
        return state


class StampThrees(TimeSensitiveOperator):
    def compute(self, events, window):
        if any(p == POISON for _, _, p in events):
            raise KeyError("a three")
        return [(window.start, window.end, len(events))]


def _count(values):
    return len(values)


EVENTS = [Insert(f"e{i}", i, i + 2, i % 5) for i in range(12)] + [Cti(14)]

WINDOWS = {
    "tumbling": (lambda s: s.tumbling_window(5), "tumbling.aggregate#1"),
    "snapshot": (lambda s: s.snapshot_window(), "snapshot.aggregate#1"),
    "count": (lambda s: s.count_window(3), "count.aggregate#1"),
}


@pytest.mark.parametrize("udm", [NoThrees(), NoThreesIncremental()], ids=["plain", "incremental"])
@pytest.mark.parametrize("shape", list(WINDOWS))
def test_a_raising_udm_fails_the_query_naming_operator_udm_and_window(shape, udm):
    make, step = WINDOWS[shape]
    with pytest.raises(OperatorError) as err:
        make(Stream.from_events(EVENTS)).aggregate(udm).collect(runtime="inline")
    text = str(err.value)
    assert step in text, text
    assert type(udm).__name__ in text, text
    assert "ZeroDivisionError: a three" in text, text
    assert "window [" in text, text
    assert "on_error='dead_letter'" in text, text  # how to fix it


def test_a_raising_udo_fails_the_query_naming_it():
    q = Stream.from_events(EVENTS).tumbling_window(5).apply(StampThrees())
    with pytest.raises(OperatorError, match=r"'tumbling\.apply#1'.*StampThrees.*\[0, 5\)"):
        q.collect(runtime="inline")


@pytest.mark.parametrize("udm", [NoThrees(), NoThreesIncremental()], ids=["plain", "incremental"])
@pytest.mark.parametrize("shape", list(WINDOWS))
def test_with_dead_letters_the_failing_windows_input_is_kept_and_the_query_goes_on(shape, udm):
    make, step = WINDOWS[shape]
    q = make(Stream.from_events(EVENTS)).aggregate(udm, on_error="dead_letter")
    out, dag, _ = run_dag(q)
    dead = records(dag, "dead_letters")
    assert dead and all(d.where == step for d in dead)
    assert all("ZeroDivisionError" in d.reason for d in dead)
    # every window in the output holds no 3; every final window holding a 3 was dead-lettered
    spec = {"tumbling": tumbling_window(5), "snapshot": snapshot_window(),
            "count": count_window(3)}[shape]
    expected = _expected(EVENTS, spec, shape)
    assert_equivalent(out, expected)
    failed = {(d.item[0].start, d.item[0].end) for d in dead}
    for (ws, we), members in _final_windows(EVENTS, spec, shape):
        if any(p == POISON for _, _, p in members):
            assert (ws, we) in failed, (ws, we)
            last = [d for d in dead if (d.item[0].start, d.item[0].end) == (ws, we)][-1]
            assert sorted(last.item[1]) == sorted(members)


def _final_windows(stream, spec, shape):
    """The reference's windows of ``stream`` with their member rows."""
    rows = to_cht(stream)
    if shape == "count":
        from tests.reference_count import count_windows

        return [((w.start, w.end), m) for w, m in count_windows(rows, spec.n, spec.by)]
    from tests.reference_windows import frontier, hopping_windows, snapshot_windows

    spans = (snapshot_windows(rows) if shape == "snapshot" else
             [(spec.alignment + n * spec.hop, spec.alignment + n * spec.hop + spec.size)
              for n in hopping_windows(rows, spec.size, spec.hop, spec.alignment,
                                       frontier(stream))])
    return [((ws, we), [r for r in rows if r[0] < we and r[1] > ws]) for ws, we in spans]


def _expected(stream, spec, shape):
    """The reference output with the failing windows left out (what dead-lettering means)."""
    out = []
    for (ws, we), members in _final_windows(stream, spec, shape):
        if members and not any(p == POISON for _, _, p in members):
            out.append((we - 1, we, len(members)) if shape == "count" else (ws, we, len(members)))
    return out


@HEAVY
@given(physical_streams(payloads=st.integers(0, 5), max_steps=20))
def test_dead_lettering_equals_the_reference_without_the_failing_windows(stream):
    # a CHT-level property on random physical streams (disorder, edges, retractions)
    q = Stream.from_events(stream).tumbling_window(4).aggregate(NoThrees(), on_error="dead_letter")
    out, dag, _ = run_dag(q, batch_size=3)
    rows = to_cht(stream)
    good = [r for r in reference_window(stream, tumbling_window(4), _count)
            if not any(p == POISON for s, e, p in rows if s < r[1] and e > r[0])]
    assert_equivalent(out, good)
    # every window that is left out of the output was dead-lettered
    failed = {(d.item[0].start, d.item[0].end) for d in records(dag, "dead_letters")}
    for s, e, _ in reference_window(stream, tumbling_window(4), _count):
        assert (s, e) in failed or (s, e) in {(a, b) for a, b, _ in good}


def test_one_dead_letter_per_window_that_is_final_and_failing():
    #   e1 (3) in [0, 4) makes the UDM fail, then is retracted: [0, 4) succeeds, count 2
    #   [4, 8) holds a 3 from the start and grows by one event twice: it fails 3 times
    stream = [Insert("e0", 0, 1, 0), Insert("e1", 0, 1, POISON), Insert("e2", 0, 1, 0),
              Cti(0), Retract("e1", 0, 1, 0, POISON), Insert("f0", 4, 5, POISON),
              Insert("f1", 5, 6, 1), Insert("f2", 6, 7, 1), Cti(8)]
    q = Stream.from_events(stream).tumbling_window(4).aggregate(NoThrees(), on_error="dead_letter")
    out, dag, _ = run_dag(q, batch_size=1)
    assert_equivalent(out, [(0, 4, 2)])
    dead = records(dag, "dead_letters")
    assert [(d.item[0].start, d.item[0].end) for d in dead] == [(4, 8)]
    assert sorted(m[2] for m in dead[0].item[1]) == [1, 1, POISON]


def test_a_snapshot_window_dead_letter_follows_splits_and_merges():
    #   e0 [0 ------ 4) 0     e1 [0 ------ 4) 3     e2     [2 ------ 6) 1, deleted later
    #   windows while e2 lives: [0, 2) fails, [2, 4) fails, [4, 6) = 1
    #   e2 deleted: [0, 2) and [2, 4) merge into [0, 4), still failing: one dead letter
    stream = [Insert("e0", 0, 4, 0), Insert("e1", 0, 4, POISON), Insert("e2", 2, 6, 1), Cti(1),
              Retract("e2", 2, 6, 2, 1), Insert("e3", 6, 8, 1), Cti(9)]
    q = Stream.from_events(stream).snapshot_window().aggregate(NoThrees(), on_error="dead_letter")
    out, dag, _ = run_dag(q, batch_size=1)
    assert_equivalent(out, [(6, 8, 1)])
    dead = records(dag, "dead_letters")
    assert [(d.item[0].start, d.item[0].end) for d in dead] == [(0, 4)]
    assert sorted(dead[0].item[1]) == [(0, 4, 0), (0, 4, POISON)]
    assert "[0, 4) holding 2 events" in dead[0].reason


def test_a_count_window_is_dead_lettered_once_when_final():
    #   count_window(2) by start; distinct starts 1, 2, 4
    #   b (3) at 2 makes [1, 3) fail, then is deleted: [1, 3) = {a, c} succeeds, count 2
    #   [2, 5) holds c, d (3), e, f: evaluated three times, failing; final at Cti(5)
    stream = [Insert("a", 1, 2, 1), Insert("b", 2, 3, POISON), Insert("c", 2, 3, 1), Cti(1),
              Retract("b", 2, 3, 2, POISON), Insert("d", 4, 5, POISON), Insert("e", 4, 5, 1),
              Insert("f", 4, 5, 1), Cti(5)]
    q = Stream.from_events(stream).count_window(2).aggregate(NoThrees(), on_error="dead_letter")
    out, dag, _ = run_dag(q, batch_size=1)
    assert_equivalent(out, [(2, 3, 2)])
    dead = records(dag, "dead_letters")
    assert [d.item[0] for d in dead] == [(2, 5)]
    assert sorted(m[2] for m in dead[0].item[1]) == [1, 1, 1, POISON]
    assert dead[0].item[2] == Insert("f", 4, 5, 1)  # the last evaluation's trigger


@pytest.mark.parametrize("grouped", [False, True], ids=["window", "group_apply"])
def test_at_the_end_of_the_input_a_failing_window_not_final_yet_is_dead_lettered(grouped):
    #   a [1 - 2) 1    b [6 - 7) 3    Cti(5)    end of the input
    #   [0, 5) final, count 1;  [5, 10) not final, failing: a dead letter when the input ends
    stream = [Insert("a", 1, 2, 1), Insert("b", 6, 7, POISON), Cti(5)]
    s = Stream.from_events(stream)
    if grouped:
        # the sub-query is a Chain (where → window): its finish() reaches the window
        q = s.group_apply(lambda p: 0, lambda g: g.where(lambda p: p >= 0).tumbling_window(5)
                          .aggregate(NoThrees(), on_error="dead_letter"))
    else:
        q = s.tumbling_window(5).aggregate(NoThrees(), on_error="dead_letter")
    out, dag, _ = run_dag(q, batch_size=1)
    assert sorted(p if not grouped else p[1] for _, _, p in to_cht(out)) == [1]
    dead = records(dag, "dead_letters")
    assert [(d.item[0].start, d.item[0].end) for d in dead] == [(5, 10)]
    assert [m[2] for m in dead[0].item[1]] == [POISON]


def test_group_apply_keeps_the_dead_letters_of_its_groups():
    # groups come and go (an idle group is dropped): their dead letters must not go with them
    q = Stream.from_events(EVENTS).group_apply(
        lambda p: p % 2, lambda g: g.tumbling_window(5).aggregate(NoThrees(),
                                                                  on_error="dead_letter"))
    out, dag, _ = run_dag(q)
    dead = records(dag, "dead_letters")
    assert dead and all("ZeroDivisionError" in d.reason for d in dead)
    assert {d.item[0] for d in dead} == {(0, 5), (5, 10)}  # the windows of the 3s (e3, e8)
    # key 1 (odd payloads) holds every 3: its windows are missing, key 0's are all there
    keys = {p[0] for _, _, p in to_cht(out)}
    assert 0 in keys


def test_count_window_dead_letters_survive_a_snapshot_and_restore():
    from operators.windows import make_window

    #   a at 1, b (3) at 2: the count window [1, 3) fails; the checkpoint holds the failure,
    #   Cti(3) makes the window final: one dead letter, in the restored operator
    op = make_window(count_window(2), NoThrees(), on_error="dead_letter", name="cw")
    op.process([Insert("a", 1, 2, 1), Insert("b", 2, 3, POISON)])
    assert op.dead_letters == []  # not final yet: a retraction of b could still fix it
    fresh = make_window(count_window(2), NoThrees(), on_error="dead_letter", name="cw")
    fresh.restore(op.snapshot())
    assert fresh.process([Cti(3)]) == [Cti(3)]
    [dead] = fresh.dead_letters
    window, members, trigger = dead.item
    assert window == (1, 3) and sorted(members) == [(1, 2, 1), (2, 3, POISON)]
    assert trigger == Insert("b", 2, 3, POISON)
    again = make_window(count_window(2), NoThrees(), on_error="dead_letter", name="cw")
    again.restore(fresh.snapshot())
    assert again.dead_letters == fresh.dead_letters


def test_an_unserialisable_result_inline_is_just_a_payload():
    # inline nothing is serialised: the lock travels as the payload, and the output CHT holds it
    lock = threading.Lock()
    out = (Stream.from_events(EVENTS).tumbling_window(5).aggregate(lambda v: lock)
           .collect(runtime="inline"))
    assert [p for _, _, p in to_cht(out)] == [lock, lock, lock]


# -- on Ray ----------------------------------------------------------------------------------------
@pytest.mark.ray
def test_on_ray_a_raising_udm_surfaces_in_the_driver_naming_operator_udm_window(ray_session):
    q = Stream.from_events(EVENTS).tumbling_window(5).aggregate(NoThrees())
    with pytest.raises(OperatorError) as err:
        q.collect(timeout_s=60)
    text = str(err.value)
    assert "tumbling.aggregate#1" in text and "NoThrees" in text and "[0, 5)" in text
    live = Stream.from_events(EVENTS).tumbling_window(5).aggregate(NoThrees()).deploy("udm-fail")
    try:
        with pytest.raises(OperatorError, match=r"tumbling\.aggregate#1.*NoThrees.*window \["):
            live.wait(60)
        assert "NoThrees" in (live.error() or "")
    finally:
        live.stop()


@pytest.mark.slow
@pytest.mark.ray
def test_on_ray_dead_lettered_windows_are_in_query_dead_letters(ray_session):
    q = (Stream.from_events(EVENTS).group_apply(
        lambda p: p % 2, lambda g: g.tumbling_window(5).aggregate(NoThrees(),
                                                                  on_error="dead_letter"),
        partitions=2).deploy("udm-dead", history=True))
    try:
        assert q.wait(60)
        dead = q.dead_letters()
        assert {d.item[0] for d in dead} == {(0, 5), (5, 10)}
        stats = q.stats()
        assert sum(s["dead_letters"] for s in stats.values()) == len(dead)
        inline, _, _ = run_dag(Stream.from_events(EVENTS).group_apply(
            lambda p: p % 2, lambda g: g.tumbling_window(5).aggregate(
                NoThrees(), on_error="dead_letter")))
        assert_equivalent(q.snapshot(), inline)
    finally:
        q.stop()


@pytest.mark.ray
def test_on_ray_an_unserialisable_udm_result_fails_naming_the_operator(ray_session):
    q = Stream.from_events(EVENTS).tumbling_window(5).aggregate(lambda v: threading.Lock())
    with pytest.raises(OperatorError, match=r"tumbling\.aggregate#1") as err:
        q.collect(timeout_s=20)
    text = str(err.value)
    assert "its output cannot be serialised" in text and "lock" in text
    assert "return picklable payloads" in text



# the shell driven in-process (a plain class; no Ray): both ways its output leaves it
class _Downstream:
    """A stand-in for the next stage's actor handle: records the calls made to it."""

    def __init__(self):
        self.calls = []
        for method in ("push", "fail", "end", "barrier"):
            setattr(self, method, self._Method(self.calls, method))

    class _Method:
        def __init__(self, calls, name):
            self.calls, self.name = calls, name

        def remote(self, *args):
            self.calls.append((self.name, *args))


def _shell(edges=(), handles=None):
    from actors.shell import OperatorShell
    from actors.stage_config import StageConfig
    from topology.planning.routing import Router

    shell = OperatorShell()
    shell.configure(StageConfig(step="select#1", describe="select(<lambda>)",
                                router=Router(list(edges)), handles=handles or {},
                                factory=lambda: Select(lambda p: threading.Lock() if p == 3
                                                       else p, name="select#1")))
    return shell


def test_an_unserialisable_output_batch_fails_the_step_and_is_forwarded():
    from actors.wire import encode
    from topology.planning.routing import OutEdge

    down = _Downstream()
    shell = _shell([OutEdge("sink", 0)], {"sink": down})
    #   a (1)  b (3 → a lock)  Cti(9): the batch to the sink cannot be pickled
    shell.push(0, encode([Insert("a", 0, 1, 1), Insert("b", 1, 2, 3), Cti(9)]))
    error = shell.stats()["error"]
    assert "'select#1'" in error and "its output cannot be serialised" in error
    assert "Insert(id='b'" in error and "return picklable payloads" in error
    assert [c[0] for c in down.calls] == ["fail"] and down.calls[0][2] == error
    shell.push(0, encode([Insert("c", 9, 10, 1)]))  # a failed step processes nothing more
    shell.end(0)  # ... and at the end of input it repeats the failure, not the end
    assert {c[0] for c in down.calls} == {"fail"}


def test_an_unserialisable_output_fetched_by_a_driver_fails_the_step():
    from actors.wire import decode, encode

    shell = _shell()
    pull = shell.open_pull()
    shell.push(0, encode([Insert("a", 0, 1, 1), Insert("b", 1, 2, 3)]))
    blob, _, error = shell.fetch(pull, timeout_s=0)
    assert decode(blob) == []
    assert "'select#1'" in error and "its output cannot be serialised" in error
    assert shell.fetch(pull, timeout_s=0)[2] == error
