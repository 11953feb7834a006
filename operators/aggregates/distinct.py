"""CountDistinct: the number of distinct values in the window (SQL's ``COUNT(DISTINCT f)``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..expr import evaluate, trace
from ..udm import field_getter
from .base import Builtin


class CountDistinct(Builtin):
    """The number of distinct ``field`` values in the window (SQL's ``COUNT(DISTINCT f)``):
    ``None`` values are not counted, and with ``where`` (a predicate of the payload, SQL's
    ``FILTER (WHERE ...)``) only the events it holds for. The state counts each value's
    events, so a removal knows when a value leaves. Values compare as Python's ``==`` and
    ``hash`` do (``1`` and ``1.0`` are one value). Column-wise when the field and the
    predicate are (:mod:`operators.expr`) and the field's column holds integers.

    >>> CountDistinct("b").compute([{"b": 1}, {"b": 2}, {"b": 1}, {"b": None}])
    2
    >>> CountDistinct("b", where=lambda p: p["v"] > 5).compute(
    ...     [{"b": 1, "v": 9}, {"b": 2, "v": 1}, {"b": 1, "v": 7}])
    1
    """

    def __init__(self, field: Any = None, where: Callable[[Any], Any] | None = None) -> None:
        if where is not None and not callable(where):
            raise TypeError(f"CountDistinct: where={where!r} is not callable; give a predicate "
                            f"of the payload (SQL's FILTER (WHERE ...)), or None")
        self.field, self.where = field, where
        self._args = (field,) if where is None else (field, where)
        self._get: Callable[[Any], Any] = field_getter(field)

    def initial_state(self) -> dict[Any, int]:
        return {}

    def copy_state(self, state: dict[Any, int]) -> dict[Any, int]:
        return dict(state)

    def _values(self, values: list[Any]) -> list[Any]:
        get, where = self._get, self.where
        return [v for p in values if (where is None or where(p)) and (v := get(p)) is not None]

    def add(self, state: dict[Any, int], values: list[Any]) -> dict[Any, int]:
        for v in self._values(values):
            state[v] = state.get(v, 0) + 1
        return state

    def remove(self, state: dict[Any, int], values: list[Any]) -> dict[Any, int]:
        for v in self._values(values):
            n = state.get(v, 0)
            if n == 0:
                raise ValueError(f"{self.udm_name}.remove: the value {v!r} was not added; "
                                 f"remove only events that were added")
            if n == 1:
                del state[v]
            else:
                state[v] = n - 1
        return state

    def _columns(self, columns: Any, n: int) -> tuple[np.ndarray, Any] | None:
        """The field's integer column and the predicate's mask (None: every row), or None
        where :meth:`add` must see the payloads."""
        got = evaluate(trace(self._get), columns, n)
        if not (isinstance(got, np.ndarray) and got.shape == (n,) and got.dtype.kind in "iu"):
            return None
        if self.where is None:
            return got, None
        mask = evaluate(trace(self.where), columns, n)
        if not (isinstance(mask, np.ndarray) and mask.shape == (n,) and mask.dtype.kind == "b"):
            return None
        return got, mask

    def column_ready(self, columns: Any, n: int) -> bool:
        return n > 0 and self._columns(columns, n) is not None

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        got = self._columns(columns, bounds[-1])
        if got is None:
            return None
        values, mask = got
        out = []
        for j, state in enumerate(states):
            state = {} if state is None else state
            part = values[bounds[j]:bounds[j + 1]]
            if mask is not None:
                part = part[mask[bounds[j]:bounds[j + 1]]]
            if len(part):
                uniq, counts = np.unique(part, return_counts=True)
                for v, c in zip(uniq.tolist(), counts.tolist()):
                    state[v] = state.get(v, 0) + c
            out.append(state)
        return out

    def result(self, state: dict[Any, int]) -> int:
        return len(state)
