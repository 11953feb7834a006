"""The column path of :class:`~operators.windows.keyed.KeyedWindowAggregate`: a
:class:`~operators.columns.Columns` batch grouped by (window, key) with numpy (the key function
once on the columns when it can, the groups as pane ranges or as window copies, see
:mod:`operators.windows.keyed_columns`) and added to the per-key state column-wise (a built-in's
``add_ranges``), per group, or per event when the keys are not numbers.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable
from typing import Any

import numpy as np

from ..columns import Columns, apply_columns, map_columns
from ..events import MIN_TIME, Message
from ..group_apply import group_key
from .keyed_columns import SAFE, named_codes, pane_ranges, window_groups
from .keyed_state import KeyedWindowState
from .keyed_table import KeyTable

__all__ = ["KeyedColumnPath"]


class KeyedColumnPath(KeyedWindowState):
    """How a keyed window aggregate takes a column batch (see the module docstring)."""

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        starts = msg.starts
        if not len(starts):
            return []
        ends = None if msg.points or (msg.ends - starts == 1).all() else msg.ends
        if (int(starts.max()) >= SAFE or int(starts.min()) <= -SAFE or (ends is not None and (
                not self.intervals or int(ends.max()) >= SAFE))):
            return super().on_columns(msg, port)  # the per-event path names the culprit
        keys = apply_columns(self.key, msg)
        named = named_codes(keys)
        if named is not None:  # strings, other objects, NaN: grouped by their int codes
            names, keys = named
        if not (isinstance(keys, np.ndarray) and keys.dtype.kind in "biuf"):
            self._add(self._groups_per_event(msg))
            return []
        if self.intervals:
            distinct, which = np.unique(keys, return_inverse=True)
            top = np.full(len(distinct), MIN_TIME, dtype=np.int64)
            np.maximum.at(top, which.reshape(-1), starts)
            distinct_keys = distinct.tolist()
            if named is not None:
                distinct_keys = [names[c] for c in distinct_keys]
            for k, t in zip(distinct_keys, top.tolist()):
                self._advance(k, t + 1)
        ranged = None if ends is not None else pane_ranges(self.grid, starts, keys,
                                                         by_start=not self.incremental)
        if ranged is None:  # intervals, or keys or panes too far apart to code: a copy of a
            # row per window
            windows, group_keys, rows, bounds = window_groups(self.grid, starts, keys, ends)
            lo, hi = bounds[:-1], bounds[1:]
        else:
            windows, group_keys, rows, lo, hi = ranged
        if not windows:
            return []
        if named is not None:
            group_keys = [names[c] for c in group_keys]
        if self.table_plan is not None:  # number states kept column-wise (keyed_table)
            left = self._add_tables(msg.payload, rows, windows, group_keys, lo, hi)
            if left is None:
                return []
            windows, group_keys, lo, hi = left
        if self.add_ranges is not None:  # a built-in: add column-wise, no payload objects
            # the groups come sorted by window: each window's states are looked up and
            # stored by one map / update over its run of keys, not one Python step per group
            runs = _runs(windows)
            open_ = self.open
            by_group: list[Any] = []
            for n, a, b in runs:
                held = self._plain(n)
                by_group += [None] * (b - a) if held is None else map(held.get,
                                                                       group_keys[a:b])
            states = self.add_ranges(by_group, map_columns(msg.payload, lambda c: c[rows]),
                                     len(rows), lo, hi)
            if states is not None:
                states = list(states)  # (sliced by run below)
                for n, a, b in runs:
                    by_key = open_.get(n)
                    if by_key is None:
                        by_key = open_[n] = {}
                    by_key.update(zip(group_keys[a:b], states[a:b]))
                    if not self.final:
                        self.touched_runs.append((n, group_keys[a:b]))
                return []
        if self.incremental:
            values = self._values(starts.tolist(), msg.payloads())
            ordered = [values[i] for i in rows.tolist()]
            self._add({(n, k): ordered[a:b] for n, k, a, b in
                       zip(windows, group_keys, lo, hi)})
            return []
        # the events themselves: rows sorted by (key, start) when ranged (see pane_ranges), so
        # each group's slice is in time order already
        payloads, at = msg.payloads(), starts.tolist()
        index = rows.tolist()
        ordered_starts = [at[i] for i in index]
        ordered = [payloads[i] for i in index]
        self._add_members(windows, group_keys, ordered_starts, ordered, lo, hi,
                          in_order=ranged is not None)
        return []

    def _add_tables(self, payload: Any, rows: np.ndarray, windows: list[int],
                    keys: list[Hashable], lo: Any, hi: Any) -> tuple[Any, ...] | None:
        """Add the groups of the windows held as :class:`~.keyed_table.KeyTable` (or new)
        to their tables; None when every group was, else the groups left ``(windows, keys,
        lo, hi)`` for the per-key states: all of them when the columns do not fit the lanes,
        else those of windows held per key (a restored snapshot's), their tables made plain
        where a table cannot take them."""
        plan = self.table_plan
        assert plan is not None
        lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
        got = plan.lanes_of(map_columns(payload, lambda c: c[rows]), len(rows), lo_a, hi_a)
        runs = _runs(windows)
        if got is None:
            for n, _, _ in runs:
                self._plain(n)
            return windows, keys, lo, hi
        values, bound = got
        open_, left = self.open, []
        for n, a, b in runs:
            held = open_.get(n)
            if held is None:
                held = open_[n] = KeyTable(plan)
            if type(held) is KeyTable and held.add(keys[a:b], [v[a:b] for v in values], bound):
                if not self.final:
                    self.touched_runs.append((n, keys[a:b]))
            else:
                self._plain(n)
                left.append((a, b))
        if not left:
            return None
        at = np.concatenate([np.arange(a, b) for a, b in left])
        picked = at.tolist()
        return ([windows[j] for j in picked], [keys[j] for j in picked], lo_a[at].tolist(),
                hi_a[at].tolist())  # (Python ints: a count adds them to its state)

    def _groups_per_event(self, msg: Columns) -> dict[tuple[int, Hashable], list[Any]]:
        """The events grouped by (window number, key) with the key function per event."""
        payloads = msg.payloads()
        starts = msg.starts.tolist()
        values = self._values(starts, payloads)
        key, span = self.key, self.grid.span
        groups: dict[tuple[int, Hashable], list[Any]] = {}
        for s, e, p, v in zip(starts, msg.ends.tolist(), payloads, values):
            k = group_key(key(p))
            for n in span(s, e):
                groups.setdefault((n, k), []).append(v)
            if self.intervals:
                self._advance(k, s + 1)
        return groups


def _runs(windows: list[int]) -> list[tuple[int, int, int]]:
    """``(n, a, b)``: window ``n`` is ``windows[a:b]``, for each window of the sorted list."""
    out = []
    a, m = 0, len(windows)
    while a < m:
        n = windows[a]
        b = bisect_right(windows, n, a)
        out.append((n, a, b))
        a = b
    return out
