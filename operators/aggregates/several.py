"""Aggregates: several incremental aggregates of one window at once, one result dict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..udm import ColumnAggregate, IncrementalAggregate, Window, resolve
from .base import Builtin


class Aggregates(Builtin):
    """Several incremental aggregates of the same window at once: the result is a dict
    ``{name: result}`` (one output event per window, one field per aggregate, as Spark's
    ``agg(count(...), sum(...))`` gives). Column-wise when every part is.

    >>> from operators.aggregates import Count, Sum
    >>> Aggregates(count=Count(), total=Sum()).compute([1, 2, 3])
    {'count': 3, 'total': 6}
    """

    def __init__(self, **parts: Any) -> None:
        if not parts:
            raise ValueError("Aggregates(): name at least one aggregate, e.g. "
                             "Aggregates(count=Count(), total=Sum('kwh'))")
        resolved = {}
        for name, part in parts.items():
            udm = resolve(part)
            if not isinstance(udm, IncrementalAggregate) or getattr(udm, "time_sensitive",
                                                                      False):
                raise TypeError(f"Aggregates({name}={part!r}): each part must be an "
                                f"incremental aggregate that is not time-sensitive (Count, Sum, "
                                f"Avg, Min, Max, TopK or your own IncrementalAggregate)")
            resolved[name] = udm
        self.parts = resolved
        #: the parts, when every one has the column-wise protocol (else None: never
        #: column-wise, since no part may add when another cannot)
        columnar = [p for p in resolved.values() if isinstance(p, ColumnAggregate)]
        self._columnar = columnar if len(columnar) == len(resolved) else None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_aggregates, (self.parts,))

    def __repr__(self) -> str:
        return f"Aggregates({', '.join(f'{k}={v!r}' for k, v in self.parts.items())})"

    def initial_state(self) -> list[Any]:
        return [p.initial_state() for p in self.parts.values()]

    def copy_state(self, state: list[Any]) -> list[Any]:
        return [p.copy_state(s) for p, s in zip(self.parts.values(), state)]

    def add(self, state: list[Any], values: list[Any]) -> list[Any]:
        return [p.add(s, values) for p, s in zip(self.parts.values(), state)]

    def remove(self, state: list[Any], values: list[Any]) -> list[Any]:
        return [p.remove(s, values) for p, s in zip(self.parts.values(), state)]

    def result(self, state: list[Any]) -> dict[str, Any]:
        return {k: p.result(s) for (k, p), s in zip(self.parts.items(), state)}

    def window_result(self, state: list[Any], window: Window) -> dict[str, Any]:
        return {k: p.window_result(s, window) for (k, p), s in zip(self.parts.items(), state)}

    def window_results(self, states: list[Any], window: Window) -> list[Any]:
        """The results of many states part by part (one call per part, not per state and
        part), zipped into one dict per state."""
        columns = []
        for p, mine in zip(self.parts.values(), zip(*states)):  # (each part's states)
            many = getattr(p, "window_results", None)
            columns.append(many(mine, window) if many is not None
                           else [p.window_result(s, window) for s in mine])
        names = list(self.parts)
        return [dict(zip(names, row)) for row in zip(*columns)]

    def column_ready(self, columns: Any, n: int) -> bool:
        return self._columnar is not None and all(p.column_ready(columns, n)
                                                  for p in self._columnar)

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        if self._columnar is None or not self.column_ready(columns, bounds[-1]):
            return None  # checked first: no part may add when another cannot
        per_part = [p.add_groups(mine, columns, bounds)
                    for p, mine in zip(self._columnar, self._by_part(states))]
        return [list(group) for group in zip(*per_part)]

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        if self._columnar is None or not self.column_ready(columns, n):
            return None  # checked first: no part may add when another cannot
        per_part = [p.add_ranges(mine, columns, n, lo, hi)
                    for p, mine in zip(self._columnar, self._by_part(states))]
        return [list(group) for group in zip(*per_part)]

    def add_insert_only_ranges(self, states: list[Any], columns: Any, n: int,
                               lo: Sequence[int], hi: Sequence[int]) -> list[Any] | None:
        """:meth:`add_ranges` with each part's ``add_insert_only_ranges`` (where it has one)."""
        if self._columnar is None or not self.column_ready(columns, n):
            return None  # checked first: no part may add when another cannot
        per_part = [getattr(p, "add_insert_only_ranges", p.add_ranges)(mine, columns, n, lo, hi)
                    for p, mine in zip(self._columnar, self._by_part(states))]
        return [list(group) for group in zip(*per_part)]

    def _by_part(self, states: list[Any]) -> list[list[Any]]:
        """Each part's states of ``states`` (a list per group, None: a new group), in one
        transpose rather than a pass per part."""
        if not states:
            return [[] for _ in self.parts]
        nones = [None] * len(self.parts)
        return [list(mine) for mine in zip(*[nones if s is None else s for s in states])]


def _aggregates(parts: dict[str, Any]) -> Aggregates:
    return Aggregates(**parts)
