"""The fusion levels (issue #25, #26 item 4): which steps run in one stage at each level
(``False``, ``True``/``"stateless"``, ``"chains"``, ``"all"``), and that a fused query has the
CHT of the unfused one — inline and on Ray, over random streams from the kit, every operator
of the differential suite fused with its source against its reference, and a fused stage
checkpointed and restored mid-stream (its members' state inside its snapshot). What a fused
stage reports (dead letters, late events, row accounting, stats, why) is that of its steps.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count, Sum
from operators.chain import Chain, SourceChain
from operators.cht import to_cht, validate
from operators.events import MAX_TIME, Cti, Insert
from tests.kit import ON_RAY, assert_equivalent, physical_streams
from tests.topology.test_differential import CASES, _inputs, _reference_reads_streams
from topology import Stream
from topology.planning.fused import FusedDag

LEVELS = [False, True, "chains", "all"]


# -- query shapes over one source -------------------------------------------------------------
def _linear(s: Stream) -> Stream:
    """source → where → window → select: one chain at "chains"."""
    return (s.where(lambda p: p % 2 == 0).tumbling_window(10).aggregate(Count())
            .select(lambda c: c * 10))


def _diamond(s: Stream) -> Stream:
    """Two branches of one source met by a union, then a window: one part at "all"."""
    return (s.where(lambda p: p > 1).union(s.select(lambda p: p + 10))
            .hopping_window(10, 5).aggregate(Sum()))


def _self_join(s: Stream) -> Stream:
    return s.join(s.shift(3).where(lambda p: p != 2), on=(lambda p: p % 3, lambda p: p % 3),
                  select=lambda a, b: (a, b))


def _partitioned(s: Stream) -> Stream:
    """Partitions apart: at "all" the partitions feed one part (their merge and the select)
    through two input ports."""
    return (s.where(lambda p: p > 0)
            .group_apply(lambda p: p % 3, lambda g: g.tumbling_window(10).aggregate(Count()),
                         partitions=2)
            .select(str))


SHAPES = {"linear": _linear, "diamond": _diamond, "self_join": _self_join,
          "partitioned": _partitioned}


def _events() -> Stream:
    return Stream.from_events([], name="src")


# -- which steps fuse -----------------------------------------------------------------------------
def test_the_stages_of_each_level():
    def stages(shape, fuse):
        return list(SHAPES[shape](_events()).plan(fuse).stages)

    assert stages("linear", False) == ["src", "where#1", "tumbling.aggregate#2", "select#3",
                                       "sink"]
    assert stages("linear", True) == ["src+where#1", "tumbling.aggregate#2", "select#3", "sink"]
    assert stages("linear", "stateless") == stages("linear", True)
    assert stages("linear", "chains") == ["src+where#1+tumbling.aggregate#2+select#3", "sink"]
    assert stages("linear", "all") == stages("linear", "chains")
    # a source feeding two steps: no chain takes it; "all" runs the whole diamond as one
    assert stages("diamond", "chains") == ["src", "where#1", "select#2", "union#3",
                                           "hopping.aggregate#4", "sink"]
    assert stages("diamond", "all") == ["src+where#1+select#2+union#3+hopping.aggregate#4",
                                        "sink"]
    assert stages("self_join", "all") == ["src+shift#1+where#2+join#3", "sink"]
    # the partitions keep their parallelism: the part after them takes their merge
    assert stages("partitioned", "chains") == [
        "src+where#1", "group_apply#2[0]", "group_apply#2[1]", "group_apply#2", "select#3",
        "sink"]
    assert stages("partitioned", "all") == [
        "src+where#1", "group_apply#2[0]", "group_apply#2[1]", "group_apply#2+select#3",
        "sink"]


def test_what_a_fused_stage_is():
    p = _diamond(_events()).plan("all")
    (sid, stage), _sink = p.stages.items()
    assert p.sources == [sid] and stage.role == "source" and stage.n_inputs == 1
    assert stage.source is not None and stage.source.verb == "from_events"  # fed as before
    assert [nd.verb for nd in stage.nodes] == ["from_events", "where", "select", "union",
                                               "window"]
    assert stage.describe.startswith("one process: ")
    assert p.edges[sid][0].dst == "sink"
    proc = stage.factory()
    assert isinstance(proc, FusedDag) and set(proc.procs) == {
        "src", "where#1", "select#2", "union#3", "hopping.aggregate#4"}
    # its trace metadata names the steps inside it
    info = stage.trace_info()
    assert info["kind"] == "source" and len(info["members"]) == len(stage.nodes)
    assert "one process" in _diamond(_events()).explain(fuse="all")

    q = _partitioned(_events()).plan("all")
    part = q.stages["group_apply#2+select#3"]
    assert part.role == "operator" and part.n_inputs == 2
    assert [(e.dst, e.port) for e in q.edges["group_apply#2[1]"]] == [
        ("group_apply#2+select#3", 1)]
    assert [(e.dst, e.port) for e in q.edges["group_apply#2[0]"]] == [
        ("group_apply#2+select#3", 0)]

    chain = _linear(_events()).plan("chains").stages
    assert isinstance(chain["src+where#1+tumbling.aggregate#2+select#3"].factory(),
                      SourceChain)
    assert not chain["src+where#1+tumbling.aggregate#2+select#3"].stateless


def test_a_group_apply_sub_query_stays_a_plain_chain():
    """group_apply takes the dead letters of each step of its sub-query itself; a chain that
    also reported them all would count them twice."""
    from topology.planning.planner import subquery_factory

    q = _events().group_apply(lambda p: p, lambda g: g.where(bool).shift(1))

    sub = subquery_factory(q._node.sub, "g")()
    assert type(sub) is Chain


@pytest.mark.parametrize("fuse", ["deep", 2, None, "ALL"])
def test_a_bad_level_is_refused_naming_the_choices(fuse):
    for call in (lambda: _events().plan(fuse), lambda: _events().explain(fuse=fuse),
                 lambda: _events().deploy("q", fuse=fuse)):
        with pytest.raises((TypeError, ValueError), match=r"fuse=.*'chains'.*'all'"):
            call()
    if fuse is not None:  # collect's default is None (the runtime chooses)
        with pytest.raises((TypeError, ValueError), match=r"collect\(fuse="):
            _events().collect(fuse=fuse)


# -- the same CHT ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", sorted(SHAPES))
@ON_RAY
@given(msgs=physical_streams(), batch=st.sampled_from([1, 3, 64]))
def test_inline_every_level_has_the_unfused_cht(shape, msgs, batch):
    query = SHAPES[shape](Stream.from_events(msgs, name="src"))
    expected = query.collect(runtime="inline", fuse=False, batch_size=batch)
    for fuse in LEVELS[1:]:
        out = query.collect(runtime="inline", fuse=fuse, batch_size=batch)
        validate(out, name=f"{shape} fused {fuse!r}")
        assert_equivalent(out, expected)


@pytest.mark.parametrize("case", sorted(CASES))
@ON_RAY
@given(data=st.data())
def test_every_operator_fused_with_its_sources_matches_its_reference(case, data):
    """The differential suite's cases (one operator over its sources each), at "chains"
    (a single-input operator runs in its source's stage) and "all"."""
    mod, _, reference, query_fn = CASES[case]
    streams = data.draw(_inputs(case), label="inputs")
    query = query_fn(*[Stream.from_events(s) for s in streams])
    expected = (reference(*streams) if _reference_reads_streams(mod, reference)
                else reference(*[to_cht(s) for s in streams]))
    for fuse in ("chains", "all"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # cases with dead letters on purpose
            out = query.collect(runtime="inline", fuse=fuse, batch_size=3)
        validate(out, name=f"{case} fused {fuse!r}")
        assert_equivalent(out, expected)


def _random_stream() -> list[Any]:
    """A random stream of the kit with at least five inserts (not Hypothesis' simplest)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # .example() outside @given: random on purpose
        while True:
            msgs = physical_streams(max_steps=60).example()
            if sum(type(m) is Insert for m in msgs) >= 5:
                return msgs


@pytest.mark.ray
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_on_ray_every_level_has_the_inline_cht(ray_session, shape):
    for _ in range(2):
        query = SHAPES[shape](Stream.from_events(_random_stream(), name="src"))
        expected = query.collect(runtime="inline", fuse=False)
        for fuse in (False, "chains", "all"):
            out = query.collect(fuse=fuse, batch_size=4)
            validate(out, name=f"{shape} on Ray fused {fuse!r}")
            assert_equivalent(out, expected)


# -- checkpoints of a fused stage -----------------------------------------------------------------
def _run_restored(stage_factory: Any, msgs: list[Any], restore_at: int, seed: int) -> list[Any]:
    """Feed ``msgs`` to a fused source stage in random batches; after message ``restore_at``
    snapshot it, build a new one, restore it and go on; then finish."""
    rng = random.Random(seed)
    proc = stage_factory()
    out: list[Any] = []
    i, restored = 0, False
    while i < len(msgs):
        if not restored and i >= restore_at:
            state = proc.snapshot()
            proc = stage_factory()
            proc.restore(state)
            restored = True
        n = rng.choice((1, 2, 5))
        out.extend(proc.process(msgs[i:i + n], 0))
        proc._check()
        i += n
    out.extend(proc.finish())
    return out


@pytest.mark.parametrize(("fuse", "shape"), [("chains", "linear"), ("all", "linear"),
                                             ("all", "diamond"), ("all", "self_join")])
@ON_RAY
@given(msgs=physical_streams(max_steps=40), at=st.floats(0, 1), seed=st.integers(0, 9))
def test_a_fused_stage_restored_mid_stream_goes_on_as_if_never_stopped(fuse, shape, msgs, at,
                                                                     seed):
    p = SHAPES[shape](Stream.from_events(msgs, name="src")).plan(fuse)
    (_sid, stage), _sink = p.stages.items()  # the whole query is one source stage
    assert stage.role == "source" and len(stage.nodes) > 2
    out = _run_restored(stage.factory, msgs, int(at * len(msgs)), seed)
    expected = SHAPES[shape](Stream.from_events(msgs, name="src")).collect(runtime="inline")
    validate(out, name=f"{shape} fused {fuse!r}, restored at {at:.2f}")
    assert_equivalent(out, expected)


# -- what a fused stage reports -------------------------------------------------------------------
def _dead_letter_query() -> Stream:
    """Two of the three events start past the time axis after alter_lifetime: dead letters of
    the alter_lifetime step, whichever stage runs it."""
    msgs = [Insert("a", 5, 6, 1), Insert("b", 7, 8, 2), Insert("c", 9, 10, 3), Cti(20)]
    return (Stream.from_events(msgs).where(lambda p: p > 0)
            .alter_lifetime(start=lambda s: s if s < 7 else MAX_TIME)
            .tumbling_window(10).aggregate(Count()))


@pytest.mark.parametrize("fuse", LEVELS)
def test_inline_a_fused_stage_reports_the_dead_letters_of_every_step(fuse):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _dead_letter_query().collect(runtime="inline", fuse=fuse)
    assert sorted(d.item.id for d in out.dead_letters) == ["b", "c"]
    assert to_cht(out) == [(0, 10, 1)]


@pytest.mark.ray
def test_a_deployed_fused_query_names_its_steps_and_reports_them(ray_session, tmp_path):
    query = _diamond(Stream.from_events(_random_stream(), name="src"))
    expected = query.collect(runtime="inline")
    live = query.deploy("fused-all", fuse="all", checkpoint_dir=str(tmp_path))
    try:
        assert live.wait(60)
        assert_equivalent(live.output(), expected)
        sid = "src+where#1+select#2+union#3+hopping.aggregate#4"
        assert live.steps == [sid, "sink"]
        stats = live.stats()
        assert stats[sid]["finished"] and stats[sid]["error"] is None
        assert "one process" in live.explain()
        assert str(live.why()) != ""
        pids = {stats[s]["pid"] for s in live.steps}
        assert len(pids) == 2  # two actors for six steps
    finally:
        live.stop()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _dead_letter_query().collect(fuse="all")
    assert sorted(d.item.id for d in out.dead_letters) == ["b", "c"]


@pytest.mark.parametrize("fuse", ["chains", "all"])
def test_a_trace_of_a_fused_query_shows_the_fused_stage_with_its_steps(tmp_path, fuse):
    from topology import Trace

    rows = [{"k": t % 3, "t": t} for t in range(40)]
    query = (Stream.from_rows(rows, start="t", name="src").where(lambda r: r["k"] > 0)
             .tumbling_window(10).aggregate(Count()))
    path = str(tmp_path / "trace")
    out = query.collect(runtime="inline", trace=path, fuse=fuse)
    rec = Trace.open(path)
    sid = "src+where#1+tumbling.aggregate#2"
    assert set(rec.steps) == {sid, "sink"}
    info = rec.steps[sid]
    assert info["kind"] == "source"
    assert [m["kind"] for m in info["members"]] == ["source", "span", "window"]
    sent = [r for r in rec.by_step[sid] if r["direction"] == "out"]
    assert len([r for r in sent if r["kind"] == "insert"]) == len(to_cht(out)) > 0
