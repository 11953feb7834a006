"""How the keyed window paths see a column batch: its key column coded as ints
(:func:`named_codes`), its rows grouped by (window number, key) with numpy -- as ranges of one
ordering when every window is a run of whole panes (:func:`pane_ranges`), or with a copy of a row
per window (:func:`window_groups`) -- and results that are plain numbers as output columns
(:func:`number_columns`). :mod:`operators.windows.keyed` and the keyed session and count paths
share them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..columns import Columns, concat, rows_as_columns
from ..events import Cti, Insert, KeyCtis, Message
from ..group_apply import group_key
from .index import Grid

__all__ = [
    "SAFE",
    "group_order",
    "inserts_as_columns",
    "merged_batch",
    "named_codes",
    "number_column",
    "number_columns",
    "pane_ranges",
    "retraction_error",
    "stable_order",
    "window_groups",
]

#: Starts within ±2**61 ticks keep the window arithmetic inside int64 (else: Python ints).
SAFE = 2**61


def number_column(values: list[Any]) -> np.ndarray | None:
    """``values`` as an int64 or float64 column holding exactly them (``tolist()`` gives them
    back), or None (other types, mixed types, ints beyond int64)."""
    kinds = {type(v) for v in values}
    # (np.fromiter: 2.5x faster than np.array on a list of Python numbers)
    if kinds == {int}:
        try:
            return np.fromiter(values, dtype=np.int64, count=len(values))
        except OverflowError:
            return None
    if kinds == {float}:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    return None


def number_columns(keys: list[Any], results: list[Any], keyed: bool) -> Any:
    """The payload columns of final rows ``(key, result)`` (or ``result``) when keys and
    results are plain numbers (``results`` may be their column already), else None (the rows
    go out as ``Insert`` messages)."""
    res = results if isinstance(results, np.ndarray) else number_column(results)
    if res is None or not keyed:
        return res
    ks = number_column(keys)
    if ks is None or ks.dtype.kind != "i":  # (a float key may be the one NaN group key)
        return None
    return ks, res


def group_order(ns: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The permutation sorting by (window number, key), stable (arrival order within a
    group): one stable argsort of a combined int64 key when the keys are small integers,
    else a lexsort."""
    if ks.dtype.kind in "iub" and len(ks):
        k0, k1 = int(ks.min()), int(ks.max())
        n0, n1 = int(ns.min()), int(ns.max())
        span = k1 - k0 + 1
        size = (n1 - n0 + 1) * span
        if size < 2**62:
            return stable_order((ns - n0) * span + (ks.astype(np.int64) - k0), size)
    return np.lexsort((np.arange(len(ks)), ks, ns))


def stable_order(codes: np.ndarray, size: int) -> np.ndarray:
    """The stable argsort of ``codes`` (ints in ``[0, size)``). numpy's stable sort of 16-bit
    ints is a radix sort, O(n): codes below 2**32 are sorted as two 16-bit digits, the low
    one first (a least-significant-digit radix sort), 2.5x faster than a stable sort of the
    int64 codes (Q5's 260k (auction, pane) codes a batch).

    >>> stable_order(np.array([70000, 5, 65541, 5, 0]), 2**17).tolist()
    [4, 1, 3, 2, 0]
    """
    if size <= 2**16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    if size <= 2**32:
        low = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
        high = (codes[low] >> 16).astype(np.uint16)
        return low[np.argsort(high, kind="stable")]
    return np.argsort(codes, kind="stable")


def _codes(keys: np.ndarray) -> tuple[list[Any], np.ndarray] | None:
    """Keys that are not numbers (strings, objects) as int codes: the distinct keys, in order
    of first appearance, and each row's code. Keys are told apart as a dict tells them (the
    first of equal keys names the group, as on the per-event path); None for an unhashable
    key (the per-event path then reports it).

    >>> names, codes = _codes(np.array(["b", "a", "b"], dtype=object))
    >>> names, codes.tolist()
    (['b', 'a'], [0, 1, 0])
    >>> names, codes = _codes(np.array([float("nan"), "a", float("nan")], dtype=object))
    >>> names, codes.tolist()
    ([nan, 'a'], [0, 1, 0])
    """
    index: dict[Any, int] = {}
    code = index.setdefault
    try:
        codes = np.array([code(k, len(index)) for k in keys.tolist()], dtype=np.int64)
    except TypeError:
        return None
    names = list(index)
    canonical = [group_key(k) for k in names]  # once per distinct key, not per row
    if any(c is not k for c, k in zip(canonical, names)):  # NaN keys: one group
        merged: dict[Any, int] = {}
        remap = np.array([merged.setdefault(c, len(merged)) for c in canonical],
                         dtype=np.int64)
        return list(merged), remap[codes]
    return names, codes


def _float_codes(keys: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """Float keys holding NaN as int codes, as :func:`_codes` gives them: every NaN is one
    group (:func:`~operators.group_apply.group_key`), and the first of equal keys names the
    group.

    >>> names, codes = _float_codes(np.array([np.nan, 1.5, np.nan]))
    >>> names, codes.tolist()
    ([nan, 1.5], [0, 1, 0])
    """
    # np.unique puts every NaN in one group (equal_nan); ``first`` is each group's first row
    _, first, which = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # groups in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    names = [group_key(k) for k in keys[first[order]].tolist()]
    return names, rank[which.reshape(-1)].astype(np.int64, copy=False)


def named_codes(keys: Any) -> tuple[list[Any], np.ndarray] | None:
    """A batch's key column as the distinct keys and each row's int code where the keys are
    not plain numbers — strings and other objects (:func:`_codes`), or floats holding NaN,
    which are one group as on the per-event path (:func:`_float_codes`) — else None (the
    column's numbers are the codes themselves, or the keys are not a column)."""
    if not isinstance(keys, np.ndarray):
        return None
    if keys.dtype.kind in "OUS":
        return _codes(keys)
    if keys.dtype.kind == "f" and np.isnan(keys).any():
        return _float_codes(keys)
    return None


def pane_ranges(grid: Grid, starts: np.ndarray, keys: np.ndarray, by_start: bool = False
                ) -> tuple[list[int], list[Any], np.ndarray, list[int], list[int]] | None:
    """The (window number, key) groups of a batch as ranges of one ordering of its rows.

    The time axis is cut into panes of ``gcd(size, hop)`` ticks, so that every window is
    a run of whole panes; rows sorted by (key, pane), arrival order within a pane, put
    each (window, key) group in consecutive rows: group ``j`` is rows ``lo[j]:hi[j]`` of
    ``rows`` (an event of several hopping windows lies in several ranges, never copied).
    Returns the groups' window numbers and keys (sorted by window, then key), ``rows``,
    ``lo`` and ``hi``; None when the keys or panes span too much to code in an int64.
    ``by_start``: rows sorted by (key, start), arrival order within equal starts (a
    pane's rows in time order, as a non-incremental UDM is given them)."""
    g = grid
    pane = math.gcd(g.size, g.hop)
    h, z = g.hop // pane, g.size // pane
    if keys.dtype.kind in "iub":
        as_int = keys.astype(np.int64, copy=False)
        k0 = int(as_int.min())
        if int(as_int.max()) - k0 >= 2**40:
            return None
        codes = as_int - k0
    else:  # floats (no NaN here): code them by rank
        _, codes = np.unique(keys, return_inverse=True)
        codes = codes.reshape(-1).astype(np.int64, copy=False)
    span_k = int(codes.max()) + 1
    panes = (starts - g.alignment) // pane
    j0 = int(panes.min())
    span_j = int(panes.max()) - j0 + 1
    if span_k * span_j >= 2**61:
        return None
    combined = codes * span_j + (panes - j0)
    size = span_k * span_j
    # by_start: (key, start) order is (key, pane) order too, panes grow with starts (stable)
    order = np.lexsort((starts, codes)) if by_start else stable_order(combined, size)
    combined = combined[order]
    first = np.flatnonzero(np.r_[True, combined[1:] != combined[:-1]])
    group_code, group_pane = np.divmod(combined[first], span_j)
    group_pane += j0
    # pane j lies in the windows n with n·h <= j < n·h + z
    last_n = group_pane // h
    first_n = (group_pane - z) // h + 1
    width = int((last_n - first_n).max()) + 1
    if width <= 0:  # every row in a gap between windows (size < hop)
        return [], [], order, [], []
    ns = (last_n[:, None] - np.arange(width)[None, :]).ravel()
    cs = np.repeat(group_code, width)
    keep = ns >= np.repeat(first_n, width)
    ns, cs = ns[keep], cs[keep]
    if not len(ns):
        return [], [], order, [], []
    n0 = int(ns.min())
    span_n = int(ns.max()) - n0 + 1
    if span_n * span_k >= 2**62:
        return None
    codes_nk = (ns - n0) * span_k + cs
    if span_n * span_k <= 4 * len(codes_nk) + 4096:
        # one mark per (window, key) code instead of a sort: a batch's windows and keys
        # are dense (Q5's auctions: np.unique was a fifth of the query)
        mark = np.zeros(span_n * span_k, dtype=bool)
        mark[codes_nk] = True
        groups = np.flatnonzero(mark)  # sorted by window, then key
    else:
        groups = np.unique(codes_nk)
    ns, cs = np.divmod(groups, span_k)
    ns += n0
    # window n's panes n·h .. n·h + z - 1 of key c, clipped to the panes of the batch
    base = cs * span_j
    lo = np.searchsorted(combined, base + np.clip(ns * h - j0, 0, span_j), "left")
    hi = np.searchsorted(combined, base + np.clip(ns * h + z - j0, 0, span_j), "left")
    group_keys = keys[order[lo]].tolist()
    return ns.tolist(), group_keys, order, lo.tolist(), hi.tolist()


def window_groups(grid: Grid, starts: np.ndarray, keys: np.ndarray, ends: np.ndarray | None
                  ) -> tuple[list[int], list[Any], np.ndarray, list[int]]:
    """The (window number, key) groups of a batch of points (``ends`` None) or intervals:
    their window numbers and keys, the batch rows sorted by group (arrival order within a
    group; an event of several windows appears once per window) and the group bounds in
    that order."""
    g = grid
    last = starts if ends is None else ends - 1
    hi = (last - g.alignment) // g.hop  # the last window starting at or before e - 1
    lo = (starts - g.alignment - g.size) // g.hop + 1  # the first ending after s
    counts = np.maximum(hi - lo + 1, 0)  # none: in a gap between windows (size < hop)
    total = int(counts.sum())
    if not total:
        return [], [], np.empty(0, dtype=np.int64), [0]
    # each event in counts[i] windows: hi, hi - 1, ..., lo
    idx = np.repeat(np.arange(len(starts)), counts)
    ns = hi[idx] - (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))
    ks = keys[idx]
    order = group_order(ns, ks)
    ns, ks, idx = ns[order], ks[order], idx[order]
    first = np.flatnonzero(np.r_[True, (ns[1:] != ns[:-1]) | (ks[1:] != ks[:-1])])
    return (ns[first].tolist(), ks[first].tolist(), idx,
            [*first.tolist(), len(ns)])


def retraction_error(msg: Any, operator: str) -> ValueError:
    """The error of a retraction reaching ``operator``, a keyed fast path that takes inserts
    only: the planner chose it for a source that never retracts, so it is a bug."""
    return ValueError(
        f"a retraction ({msg!r}) reached the {operator}, which takes only inserts; the planner "
        f"chose it for a source that never retracts, so this is a bug: report it")


#: A run of at least this many inserts in a batch goes to the column path as one batch
#: (:func:`inserts_as_columns`).
RUN_AS_COLUMNS = 32


def inserts_as_columns(msgs: list[Message], cti: int) -> list[Message] | None:
    """``msgs`` with each run of :data:`RUN_AS_COLUMNS` or more consecutive inserts that
    start at or after the CTIs before them (``cti``: the input CTI so far) as one
    :class:`~operators.columns.Columns` of the same events, in order; None when there is no
    such run. An operator's rows from a step that works per event (a select the tracer cannot
    follow: Nexmark Q4's winning bids) then take its column path, one UDM call per group and
    batch instead of one per event. A run with an event behind a CTI stays as it is, so that
    the per-event path names that event."""
    out: list[Message] = []
    run: list[Insert] = []
    changed = False

    def flush() -> None:
        nonlocal changed
        if len(run) >= RUN_AS_COLUMNS and min(m[1] for m in run) >= cti:
            ids, starts, ends, payloads = zip(*run)
            start = np.fromiter(starts, dtype=np.int64, count=len(run))
            end = np.fromiter(ends, dtype=np.int64, count=len(run))
            column = np.fromiter(ids, dtype=object, count=len(run))
            out.append(Columns(column, start, None if (end - start == 1).all() else end,
                               rows_as_columns(list(payloads))))  # type: ignore[arg-type]
            changed = True
        else:
            out.extend(run)
        run.clear()

    for msg in msgs:
        kind = type(msg)
        if kind is Insert:
            run.append(msg)  # type: ignore[arg-type]
            continue
        flush()
        if kind is Cti:
            cti = max(cti, msg.time)  # type: ignore[union-attr]
        out.append(msg)
    flush()
    return out if changed else None


def merged_batch(msgs: list[Message], cti: int, key_ctis: bool = False
                 ) -> list[Message] | None:
    """A batch of Columns and CTIs as one Columns of all its events, then its CTIs, when
    every event starts at or after the CTIs before it (``cti``: the input CTI so far): an
    event after a CTI is too late for the windows that CTI closes, so the events can be added
    at once, before the CTIs (one UDM call per group, not per group and CTI). With
    ``key_ctis`` the batch's :class:`~operators.events.KeyCtis` go with its CTIs, in order:
    an event after a key's CTI is of another key or starts at or after it (the source
    promised), so it is too late for the windows that CTI closes as well. None for any other
    batch (fewer than two Columns, other messages, an event behind a CTI): it takes the
    message-by-message path."""
    parts: list[Columns] = []
    ctis: list[Message] = []
    for msg in msgs:
        kind = type(msg)
        if kind is Columns:
            if len(msg) and int(msg.starts.min()) < cti:
                return None
            parts.append(msg)
        elif kind is Cti:
            cti = max(cti, msg.time)  # type: ignore[union-attr]
            ctis.append(msg)
        elif kind is KeyCtis and key_ctis:
            ctis.append(msg)
        else:
            return None
    if len(parts) < 2:
        return None
    merged = concat(parts)
    return None if merged is None else [merged, *ctis]  # type: ignore[list-item]
