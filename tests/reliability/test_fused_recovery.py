"""Checkpoints and recovery of fused stateful stages on a real local Ray: the actor that runs a
source with its keyed window (``fuse="chains"``) or a whole query part (``fuse="all"``, a
:class:`topology.planning.fused.FusedDag`) dies mid-stream; the query restarts from its last
complete checkpoint (which holds the state of every step inside the stage) and ends with the
fault-free run's CHT, no output row emitted twice."""

from __future__ import annotations

import pytest

from tests.reliability.test_recovery import (
    check_exactly_once,
    readings,
    run_with_kill,
    window_join,
)
from topology import Stream

pytestmark = pytest.mark.ray


def _counts_joined_with_big_readings(n: int) -> Stream:
    """readings ─┬─ group_apply(tumbling(300) count per key) ─ select ─┐
                 └─ where(v > 8) ────────────────────────────────────── join on k ── sink
    One part with its source: one actor at fuse="all"."""
    src = Stream.from_events(readings(n))
    counts = src.group_apply(
        lambda p: p["k"],
        lambda g: g.tumbling_window(300).aggregate(lambda ps: {"k": ps[0]["k"], "n": len(ps)})
    ).select(lambda kp: kp[1])
    big = src.where(lambda p: p["v"] > 8)
    return counts.join(big, on=("k", "k"), select=lambda a, b: (a["k"], a["n"], b["v"]))


@pytest.mark.slow
def test_a_killed_source_chain_with_its_window_recovers_same_cht(ray_session, tmp_path):
    expected = window_join(20_000).collect(runtime="inline")
    query = window_join(20_000)
    fused = "from_events#0+group_apply#1+select#2"
    assert fused in query.plan("chains").stages
    out, stats, recs = run_with_kill("rec-fused-chain", query, tmp_path, "ray", fused, 8_000,
                                     epoch=1, fuse="chains")
    check_exactly_once(out, expected)
    assert len(recs) == 1
    assert stats[fused]["restored_from"] >= 1


def test_a_killed_fused_part_recovers_same_cht(ray_session, tmp_path):
    query = _counts_joined_with_big_readings(20_000)
    expected = query.collect(runtime="inline")
    assert len(expected) > 100
    (part, _sink) = query.plan("all").stages
    assert part == "from_events#0+group_apply#1+select#2+where#3+join#4"
    out, stats, recs = run_with_kill("rec-fused-all", query, tmp_path, "sigkill", part, 8_000,
                                     epoch=1, fuse="all")
    check_exactly_once(out, expected)
    assert len(recs) == 1
    assert stats[part]["restored_from"] >= 1
