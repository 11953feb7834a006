"""Root causes, differentially: for random queries over random physical streams, the cause the
debugger finds for every output must be the one the operators' definitions give.

Each query shape (span operators; hopping, tumbling, snapshot and count windows with both
output policies; join, left and anti join; union; group_apply with a window or a filter; a
window over a join) runs inline with a trace, in batches of a random size, over one or two
streams from :func:`tests.kit.physical_streams` (inserts out of order, edges, lifetime
corrections, deletions). The sink's final events are explained by
:meth:`topology.seeing.debug.Recording.root_cause` down to the source events, and compared with
:mod:`tests.reference_causes`, which computes the same query from scratch on the input CHTs
with every row carrying its causes: at every instant the same payloads must be alive for the
same source events. Every cause must also reach the sources and call itself complete.

The Hypothesis profile sets the number of examples (tests/kit.py: a few hundred in all in ``ci``).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.aggregates import Count
from operators.events import Cti, Insert, Message, Retract
from tests import reference_causes as ref
from tests.kit import HEAVY, physical_streams
from topology import Stream
from topology.seeing.debug import Recording

#: Events are cut to this duration before a window, so every window a row touches is final.
CLIP = 12


def _k(p: Any) -> Any:
    return p["k"]


def _big(p: Any) -> bool:
    return bool(p["v"] > 1)


def _double(p: Any) -> Any:
    return {**p, "w": p["v"] * 2}


Query = Callable[[Stream, Stream], Stream]
Reference = Callable[[ref.Rows, ref.Rows], ref.Rows]

#: shape -> (the query on a left and a right stream, its reference on their caused CHTs)
SHAPES: dict[str, tuple[Query, Reference]] = {
    "where_select": (
        lambda a, b: a.where(_big).select(_double),
        lambda a, b: ref.select(ref.where(a, _big), _double)),
    "tumbling": (
        lambda a, b: a.where(_big).clip_duration(CLIP).tumbling_window(5).aggregate(Count()),
        lambda a, b: ref.hopping_count(ref.clip_duration(ref.where(a, _big), CLIP), 5, 5)),
    "hopping_point_end": (
        lambda a, b: a.clip_duration(CLIP).hopping_window(6, 2, output="point_end")
        .aggregate(Count()),
        lambda a, b: ref.hopping_count(ref.clip_duration(a, CLIP), 6, 2, "point_end")),
    "snapshot": (
        lambda a, b: a.clip_duration(CLIP).snapshot_window().aggregate(Count()),
        lambda a, b: ref.snapshot_count(ref.clip_duration(a, CLIP))),
    "snapshot_point_end": (
        lambda a, b: a.clip_duration(CLIP).snapshot_window(output="point_end")
        .aggregate(Count()),
        lambda a, b: ref.snapshot_count(ref.clip_duration(a, CLIP), "point_end")),
    "count": (
        lambda a, b: a.clip_duration(CLIP).count_window(2).aggregate(Count()),
        lambda a, b: ref.count_window_count(ref.clip_duration(a, CLIP), 2)),
    "join": (
        lambda a, b: a.where(_big).join(b.select(_double), on=("k", "k")),
        lambda a, b: ref.join(ref.where(a, _big), ref.select(b, _double), _k)),
    "left_join": (
        lambda a, b: a.left_join(b, on=("k", "k")),
        lambda a, b: ref.left_join(a, b, _k)),
    "anti_join": (
        lambda a, b: a.anti_join(b.where(_big), on=("k", "k")),
        lambda a, b: ref.anti_join(a, ref.where(b, _big), _k)),
    "union_window": (
        lambda a, b: a.union(b).clip_duration(CLIP).tumbling_window(5).aggregate(Count()),
        lambda a, b: ref.hopping_count(ref.clip_duration(ref.union(a, b), CLIP), 5, 5)),
    "group_apply_window": (
        lambda a, b: a.clip_duration(CLIP).group_apply(
            _k, lambda g: g.tumbling_window(5).aggregate(Count())),
        lambda a, b: ref.group_apply(ref.clip_duration(a, CLIP), _k,
                                     lambda g: ref.hopping_count(g, 5, 5))),
    "group_apply_where": (
        lambda a, b: a.group_apply(_k, lambda g: g.where(_big)),
        lambda a, b: ref.group_apply(a, _k, lambda g: ref.where(g, _big))),
    "join_then_snapshot": (
        lambda a, b: a.join(b, on=("k", "k")).clip_duration(CLIP).snapshot_window()
        .aggregate(Count()),
        lambda a, b: ref.snapshot_count(ref.clip_duration(ref.join(a, b, _k), CLIP))),
}

#: Examples per shape: a few hundred in all by default.

PAYLOADS = st.fixed_dictionaries({"k": st.integers(0, 2), "v": st.integers(0, 4)})


def _own_payloads(stream: list[Message]) -> list[Message]:
    """Each event's payload names the event, so no two events' payloads are equal (a join's
    output then shows which pair made it), and a CTI past the end closes every window."""
    out: list[Message] = []
    for m in stream:
        if type(m) is Insert:
            out.append(Insert(m.id, m.start, m.end, {**m.payload, "id": m.id}))
        elif type(m) is Retract:
            out.append(Retract(m.id, m.start, m.end, m.new_end, {**m.payload, "id": m.id}))
        else:
            out.append(m)
    last = max([m.time for m in stream if type(m) is Cti], default=0)
    return [*out, Cti(last + 100)]


STREAMS = physical_streams(payloads=PAYLOADS, max_steps=16)


def explained(rec: Recording) -> list[tuple[int, int, str, frozenset[str]]]:
    """The sink's final events, each with the source events its root cause reaches."""
    sources = {s for s, info in rec.steps.items() if info["kind"] == "source"}
    final: dict[str, dict[str, Any]] = {}
    for r in rec.events(step="sink", direction="out"):
        if r["kind"] == "insert":
            final[r["id"]] = dict(r)
        elif r["kind"] == "retract" and r["new_end"] == r["start"]:
            del final[r["id"]]
        elif r["kind"] == "retract":
            final[r["id"]]["end"] = r["new_end"]
    out = []
    for r in final.values():
        cause = rec.root_cause("sink", r["id"])
        assert cause.complete, cause.incomplete
        assert cause.row["end"] == r["end"], "the cause explains the event as it is now"
        leaves = cause.leaves()
        assert {leaf["step"] for leaf in leaves} <= sources, cause.render()
        out.append((r["start"], r["end"], r["payload_repr"],
                    frozenset(leaf["id"] for leaf in leaves)))
    return out


def check_shape(shape: str, left: list[Message], right: list[Message], batch: int) -> None:
    query, reference = SHAPES[shape]
    left, right = _own_payloads(left), _own_payloads(right)
    path = tempfile.mkdtemp(prefix="cedar-cause-")
    try:
        q = query(Stream.from_events(left, name="left"), Stream.from_events(right, name="right"))
        q.collect(runtime="inline", trace=path, batch_size=batch)
        got = explained(Recording.open(path))
    finally:
        shutil.rmtree(path, ignore_errors=True)
    want = [(s, e, repr(p), c) for s, e, p, c in reference(ref.source(left), ref.source(right))]
    ref.assert_same_causes(got, want)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@HEAVY
@given(left=STREAMS, right=physical_streams(payloads=PAYLOADS, max_steps=16, id_prefix="r"),
       batch=st.sampled_from([1, 2, 3, 4096]))
def test_root_causes_match_the_reference(shape, left, right, batch):
    check_shape(shape, left, right, batch)
