"""Count, Sum, Avg and TimeWeightedAverage: the counting and summing built-ins (exact sums:
:mod:`operators.aggregates.exact`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..events import MAX_TIME, MIN_TIME, fmt_time
from ..expr import evaluate, trace
from ..udm import Window, field_getter
from .base import Builtin
from .exact import (
    ExactSum,
    IntTotal,
    exact,
    exact_group_sums,
    exact_range_sums,
    int_range_sums,
    int_range_totals,
)


class Count(Builtin):
    """The number of events in the window (the state is that number); with ``where`` (a
    predicate of the payload, SQL's ``COUNT(*) FILTER (WHERE ...)``) the number it holds for.

    >>> Count().compute(["a", "b", "c"])
    3
    >>> Count(where=lambda p: p > 1).compute([1, 2, 3])
    2
    """

    def __init__(self, where: Callable[[Any], Any] | None = None) -> None:
        if where is not None and not callable(where):
            raise TypeError(f"Count: where={where!r} is not callable; give a predicate of the "
                            f"payload (SQL's FILTER (WHERE ...)), or None")
        self.where = where
        self._args = () if where is None else (where,)

    def initial_state(self) -> int:
        return 0

    def _n(self, values: list[Any]) -> int:
        where = self.where
        return len(values) if where is None else sum(1 for p in values if where(p))

    def add(self, state: int, values: list[Any]) -> int:
        return state + self._n(values)

    def _mask(self, columns: Any, n: int) -> np.ndarray | None:
        if self.where is None:
            return None
        mask = evaluate(trace(self.where), columns, n)
        ok = isinstance(mask, np.ndarray) and mask.shape == (n,) and mask.dtype.kind == "b"
        return mask if ok else None

    def column_ready(self, columns: Any, n: int) -> bool:
        return self.where is None or self._mask(columns, n) is not None

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        return self.add_ranges(states, columns, bounds[-1], bounds[:-1], bounds[1:])

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        if self.where is None:
            return [(0 if s is None else s) + (b - a) for s, a, b in zip(states, lo, hi)]
        mask = self._mask(columns, n)
        if mask is None:
            return None
        counts, _ = int_range_totals(mask, lo, hi)  # (one Python int per range, not per row)
        return [c if s is None else s + c for s, c in zip(states, counts)]

    def remove(self, state: int, values: list[Any]) -> int:
        n = self._n(values)
        if n > state:
            raise ValueError(f"Count.remove: removing {n} events from a window that "
                             f"holds {state}; remove only events that were added")
        return state - n

    def result(self, state: int) -> int:
        return state

    def window_results(self, states: Sequence[int], window: Window) -> list[int]:
        if self.results_are(Count):
            return list(states)  # (a state is its result)
        return super().window_results(list(states), window)

    def copy_state(self, state: int) -> int:
        return state


class Sum(Builtin):
    """The sum of ``field`` over the window's events.

    Kept exactly under add and remove, so the result equals ``math.fsum`` of the window's
    values (ints give an exact int) whatever the order of the deltas was.

    >>> Sum("kwh").compute([{"kwh": 0.1}, {"kwh": 0.2}, {"kwh": 0.3}])
    0.6
    >>> Sum().compute([1, 2, 3])
    6
    """

    def __init__(self, field: Any = None) -> None:
        self.field = field
        self._args = (field,)
        self._get: Callable[[Any], Any] = field_getter(field)

    def initial_state(self) -> ExactSum:
        return ExactSum()

    def copy_state(self, state: ExactSum | IntTotal) -> ExactSum | IntTotal:
        return state if isinstance(state, tuple) else state.copy()

    def add(self, state: ExactSum | IntTotal, values: list[Any]) -> ExactSum:
        get, who = self._get, self.udm_name
        state = exact(state)
        for v in values:
            state.update(get(v), 1, 1, who)
        return state

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        column = self._column(columns, bounds[-1])
        if column is None:
            return None
        states = [exact(s) for s in states]
        if column.dtype.kind in "iu":
            return int_range_sums(states, column, bounds[:-1], bounds[1:])
        return exact_group_sums(states, column, bounds)

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        column = self._column(columns, n)
        if column is None:
            return None
        states = [exact(s) for s in states]
        if column.dtype.kind in "iu":
            return int_range_sums(states, column, lo, hi)
        return exact_range_sums(states, column, lo, hi)

    def add_insert_only_ranges(self, states: list[Any], columns: Any, n: int,
                               lo: Sequence[int], hi: Sequence[int]) -> list[Any] | None:
        """An int column's ranges added to states that are new or insert-only kept as
        :data:`IntTotal` ``(total, count)``: plain ints, where an :class:`ExactSum` scales
        every int by 2**1074 to sum it with floats (a tenth of the cost per group, and the
        same results); anything else takes :meth:`add_ranges`."""
        column = self._column(columns, n)
        if column is None or column.dtype.kind not in "iu" or not all(
                s is None or type(s) is tuple for s in states):
            return self.add_ranges(states, columns, n, lo, hi)
        return [(t, c) if s is None else (s[0] + t, s[1] + c)
                for s, t, c in zip(states, *int_range_totals(column, lo, hi))]

    def remove(self, state: ExactSum | IntTotal, values: list[Any]) -> ExactSum:
        if isinstance(state, tuple):
            raise ValueError(f"{self.udm_name}.remove: this state was made by "
                             f"add_insert_only_ranges for an operator that never removes; use "
                             f"add_ranges for states that see removals")
        if len(values) > state.n:
            raise ValueError(f"{self.udm_name}.remove: removing {len(values)} events from a "
                             f"window that holds {state.n}; remove only events that were added")
        get, who = self._get, self.udm_name
        for v in values:
            state.update(get(v), -1, 1, who)
        return state

    def _column(self, columns: Any, n: int) -> np.ndarray | None:
        """The field's column when add_groups takes it: n finite, normal float64 values, or
        n integers whose sums cannot leave int64."""
        column = evaluate(trace(self._get), columns, n)
        if isinstance(column, np.ndarray) and column.shape == (n,) and n \
                and column.dtype.kind in "iu":
            top = max(abs(int(column.min())), abs(int(column.max())))
            return column if top * n < 2**62 else None
        if not (isinstance(column, np.ndarray) and column.shape == (n,) and n
                and column.dtype == np.float64):
            return None
        with np.errstate(all="ignore"):
            if not np.isfinite(column).all() or (np.abs(column[column != 0]) < 2.0**-1021).any():
                return None
        return column

    def column_ready(self, columns: Any, n: int) -> bool:
        return self._column(columns, n) is not None

    def result(self, state: ExactSum | IntTotal) -> Any:
        return state[0] if isinstance(state, tuple) else state.value()

    def window_results(self, states: list[Any], window: Window) -> list[Any]:
        """:meth:`result` of many states, an int state's total read in place."""
        if not self.results_are(Sum):
            return super().window_results(states, window)
        return [s[0] if type(s) is tuple else s.value() for s in states]


class Avg(Sum):
    """The mean of ``field`` over the window's events: the exact sum divided by the count,
    rounded once; ``None`` for an empty state (the engine never asks: windows are non-empty).

    >>> Avg().compute([1, 2])
    1.5
    """

    def result(self, state: ExactSum | IntTotal) -> Any:
        if isinstance(state, tuple):  # int / int is the exact quotient rounded once, as divided()
            return state[0] / state[1]
        if state.n == 0:
            return None
        return state.divided(state.n)

    def window_results(self, states: list[Any], window: Window) -> list[Any]:
        """:meth:`result` of many states, an int state's mean computed in place."""
        if not self.results_are(Avg):
            return super().window_results(states, window)
        result = self.result
        return [s[0] / s[1] if type(s) is tuple else result(s) for s in states]


class TimeWeightedAverage(Builtin):
    """The paper's MyTimeWeightAverage (section IV-C): each event's ``field`` value weighted
    by the share of the window its (clipped) lifetime covers,
    ``Σ value · (end − start) / (window.end − window.start)``.

    Time-sensitive: ``add``/``remove`` receive clipped events ``(start, end, payload)``;
    the result needs the window (:meth:`window_result`). The weighted sum is kept exactly, so
    the result is correctly rounded whatever the order of the deltas. Lifetimes must be finite:
    window with ``clip="full"`` (the default) or ``clip="right"``.

    ::

        window  [0 ------------------------------ 10)
        e1      [0 ------- 4)  value 10
        e2                 [4 ---------------- 10)  value 20

    >>> TimeWeightedAverage("v").compute([(0, 4, {"v": 10}), (4, 10, {"v": 20})],
    ...                                  Window(0, 10))
    16.0
    """

    time_sensitive = True

    def __init__(self, field: Any = None) -> None:
        self.field = field
        self._args = (field,)
        self._get: Callable[[Any], Any] = field_getter(field)

    def compute(self, events: Iterable[tuple[int, int, Any]],  # type: ignore[override]
                window: Window) -> Any:
        """The result from scratch over clipped events and their window."""
        return self.window_result(self.add(self.initial_state(), list(events)), window)

    def initial_state(self) -> ExactSum:
        return ExactSum()

    def copy_state(self, state: ExactSum) -> ExactSum:
        return state.copy()

    def _duration(self, start: int, end: int) -> int:
        if end >= MAX_TIME or start <= MIN_TIME or end < start:
            raise ValueError(f"{self.udm_name}: the event lifetime [{fmt_time(start)}, "
                             f"{fmt_time(end)}) has no finite duration to weight its value by; "
                             f"window the stream with clip=\"full\" (the default) or "
                             f"clip=\"right\" so lifetimes are cut to the window")
        return end - start

    def add(self, state: ExactSum, values: list[tuple[int, int, Any]]) -> ExactSum:
        get, who = self._get, self.udm_name
        for start, end, payload in values:
            state.update(get(payload), 1, self._duration(start, end), who)
        return state

    def remove(self, state: ExactSum, values: list[tuple[int, int, Any]]) -> ExactSum:
        if len(values) > state.n:
            raise ValueError(f"{self.udm_name}.remove: removing {len(values)} events from a "
                             f"window that holds {state.n}; remove only events that were added")
        get, who = self._get, self.udm_name
        for start, end, payload in values:
            state.update(get(payload), -1, self._duration(start, end), who)
        return state

    def result(self, state: ExactSum) -> Any:
        raise TypeError(f"{self.udm_name} is time-sensitive: its result depends on the window; "
                        f"call window_result(state, window)")

    column_ready = Sum.column_ready
    _column = Sum._column  # borrowed: it reads only self._get

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        """Column-wise :meth:`add` of **point** events (what the keyed window aggregate
        sends): each lasts one tick inside its window, so it weighs its value by 1."""
        column = self._column(columns, bounds[-1])  # type: ignore[misc]  # see _column
        return None if column is None else exact_group_sums(states, column, bounds)

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        """Column-wise :meth:`add` of point events, as :meth:`add_groups`."""
        column = self._column(columns, n)  # type: ignore[misc]  # see _column
        return None if column is None else exact_range_sums(states, column, lo, hi)

    def window_result(self, state: ExactSum, window: Window) -> Any:
        """``Σ value · duration / (window.end − window.start)``; ``None`` for an empty state."""
        start, end = window
        if end >= MAX_TIME or start <= MIN_TIME or end <= start:
            raise ValueError(f"{self.udm_name}: the window [{fmt_time(start)}, {fmt_time(end)}) "
                             f"has no finite positive length to average over; use a window "
                             f"with finite bounds")
        if state.n == 0:
            return None
        return state.divided(end - start)
