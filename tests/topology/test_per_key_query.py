"""Per-key progress through a query (SPEC "Per-key progress"): a source with
``AdvanceTime(per_key=...)`` into ``where`` and a ``group_apply`` by the same key gives, inline
(any batching, any fusion) and on Ray (one partition or several), the windows of the rows the
source accepted (a from-scratch count here), no KeyCtis in the output; the plan says which
step finalizes by the keys' CTIs; a device behind loses nothing."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import Cti, KeyCtis
from operators.ingress import AdvanceTime
from tests.kit import ON_RAY, PROPERTY
from tests.operators.test_per_key import reference_accepted, skewed_rows
from topology import Stream
from topology.planning import rules

SIZE = 10


def _keep(r):
    return r["i"] % 5 != 4


def _query(rows, adv, emit, partitions=1, key="k"):
    return (Stream.from_rows(rows, start="t", advance=adv).where(_keep)
            .group_apply(key, lambda g: g.tumbling_window(SIZE, emit=emit).aggregate(Count()),
                         partitions=partitions))


def _expected(rows, every, delay, lag):
    counts = Counter((r["k"], r["t"] // SIZE * SIZE)
                     for r in reference_accepted(rows, every, delay, lag) if _keep(r))
    return sorted((ws, ws + SIZE, (k, n)) for (k, ws), n in counts.items())


def _check(out, expected):
    assert not any(type(m) is KeyCtis for m in out)
    ctis = [m.time for m in out if type(m) is Cti]
    assert ctis == sorted(ctis)
    assert sorted(to_cht(out)) == expected


@PROPERTY
@given(rows=skewed_rows(), every=st.integers(1, 3), delay=st.integers(0, 8),
       lag=st.one_of(st.none(), st.integers(0, 80)), batch=st.integers(1, 9),
       emit=st.sampled_from([None, "final"]),
       fuse=st.sampled_from([False, "stateless", "chains", "all"]), fast=st.booleans())
def test_inline_any_batching_gives_the_windows_of_the_accepted_rows(rows, every, delay, lag,
                                                                     batch, emit, fuse, fast):
    adv = AdvanceTime(every=every, delay=delay, per_key="k", low_watermark=lag)
    with pytest.MonkeyPatch.context() as m:
        if not fast:  # the general group_apply, not the keyed window aggregate
            m.setattr(rules, "RULES", ())
        out = _query(rows, adv, emit).collect(runtime="inline", batch_size=batch, fuse=fuse)
    _check(out, _expected(rows, every, delay, lag))


@settings(ON_RAY, derandomize=True, database=None)
@given(rows=skewed_rows(), lag=st.one_of(st.none(), st.integers(0, 80)),
       partitions=st.sampled_from([1, 2]), emit=st.sampled_from([None, "final"]))
def test_on_ray_gives_the_windows_of_the_accepted_rows(ray_session, rows, lag, partitions, emit):
    adv = AdvanceTime(every=1, delay=2, per_key="k", low_watermark=lag)
    _check(_query(rows, adv, emit, partitions).collect(), _expected(rows, 1, 2, lag))


def _meters():
    """m0 and m1 on time, m2's clock 600 ticks behind."""
    rows = []
    for t in range(0, 2000, 10):
        rows += [{"k": "m0", "t": t, "i": 0}, {"k": "m1", "t": t, "i": 0}]
        if t >= 600:
            rows.append({"k": "m2", "t": t - 600, "i": 0})
    return rows


def test_a_device_behind_loses_nothing_and_without_late_events_one_cti_gives_the_same():
    rows = _meters()
    one = _query(rows, AdvanceTime(every=1, delay=5), "final").collect(runtime="inline")
    assert {r.item["k"] for r in one.late} == {"m2"}
    per = _query(rows, AdvanceTime(every=1, delay=5, per_key="k", low_watermark=1000),
                 "final").collect(runtime="inline")
    assert not per.late
    patient = _query(rows, AdvanceTime(every=1, delay=700), "final").collect(runtime="inline")
    assert not patient.late and sorted(to_cht(per)) == sorted(to_cht(patient))


def test_the_plan_says_which_step_finalizes_by_the_keys_ctis():
    adv = AdvanceTime(every=1, per_key="k", low_watermark=100)
    same = _query([], adv, "final", key=lambda r: r["k"]).explain()
    assert "one keyed window aggregate (all groups at once) at each key's CTI" in same
    other = _query([], adv, "final", key="i").explain()
    assert "at each key's CTI" not in other and "one keyed window aggregate" in other
    # a fast path that knows only the stream's CTI gives way to the general group_apply
    sessions = Stream.from_rows([], start="t", advance=adv).group_apply(
        "k", lambda g: g.session_window(5, 50).aggregate(Count())).explain()
    assert "key [column-wise] at each key's CTI" in sessions
    assert "session aggregate" not in sessions


def test_a_fast_keys_window_is_final_on_time_on_the_fast_path_too():
    rows = [{"k": "slow", "t": 0, "i": 0}] + [{"k": "fast", "t": t, "i": 0}
                                              for t in range(0, 200, 10)]
    adv = AdvanceTime(every=1, per_key="k", low_watermark=1000)
    out = _query(rows, adv, "final").collect(runtime="inline", batch_size=len(rows))
    fast = next(i for i, m in enumerate(out) if type(m) is not Cti and m.payload[0] == "fast")
    slow = next(i for i, m in enumerate(out) if type(m) is not Cti and m.payload[0] == "slow")
    # the fast key's [0, 10) is out while the stream's CTI is the low watermark, below 0;
    # the slow key's waits for the end of input
    assert max(m.time for m in out[:fast] if type(m) is Cti) < 0 and fast < slow
    assert max(m.time for m in out[:slow] if type(m) is Cti) == -810


@pytest.mark.parametrize("key", ["k", "i"])
def test_a_step_that_is_not_keyed_by_it_sees_the_low_watermark(key):
    rows = _meters()
    adv = AdvanceTime(every=1, delay=5, per_key="k", low_watermark=1000)
    s = Stream.from_rows(rows, start="t", advance=adv)
    q = s.group_apply(key, lambda g: g.tumbling_window(100).aggregate(Count())).union(
        s.tumbling_window(100).aggregate(Count()).select(lambda n: ("all", n)))
    out = q.collect(runtime="inline")
    assert not out.late and not any(type(m) is KeyCtis for m in out)
    total = sum(n for _, _, (k, n) in to_cht(out) if k == "all")
    assert total == len(rows)


def test_through_a_select_the_key_read_of_its_output_is_the_sources_or_not():
    adv = AdvanceTime(every=1, delay=5, per_key="k", low_watermark=1000)
    rows = _meters()

    def q(fn):
        return (Stream.from_rows(rows, start="t", advance=adv).select(fn)
                .group_apply(lambda p: p[0], lambda g: g.tumbling_window(100, emit="final")
                             .aggregate(Count())))

    kept = q(lambda r: (r["k"], r["t"]))
    assert "at each key's CTI" in kept.explain()
    assert "at each key's CTI" not in q(lambda r: (r["t"], r["k"])).explain()
    out = kept.collect(runtime="inline")
    assert not out.late and sum(n for _, _, (_, n) in to_cht(out)) == len(rows)


def test_a_detect_by_the_sources_key_finalizes_each_key_at_its_own_cti():
    #   per key 'A B' within 50: fast's a@0 b@5 is a match final at fast's own CTI (6), long
    #   before the low watermark (-994) or slow's CTI passes it
    rows = [{"k": "slow", "t": 0, "v": "a"}, {"k": "fast", "t": 0, "v": "a"},
            {"k": "fast", "t": 5, "v": "b"}, {"k": "fast", "t": 60, "v": "x"}]
    define = {"A": lambda p, m: p["v"] == "a", "B": lambda p, m: p["v"] == "b"}
    adv = AdvanceTime(every=1, per_key="k", low_watermark=1000)
    q = Stream.from_rows(rows, start="t", advance=adv).detect(
        "A B", define, within=50, key="k", emit="final", measures=lambda m: len(m["B"]))
    assert "at each key's CTI" in q.explain()
    out = q.collect(runtime="inline", batch_size=len(rows) + 1)
    first = next(i for i, m in enumerate(out) if type(m) is not Cti)
    assert max(m.time for m in out[:first] if type(m) is Cti) < 0
    assert to_cht(out) == [(0, 6, 1)]
    other = Stream.from_rows(rows, start="t", advance=adv).detect(
        "A B", define, within=50, key=lambda r: r["v"])
    assert "at each key's CTI" not in other.explain()


@PROPERTY
@given(rows=skewed_rows(), lag=st.one_of(st.none(), st.integers(0, 80)),
       batch=st.integers(1, 9), emit=st.sampled_from(["speculative", "final"]))
def test_a_per_key_detect_matches_the_accepted_rows(rows, lag, batch, emit):
    from tests import reference_patterns as ref

    define = {"A": lambda p, m: p["i"] % 3 == 0, "B": lambda p, m: p["i"] % 3 == 1}
    adv = AdvanceTime(every=1, delay=3, per_key="k", low_watermark=lag)
    out = Stream.from_rows(rows, start="t", advance=adv).detect(
        "A B+", define, within=20, key="k", emit=emit, tie=lambda r: r["i"]).collect(
            runtime="inline", batch_size=batch)
    accepted = [(r["t"], r["t"] + 1, r) for r in reference_accepted(rows, 1, 3, lag)]
    expected = ref.detect(accepted, "A B+", define, 20, None, lambda r: r["k"],
                          lambda r: r["i"])
    assert sorted(map(repr, to_cht(out))) == sorted(map(repr, expected))


def test_late_rows_go_to_the_late_stream_and_a_restored_query_goes_on():
    from topology.planning.dag import DagProcessor

    rows = _meters() + [{"k": "m2", "t": 0, "i": 0}]  # m2's 0 again: behind its own CTI
    adv = AdvanceTime(every=1, delay=5, per_key="k", low_watermark=1000)
    s = Stream.from_rows(rows, start="t", advance=adv)
    late = s.late().collect(runtime="inline")
    assert [m.payload["payload"] for m in late if type(m) is not Cti] == [rows[-1]]
    assert "of key 'm2'" in late[0].payload["reason"]
    # checkpointed half-way, restored into fresh operators: the same output
    plan = _query(rows, adv, "final").plan()
    whole = DagProcessor(plan, inline_sink=True)
    expected = whole.process(rows, 0) + whole.finish()
    first = DagProcessor(plan, inline_sink=True)
    out = first.process(rows[:300], 0)
    again = DagProcessor(plan, inline_sink=True)
    again.restore(first.snapshot())
    out += again.process(rows[300:], 0) + again.finish()
    assert sorted(to_cht(out)) == sorted(to_cht(expected)) and to_cht(out)
