"""What every built-in aggregate shares: :class:`Builtin` (constructor-argument pickling, a
readable name, ``compute`` and the column-wise protocol) and :func:`range_rows`."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..columns import map_columns
from ..udm import IncrementalAggregate, Window


class Builtin(IncrementalAggregate):
    """Shared plumbing: constructor-argument pickling, a readable name, ``compute``, and the
    column-wise protocol :meth:`add_groups`."""

    _args: tuple[Any, ...] = ()

    def column_ready(self, columns: Any, n: int) -> bool:
        """Whether :meth:`add_groups` takes these ``n`` rows of payload columns."""
        return False

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        """Add many groups of events at once, column-wise: ``columns`` are the payload
        columns of a batch (see :mod:`operators.columns`) sorted by group, group ``j`` being
        rows ``bounds[j]:bounds[j + 1]`` (never empty), and ``states[j]`` its state (None: a
        new group).
        Returns the new states, exactly what :meth:`add` of each group's payloads would give,
        or None when the values cannot be added column-wise (the engine then calls
        :meth:`add`)."""
        return None

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        """:meth:`add_groups` for groups that are row ranges of the ``n`` rows of
        ``columns``: group ``j`` is rows ``lo[j]:hi[j]`` (never empty). Ranges may overlap (a
        point in several hopping windows is one row of each window's range), so a hopping
        window's groups need no copy of a row per window. This default copies the rows into
        consecutive groups and calls :meth:`add_groups`; the sums answer from prefix sums."""
        if type(self).add_groups is Builtin.add_groups:
            return None  # no column-wise add at all: copying the rows would be wasted
        rows, bounds = range_rows(lo, hi)
        return self.add_groups(states, map_columns(columns, lambda c: c[rows]), bounds)

    def add_insert_only_ranges(self, states: list[Any], columns: Any, n: int,
                               lo: Sequence[int], hi: Sequence[int]) -> list[Any] | None:
        """:meth:`add_ranges` for an operator whose states never see a :meth:`remove` (the
        keyed window aggregate: inserts only, never a retraction): a state may then keep less
        than the window's values (Min and Max keep only the extreme). The states it returns
        take :meth:`add`, :meth:`result` and :meth:`copy_state`, and :meth:`remove` fails on
        them. This default is :meth:`add_ranges`."""
        return self.add_ranges(states, columns, n, lo, hi)

    def window_results(self, states: list[Any], window: Window) -> list[Any]:
        """:meth:`window_result` of many states of one window (what the keyed window
        aggregate asks at once)."""
        if type(self).window_result is IncrementalAggregate.window_result:
            return list(map(self.result, states))
        return [self.window_result(s, window) for s in states]

    def results_are(self, cls: type) -> bool:
        """Whether this aggregate's results are ``cls``'s :meth:`result` (neither it nor
        :meth:`window_result` overridden below ``cls``): a ``window_results`` that reads
        ``cls``'s states in place may answer for it."""
        return (type(self).result is cls.result  # type: ignore[attr-defined]
                and type(self).window_result is IncrementalAggregate.window_result)

    def compute(self, values: Iterable[Any]) -> Any:
        """The result from scratch: ``result(add(initial_state(), values))``."""
        return self.result(self.add(self.initial_state(), list(values)))

    def __reduce__(self) -> tuple[Any, ...]:
        # the field getter may be a closure; rebuild it from the constructor arguments instead
        return (type(self), self._args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(a) for a in self._args)})"

    @functools.cached_property
    def udm_name(self) -> str:
        # add/remove name the UDM in their errors: build the name once, not once per call
        return repr(self)


def range_rows(lo: Sequence[int], hi: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """The rows of the ranges ``lo[j]:hi[j]`` one after the other, and the bounds of each
    range in that sequence."""
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    sizes = hi_a - lo_a
    bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    # row i of range j is lo[j] + (i - bounds[j])
    rows = np.arange(int(bounds[-1]), dtype=np.int64) + np.repeat(lo_a - bounds[:-1], sizes)
    return rows, bounds.tolist()
