"""CTI import (``Stream.import_ctis``, StreamInsight's AdvanceTimeImportSettings): a join of a
fast stream with a one-event reference stream that stays open stalls without it and advances
with it (a reference that ended holds nothing back either way), inline and on Ray; against a
from-scratch reference on random physical streams (disorder, edges closed later, lifetime
corrections, full retractions, CTIs) with the late policy, restored mid-stream; arguments
refused when the query is built."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.cht import to_cht, validate
from operators.events import MIN_TIME, Cti, Insert, Retract
from operators.ingress import ImportCti
from tests.kit import PROPERTY, assert_equivalent, run_operator
from tests.reference_joins import final_cti, two_inputs
from topology import AdvanceTime, Stream


def reference(pairs, policy):
    """Input 0's events as they come out when every message is judged against the largest
    CTI seen so far on either input: a change behind it is dropped, or (``adjust``) clipped
    to the CTI; the other input's events are not output. Returns the CHT and the number of
    late messages."""
    cti, events, dropped, late = MIN_TIME, {}, set(), 0
    for port, m in pairs:
        if type(m) is Cti:
            cti = max(cti, m.time)
            continue
        if port == 1:
            continue
        if type(m) is Insert:
            if m.start >= cti:
                events[m.id] = [m.start, m.end, m.payload]
            elif policy == "adjust" and m.end > cti:
                events[m.id] = [cti, m.end, m.payload]
                late += 1
            else:
                dropped.add(m.id)
                late += 1
            continue
        if m.id in dropped:
            late += 1
            if m.new_end == m.start:
                dropped.discard(m.id)
            continue
        s, e, _ = events[m.id]
        # on time: the end sent (a late retraction may have kept it short of the end the
        # message names) and the new end are both past the CTI; else the end is final
        if min(e, m.new_end) >= cti:
            events[m.id][1] = max(m.new_end, s)
        else:
            late += 1
            if policy != "adjust" or e <= cti:
                continue
            events[m.id][1] = max(m.new_end, s, cti)
        if events[m.id][1] == s:  # gone: fully retracted, or emptied by its moved start
            del events[m.id]
            if m.new_end != m.start:
                dropped.add(m.id)
    return [(s, e, p) for s, e, p in events.values()], late


@pytest.mark.parametrize("policy", ["drop", "adjust"])
@PROPERTY
@given(inputs=two_inputs(), data=st.data())
def test_import_matches_reference(policy, inputs, data):
    pairs, left, right = inputs
    cut = data.draw(st.integers(0, len(pairs)), label="restore_at")
    ops = []

    def make():
        ops.append(ImportCti(policy=policy))
        return ops[-1]

    out = run_operator(make, pairs, seed=cut, restore_at=cut)
    expected, late = reference(pairs, policy)
    assert_equivalent(out, expected)
    assert final_cti(out) == max(final_cti(left), final_cti(right))
    assert len(ops[-1].late) == late  # every late message is counted
    assert all(r.action in ("dropped", "adjusted") and r.reason for r in ops[-1].late)


def test_a_late_retraction_is_clipped_or_dropped():
    for policy, want in (("drop", [(0, 50, "a")]), ("adjust", [(0, 20, "a")])):
        imp = ImportCti(policy=policy)
        out = imp.process([Insert("a", 0, 50, "a")], 0)
        out += imp.process([Cti(20)], 1)
        out += imp.process([Retract("a", 0, 50, 10, "a")], 0)
        validate(out)
        assert_equivalent(out, want)
        assert len(imp.late) == 1


def test_a_retraction_of_an_event_kept_short_by_a_late_one_is_late_too():
    """l1 [15, 16); the imported CTI 17 makes its lengthening to 17 late (dropped): the event
    as sent ends at 16, final. The next lengthening, 17 → 18, is on time by the end it names
    but not by the end sent: dropped too, never a retraction of a final event (found by the
    5000-example run)."""
    pairs = [(0, Insert("l1", 15, 16, 0)), (1, Insert("r0", 16, 17, 0)), (1, Cti(17)),
             (0, Retract("l1", 15, 16, 17, 0)), (0, Retract("l1", 15, 17, 18, 0)),
             (0, Cti(18))]
    for policy in ("drop", "adjust"):
        imp = ImportCti(policy=policy)
        out = run_operator(lambda imp=imp: imp, pairs, seed=None)
        expected, late = reference(pairs, policy)
        assert expected == [(15, 16, 0)] and late == 2
        assert_equivalent(out, expected)
        assert len(imp.late) == 2


# -- the join of a fast stream with a one-event reference stream ----------------------------------
REF = {"t": 0, "k": 1, "id": "r", "name": "one"}


def _query(imported: bool):
    fast = Stream.from_rows([{"t": t, "k": t % 3} for t in range(0, 400, 4)], start="t",
                            advance=AdvanceTime(every=10), name="fast")
    # one edge event [0, ∞): its source's only CTI, at its end, is 1 (past its start)
    ref = Stream.from_rows([REF], start="t", end="until", shape="edge", id="id",
                           name="reference")
    if imported:
        ref = ref.import_ctis(fast, name="imported")
    return fast.join(ref, on=("k", "k"))


@pytest.mark.parametrize("imported", [False, True])
def test_import_lets_a_join_with_a_reference_stream_advance(runtime, imported):
    out = _query(imported).collect(runtime=runtime, batch_size=8)
    validate(out)
    ctis = [m.time for m in out if type(m) is Cti]
    expected = [(t, t + 1, ({"t": t, "k": t % 3}, REF)) for t in range(0, 400, 4) if t % 3 == 1]
    if imported and runtime != "inline" and out.late:
        # on Ray the two sources run in their own actors: when the fast stream's imported
        # CTI reaches the import step before the reference's event does, that event is late
        # (the import's contract: dropped, and shown as late), so nothing joins it
        assert [r.action for r in out.late] == ["dropped"]
        expected = []
    assert_equivalent(out, expected)
    # it advances with the fast stream: with the import, a CTI every 10 of its events; without,
    # once the reference has ended (it holds nothing back then, docs/ctis.md)
    assert ctis == sorted(ctis) and ctis[-1] >= 396, ctis
    if imported:
        assert len(ctis) >= 8, ctis


@pytest.mark.parametrize("imported", [False, True])
def test_import_lets_a_join_with_an_open_reference_stream_advance(imported):
    #   reference   r: [0 ─────────────── ∞)  (sent, and the stream stays open: no CTI yet)
    #   fast        100 rows, a CTI every 10
    #   join        without import: no CTI while the reference is open; with it: the fast's
    from topology.planning.dag import DagProcessor

    dag = DagProcessor(_query(imported).plan(), inline_sink=True)
    out = dag.process([REF], dag.inputs.index("reference"))
    out += dag.process([{"t": t, "k": t % 3} for t in range(0, 400, 4)],
                       dag.inputs.index("fast"))
    ctis = [m.time for m in out if type(m) is Cti]
    if imported:
        assert len(ctis) >= 8 and ctis == sorted(ctis) and ctis[-1] >= 396, ctis
    else:  # held at the open reference's CTI however far the fast stream goes
        assert ctis == [], ctis


def test_events_behind_the_imported_cti_are_late_and_counted():
    fast = Stream.from_events([Insert("f", 10, 11, 0), Cti(30)])
    slow = Stream.from_events([Insert("s", 40, 50, 1), Cti(0), Insert("late", 5, 35, 2),
                               Insert("gone", 5, 8, 3), Cti(60)])
    q = slow.import_ctis(fast, policy="adjust", name="imp")
    out = q.collect(runtime="inline", batch_size=1)
    assert_equivalent(out, [(40, 50, 1), (30, 35, 2)])
    late = q.late().collect(runtime="inline", batch_size=1)
    assert sorted((m.start, m.end, m.payload["policy"]) for m in late if type(m) is Insert) \
        == [(5, 8, "dropped"), (5, 35, "adjusted")]


@pytest.mark.parametrize(("call", "word"), [
    (lambda s: s.import_ctis([1, 2]), "leader="),
    (lambda s: s.import_ctis(s, policy="keep"), "policy="),
])
def test_bad_arguments_are_refused_when_the_query_is_built(call, word):
    with pytest.raises((TypeError, ValueError), match=f"import_ctis\\({word}"):
        call(Stream.from_events([]))


def test_the_output_is_the_reference_cht_with_no_late_events():
    pairs = [(0, Insert("a", 1, 9, "a")), (1, Cti(3)), (0, Insert("b", 4, 6, "b")),
             (0, Cti(5)), (1, Insert("x", 7, 8, "x"))]
    out = run_operator(lambda: ImportCti(), pairs)
    assert to_cht(out) == [(1, 9, "a"), (4, 6, "b")]
