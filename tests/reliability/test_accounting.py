"""The accounting equation at every source: ``received = processed + dropped + adjusted +
dead_lettered`` (rows), ``received = sent on + dead-lettered`` (messages), after every batch,
across a checkpoint, inline and on Ray through ``Query.stats()``, ``Query.late()`` and
``Query.dead_letters()``."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import validate
from operators.events import Cti, Insert, Retract
from operators.ingress import AdvanceTime
from operators.sources import EventsSource, RowsSource
from tests.kit import ON_RAY, PROPERTY, assert_equivalent, physical_streams
from tests.reliability import TERMS, assert_accounted, records, run_dag
from topology import Stream

# rows: mostly good, some late, some broken
row = st.one_of(
    st.fixed_dictionaries({"t": st.integers(0, 60), "e": st.integers(0, 80),
                           "k": st.integers(0, 5)}),
    st.fixed_dictionaries({"t": st.integers(0, 60), "k": st.integers(0, 5)}),
    st.fixed_dictionaries({"t": st.sampled_from([None, "x", 1.5, float("nan")])}),
    st.sampled_from([None, 3, "row"]),
)


def _feed_with_checkpoint(make, items, rnd, check):
    """Feed ``items`` to ``make()`` in random batches, calling ``check(source, items fed)``
    after each; once, at random, checkpoint (a pickled snapshot) and resume in a fresh source.
    Returns the output and the last source."""
    src = make()
    out, i, restored = [], 0, False
    while i < len(items):
        if not restored and rnd.random() < 0.2:  # checkpoint, then resume in a fresh source
            state = pickle.loads(pickle.dumps(src.snapshot()))
            src = make()
            src.restore(state)
            restored = True
        n = rnd.choice([1, 2, 3, 7])
        out.extend(src.process(items[i:i + n]))
        i += n
        check(src, min(i, len(items)))
    return out, src


@PROPERTY
@given(st.lists(row, max_size=40), st.sampled_from(["point", "interval", "edge"]),
       st.builds(AdvanceTime, every=st.sampled_from([1, 2, 5]), delay=st.integers(0, 6),
                 policy=st.sampled_from(["drop", "adjust"])),
       st.randoms(use_true_random=False))
def test_the_equation_holds_after_every_batch_and_across_a_checkpoint(rows, shape, advance, rnd):
    def make():
        return RowsSource("src", start="t", end=None if shape == "point" else "e", shape=shape,
                          id="k" if shape == "edge" else None, advance=advance)

    def check(src, fed):
        assert src.stats["received"] == fed
        assert_accounted(src.stats)
        src.ingress._check()

    out, src = _feed_with_checkpoint(make, rows, rnd, check)
    out.extend(src.finish())
    validate(out, name="source output")
    assert_accounted(src.stats)
    assert src.stats["dead_lettered"] == len(src.dead_letters)
    assert src.stats["dropped"] + src.stats["adjusted"] == len(src.late)
    # every late record says what happened and why
    assert all(x.action in ("dropped", "adjusted") and x.reason for x in src.late)
    assert all(x.reason for x in src.dead_letters)


def test_every_term_of_the_equation_is_exercised():
    rows = [{"t": 10, "e": 20}, {"t": 2, "e": 3}, {"t": 4, "e": 15}, {"t": None},
            {"t": 12, "e": 14}]
    #   CTI 10 after the first row; [2, 3) dropped; [4, 15) adjusted to [10, 15); None dead
    _, dag, _ = run_dag(Stream.from_rows(rows, start="t", end="e", shape="interval",
                                         advance=AdvanceTime(every=1, policy="adjust")))
    stats = dag.procs["from_rows#0"].stats
    assert {k: stats[k] for k in ("received", *TERMS)} == {
        "received": 5, "processed": 2, "dropped": 1, "adjusted": 1, "dead_lettered": 1}


def test_messages_received_equal_messages_sent_on_plus_dead_letters():
    msgs = [Insert("a", 1, 5), Cti(3), Insert("b", 2, 4), Retract("a", 1, 5, 9), Cti(2),
            Retract("q", 1, 2, 1), Insert("a", 7, 8), Cti(9)]
    src = EventsSource("ev")
    out = [m for i in range(0, len(msgs), 3) for m in src.process(msgs[i:i + 3])]
    assert out == [Insert("a", 1, 5), Cti(3), Retract("a", 1, 5, 9), Cti(9)]
    assert len(msgs) == len(out) + len(src.dead_letters)
    assert src.stats == {"received": 8, "processed": 4, "dead_lettered": 4, "ctis": 2}
    assert_messages_accounted(src.stats)


def test_a_messages_source_counts_like_a_rows_source():
    src = EventsSource("ev")
    src.process([Insert("a", 1, 2), Cti(5), Insert("b", 1, 2)])
    assert src.stats == {"received": 3, "processed": 2, "dead_lettered": 1, "ctis": 1}


def assert_messages_accounted(stats):
    """The accounting equation of a messages source."""
    assert stats["received"] == stats["processed"] + stats["dead_lettered"], stats


# messages: a valid physical stream with junk, replays and unchecked messages mixed in
junk = st.sampled_from([None, "Insert(a, 1, 2)", Cti(0), Retract("nobody", 1, 2, 1),
                        tuple.__new__(Insert, ("u", 5, 3, None)), tuple.__new__(Cti, ("x",)),
                        Insert(["unhashable"], 99, 100)])


def _mixed(good):
    """``good`` with junk and replays of its own messages inserted anywhere."""
    extra = st.one_of(st.sampled_from(good or [Cti(0)]), junk)
    return st.lists(st.tuples(st.integers(0, len(good)), extra), max_size=8).map(
        lambda ins: [m for i in range(len(good) + 1)
                     for m in [x for at, x in ins if at == i] + good[i:i + 1]])


@PROPERTY
@given(physical_streams(max_steps=20).flatmap(_mixed), st.randoms(use_true_random=False))
def test_a_messages_source_accounts_after_every_batch_and_across_a_checkpoint(msgs, rnd):
    def check(src, fed):
        assert src.stats["received"] == fed
        assert_messages_accounted(src.stats)

    out, src = _feed_with_checkpoint(lambda: EventsSource("ev"), msgs, rnd, check)
    validate(out, name="source output")
    assert src.stats["processed"] == len(out)
    assert src.stats["dead_lettered"] == len(src.dead_letters)
    assert src.stats["ctis"] == sum(type(m) is Cti for m in out)
    assert all(d.reason for d in src.dead_letters)


def test_a_column_batch_counts_its_events():
    import numpy as np

    from operators.columns import Columns

    #   CTI 5, then columns [7 - 8) [3 - 4) [6 - 8): the second is behind the CTI
    cols = Columns(np.arange(3), np.array([7, 3, 6]), np.array([8, 4, 8]), np.arange(3))
    src = EventsSource("ev")
    assert len(src.process([Cti(5), cols, Cti(9)])) == 4
    assert src.stats == {"received": 5, "processed": 4, "dead_lettered": 1, "ctis": 2}


# -- on Ray ---------------------------------------------------------------------------------------
ROWS = [{"t": 10, "v": 1}, {"t": 3, "v": 2}, {"t": None, "v": 3}, {"t": 12, "v": 4},
        {"t": "soon", "v": 5}, {"t": 11, "v": 6}, 7, {"t": 20, "v": 8}]
EVENTS = [Insert("x", 0, 30, {"v": 100}), Cti(5), Insert("y", 1, 2, {"v": 101}),
          Retract("nobody", 1, 2, 1), Cti(4), Insert("z", 6, 9, {"v": 102}), Cti(30)]


def _query(rows=ROWS, events=EVENTS):
    return (Stream.from_rows(rows, start="t", advance=AdvanceTime(every=1, delay=1))
            .union(Stream.from_events(events)).where(lambda p: p["v"] > 0))


def _check_query(q, inline_dag):
    assert q.wait(60)
    stats = q.stats()
    rows_src = stats["from_rows#0"]["source"]
    assert_accounted(rows_src)
    ev = stats["from_events#1"]
    assert ev["events_in"] == ev["events_out"] + ev["dead_letters"]
    # a messages source reports its counters like a rows source
    assert_messages_accounted(ev["source"])
    assert ev["source"] == inline_dag.procs["from_events#1"].stats
    assert (ev["source"]["received"], ev["source"]["processed"]) == (ev["events_in"],
                                                                     ev["events_out"])
    # the same records, and the same counts, as the inline run
    assert rows_src == inline_dag.procs["from_rows#0"].stats
    assert sorted(map(repr, q.dead_letters())) == sorted(map(repr, records(inline_dag,
                                                                           "dead_letters")))
    assert sorted(map(repr, q.late())) == sorted(map(repr, records(inline_dag, "late")))
    assert sum(s["dead_letters"] for s in stats.values()) == len(q.dead_letters())
    assert sum(s["late"] for s in stats.values()) == len(q.late())


@pytest.mark.slow
@pytest.mark.ray
def test_on_ray_stats_late_and_dead_letters_account_for_every_input(ray_session):
    out, dag, _ = run_dag(_query())
    # rows None, "soon", 7; messages y (behind Cti(5)), the unknown retraction, Cti(4)
    assert len(records(dag, "dead_letters")) == 6
    assert [x.item["v"] for x in records(dag, "late")] == [2]  # t=3 behind Cti(9)
    q = _query().deploy("accounting", history=True)
    try:
        _check_query(q, dag)
        assert_equivalent(q.snapshot(), out)
    finally:
        q.stop()


@pytest.mark.slow
@pytest.mark.ray
@ON_RAY
@given(st.lists(row, max_size=15), st.integers(0, 2**16))
def test_on_ray_random_rows_account_like_inline(ray_session, rows, seed):
    rows = [dict(r, v=i + 1) if isinstance(r, dict) else r for i, r in enumerate(rows)]
    random.Random(seed).shuffle(rows)
    _, dag, _ = run_dag(_query(rows))
    q = _query(rows).deploy(f"accounting-{seed}")
    try:
        _check_query(q, dag)
    finally:
        q.stop()


@pytest.mark.ray
def test_on_ray_unchecked_messages_reach_the_driver_as_dead_letters(ray_session):
    # messages that skipped their constructors travel the wire unchecked; the source's dead
    # letters keep their fields as plain tuples, which the driver can unpickle
    bad = [tuple.__new__(Insert, ("u", 5, 3, None)), tuple.__new__(Cti, (float("nan"),))]
    events = [Insert("a", 1, 3, 1), Cti(2), *bad, Insert("b", 4, 8, 2), Cti(9)]
    q = Stream.from_events(events).deploy("accounting-unchecked")
    try:
        assert q.wait(60)
        dead = q.dead_letters()
        assert [repr(d.item) for d in dead] == ["('u', 5, 3, None)", "(nan,)"]
        assert "end 3 is not after start 5" in dead[0].reason
        assert q.stats()["from_events#0"]["source"] == {
            "received": 6, "processed": 4, "dead_lettered": 2, "ctis": 2}
    finally:
        q.stop()
