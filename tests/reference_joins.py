"""From-scratch reference evaluators of the multi-input and partitioned operators, on CHTs.

Each function takes CHT rows ``(start, end, payload)`` (see :func:`operators.cht.to_cht`) and
returns the CHT the operator must produce, by the definition applied literally: no indexes, no
incremental state, no code shared with ``operators/``.

Also here: :func:`assert_snapshot_equivalent` (streams that agree at every instant, however
their events are cut into pieces) and :func:`two_inputs`, the Hypothesis strategy that draws a
left and a right physical stream and interleaves them into ``(port, message)`` pairs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from itertools import pairwise
from typing import Any

from hypothesis import strategies as st

from operators.cht import freeze, to_cht
from operators.events import Cti, Insert, Message, Retract, fmt_time
from tests.kit import physical_streams

Rows = list[tuple[int, int, Any]]


def _getter(key: Any) -> Callable[[Any], Any]:
    if key is None:
        return lambda p: p
    if callable(key):
        return key
    return lambda p: p[key] if isinstance(p, dict) else getattr(p, key)


def _keys(on: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    if on is None:
        return (lambda p: None), (lambda p: None)
    return _getter(on[0]), _getter(on[1])


def join(left: Rows, right: Rows, on: Any = None,
         select: Callable[[Any, Any], Any] | None = None) -> Rows:
    """Every pair with equal keys and overlapping lifetimes, over the intersection."""
    lk, rk = _keys(on)
    out = []
    for ls, le, lp in left:
        for rs, re, rp in right:
            if lk(lp) == rk(rp) and max(ls, rs) < min(le, re):
                out.append((max(ls, rs), min(le, re), select(lp, rp) if select else (lp, rp)))
    return out


def subtract(start: int, end: int, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end)`` minus the union of ``holes``, as maximal intervals."""
    pieces = []
    t = start
    for hs, he in sorted(holes):
        if he <= t:
            continue
        if hs >= end:
            break
        if hs > t:
            pieces.append((t, hs))
        t = max(t, he)
    if t < end:
        pieces.append((t, end))
    return pieces


def anti_join(left: Rows, right: Rows, on: Any = None) -> Rows:
    """For every left row, the parts of its lifetime where no matching right row is alive."""
    lk, rk = _keys(on)
    out = []
    for ls, le, lp in left:
        holes = [(rs, re) for rs, re, rp in right if rk(rp) == lk(lp)]
        out.extend((s, e, lp) for s, e in subtract(ls, le, holes))
    return out


def left_join(left: Rows, right: Rows, on: Any = None,
              select: Callable[[Any, Any], Any] | None = None, default: Any = None) -> Rows:
    """The join, plus ``select(l, default)`` (or ``(l, default)``) where a left row has no
    match."""
    fn = select or (lambda a, b: (a, b))
    unmatched = [(s, e, fn(p, default)) for s, e, p in anti_join(left, right, on)]
    return join(left, right, on, fn) + unmatched


def full_outer_join(left: Rows, right: Rows, on: Any = None,
                    select: Callable[[Any, Any], Any] | None = None) -> Rows:
    """The join, plus ``select(l, None)`` where a left row has no match and ``select(None,
    r)`` where a right row has none (the tuples ``(l, None)`` / ``(None, r)`` by default)."""
    fn = select or (lambda a, b: (a, b))
    swapped = None if on is None else (on[1], on[0])
    return (join(left, right, on, fn)
            + [(s, e, fn(p, None)) for s, e, p in anti_join(left, right, on)]
            + [(s, e, fn(None, p)) for s, e, p in anti_join(right, left, swapped)])


def union(*inputs: Rows) -> Rows:
    """All rows of all inputs."""
    return [row for rows in inputs for row in rows]


def group_apply(rows: Rows, key: Callable[[Any], Hashable],
                sub: Callable[[Rows], Rows]) -> Rows:
    """Partition the rows by ``key``, apply the sub-query's reference to each part and tag
    every output payload with its key."""
    groups: dict[Hashable, Rows] = {}
    for s, e, p in rows:
        groups.setdefault(key(p), []).append((s, e, p))
    return [(s, e, (k, p)) for k, part in groups.items() for s, e, p in sub(part)]


# -- snapshot equivalence ---------------------------------------------------------------------
def _rows(stream: Sequence[Any]) -> Rows:
    if stream and isinstance(stream[0], (Insert, Retract, Cti)):
        return to_cht(stream)
    return [tuple(r) for r in stream if not isinstance(r, Cti)]  # type: ignore[misc]


def snapshots(stream: Sequence[Any]) -> list[tuple[int, int, Counter[Any]]]:
    """The stream as a timeline: ``(from, to, multiset of alive payloads)`` for every stretch
    between consecutive endpoints where something is alive."""
    rows = _rows(stream)
    points = sorted({t for s, e, _ in rows for t in (s, e)})
    out = []
    for a, b in pairwise(points):
        alive = Counter(freeze(p) for s, e, p in rows if s <= a and b <= e)
        if alive:
            out.append((a, b, alive))
    return out


def assert_snapshot_equivalent(actual: Sequence[Any], expected: Sequence[Any]) -> None:
    """Assert that at every time point the multisets of alive payloads are equal (the events
    may be cut into differently many pieces). Accepts messages or CHT rows on either side."""
    a, e = snapshots(actual), snapshots(expected)
    points = sorted({t for x in (a, e) for s, t2, _ in x for t in (s, t2)})

    def at(timeline: list[tuple[int, int, Counter[Any]]], t: int) -> Counter[Any]:
        for s, t2, alive in timeline:
            if s <= t < t2:
                return alive
        return Counter()

    for t in points:
        got, want = at(a, t), at(e, t)
        if got != want:
            raise AssertionError(
                f"not snapshot-equivalent at time {fmt_time(t)}: alive in actual "
                f"{sorted(got.elements(), key=repr)}, expected "
                f"{sorted(want.elements(), key=repr)}"
            )


# -- two-input streams ----------------------------------------------------------------------
_SMALL_INTS = st.integers(0, 5)


@st.composite
def two_inputs(draw: Any, payloads: st.SearchStrategy[Any] = _SMALL_INTS,
               max_steps: int = 20, edges: bool = True) -> tuple[list[tuple[int, Message]],
                                                                 list[Message], list[Message]]:
    """``(pairs, left, right)``: a left (ids ``l…``) and a right (ids ``r…``) physical stream
    and a random interleaving of the two as ``(port, message)`` pairs (each input keeps its
    order)."""
    left = draw(physical_streams(payloads=payloads, max_steps=max_steps, edges=edges,
                                 id_prefix="l"))
    right = draw(physical_streams(payloads=payloads, max_steps=max_steps, edges=edges,
                                  id_prefix="r"))
    order = draw(st.permutations([0] * len(left) + [1] * len(right)))
    it = (iter(left), iter(right))
    return [(p, next(it[p])) for p in order], left, right


def final_cti(messages: Sequence[Message]) -> int | None:
    """The last CTI of a stream, if any."""
    for msg in reversed(messages):
        if type(msg) is Cti:
            return msg.time
    return None
