"""One window's states of a keyed window aggregate held column-wise: :class:`KeyTable`, a row
per key and a numpy column ("lane") per number a built-in keeps, for the aggregates whose
insert-only state is a few numbers -- ``Count()``, ``Count(where=...)``, ``Sum``/``Avg`` of an
int field, ``Min``/``Max`` of a number field -- and ``Aggregates`` of them (Nexmark Q17: eight
parts per auction and day). A batch is added to every key it touches with a few numpy
operations per part (prefix sums, ``reduceat``) and one dict look-up per key, where the
per-key states cost a Python object per part and key and batch; results are read from the
lanes at once.

A table is exactly the states :meth:`~operators.aggregates.base.Builtin.add_insert_only_ranges`
would have made: :meth:`KeyTable.plain` makes them (an int per count, ``(total, n)`` per sum,
:class:`~operators.aggregates.extremes.Best` per extreme, a list of them for ``Aggregates``),
and a table becomes them whenever anything else is asked of the window: a batch its lanes
cannot take (a float sum, a sum that could leave int64, an extreme of another type), a row
path, a key's CTI, rescaling, and every copy and pickle (a snapshot holds the plain states, so
savepoints do not change).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from ..aggregates import Aggregates, Avg, Count, Max, Min, Sum
from ..aggregates.exact import int_range_column
from ..aggregates.extremes import Best
from ..expr import evaluate, trace

__all__ = ["KeyTable", "TablePlan"]

#: A sum's lanes stay below this (int64 with room for one batch more).
_SUM_BOUND = 2**62
#: Below this an int is exact as a float64: a mean is one numpy division.
_EXACT = 2**53


class TablePlan:
    """How an aggregate's parts are kept column-wise: per part its kind (``count``,
    ``where``, ``sum``, ``avg``, ``min``, ``max``) and the part itself; :meth:`of` says
    whether an aggregate has such a plan."""

    def __init__(self, names: list[str] | None, parts: list[tuple[str, Any]]) -> None:
        #: the result's field names (``Aggregates``), or None: one bare result
        self.names = names
        self.parts = parts

    @staticmethod
    def of(udm: Any) -> TablePlan | None:
        """The plan of ``udm``, or None when a part is not one of the kinds (by exact type:
        a subclass may compute its results otherwise)."""
        named = type(udm) is Aggregates
        parts = list(udm.parts.values()) if named else [udm]
        kinds = []
        for p in parts:
            t = type(p)
            if t is Count:
                kinds.append(("count" if p.where is None else "where", p))
            elif t in (Sum, Avg, Min, Max):
                kinds.append((t.__name__.lower(), p))
            else:
                return None
        return TablePlan(list(udm.parts) if named else None, kinds)

    def lanes_of(self, columns: Any, n: int, lo: np.ndarray, hi: np.ndarray
                 ) -> tuple[list[np.ndarray], int] | None:
        """Per lane, each group's value (group ``j`` is rows ``lo[j]:hi[j]`` of the ``n``
        rows of payload ``columns``): counts, sums and their counts, extremes; and how large
        a sum the batch may add to a key. None when the columns do not fit the lanes (the
        states then take the general path)."""
        out: list[np.ndarray] = []
        bound = 0
        sizes = hi - lo
        for kind, part in self.parts:
            if kind == "count":
                out.append(sizes)
                continue
            if kind == "where":
                mask = part._mask(columns, n)
                if mask is None:
                    return None
                out.append(int_range_column(mask, lo, hi))
                continue
            column = evaluate(trace(part._get), columns, n)
            if not (isinstance(column, np.ndarray) and column.shape == (n,) and n):
                return None
            if kind in ("sum", "avg"):
                most = _largest(column) * n if column.dtype.kind == "i" else _SUM_BOUND
                if most >= _SUM_BOUND:
                    return None  # (floats: exact sums are the general path's business)
                bound = max(bound, most)
                out += [int_range_column(column, lo, hi), sizes]
                continue
            if column.dtype.kind not in "if" or (column.dtype.kind == "f" and (
                    np.isnan(column).any() or not column.all())):
                return None  # (NaN and zeros rank by type: the general path's business)
            column = column.astype(np.int64 if column.dtype.kind == "i" else np.float64)
            out.append(part._range_extremes((column,), lo, hi)[0])
        return out, bound


def _largest(column: np.ndarray) -> int:
    return max(abs(int(column.min())), abs(int(column.max())))


class KeyTable:
    """One window's states, a row per key (see the module docstring). Reads as a mapping of
    its keys (``in``, ``len``, iteration); :meth:`add` takes a batch's groups,
    :meth:`results` answers for some keys, :meth:`plain` gives the per-key states."""

    __slots__ = ("bound", "keys", "lanes", "plan", "slot")

    def __init__(self, plan: TablePlan) -> None:
        self.plan = plan
        #: key -> its row
        self.slot: dict[Hashable, int] = {}
        #: the keys, by row
        self.keys: list[Hashable] = []
        #: per lane a column with room to spare (the first len(keys) rows are the states)
        self.lanes: list[np.ndarray] | None = None
        #: how large a sum lane's value may be (the sums of the largest |value| of each batch
        #: times its rows)
        self.bound = 0

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.keys)

    def __contains__(self, key: object) -> bool:
        return key in self.slot

    def add(self, keys: Sequence[Hashable], values: list[np.ndarray], bound: int) -> bool:
        """Add group ``j`` (key ``keys[j]``, each of its keys once) the lanes' ``values[l][j]``;
        ``bound``: the largest sum the batch may add to a key. False (nothing changed) when
        the lanes cannot take them: an extreme of another type, a sum that could pass
        int64."""
        if self.bound + bound >= _SUM_BOUND:
            return False
        lanes = self.lanes
        if lanes is not None and any(v.dtype != lane.dtype for v, lane in zip(values, lanes)):
            return False
        slot = self.slot
        rows = np.fromiter(map(slot.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        new = np.flatnonzero(rows < 0)
        if len(new):
            first = len(self.keys)
            added = list(keys) if len(new) == len(keys) else [keys[j] for j in new.tolist()]
            slot.update(zip(added, range(first, first + len(added))))
            self.keys += added
            rows[new] = np.arange(first, first + len(added))
        self._grow(values)
        lanes = self.lanes
        assert lanes is not None
        old = rows < (len(self.keys) - len(new))  # rows held before this batch
        fresh = ~old
        for (lane, v), kind in zip(zip(lanes, values), self._kinds()):
            if kind in "<>":
                reduce = np.maximum if kind == ">" else np.minimum
                lane[rows[old]] = reduce(lane[rows[old]], v[old])
                lane[rows[fresh]] = v[fresh]
            else:
                lane[rows[fresh]] = 0
                lane[rows] += v
        self.bound += bound
        return True

    def _kinds(self) -> list[str]:
        """Per lane how it merges: ``+`` (counts, sums), ``>`` (max), ``<`` (min)."""
        out = []
        for kind, _ in self.plan.parts:
            out += ["+", "+"] if kind in ("sum", "avg") else [
                ">" if kind == "max" else "<" if kind == "min" else "+"]
        return out

    def _grow(self, values: list[np.ndarray]) -> None:
        n = len(self.keys)
        lanes = self.lanes
        if lanes is None:
            self.lanes = [np.zeros(max(64, 2 * n), dtype=v.dtype) for v in values]
        elif n > len(lanes[0]):
            grown = []
            for lane in lanes:
                bigger = np.zeros(2 * n, dtype=lane.dtype)
                bigger[:len(lane)] = lane
                grown.append(bigger)
            self.lanes = grown

    def results(self, keys: Sequence[Hashable]) -> list[Any]:
        """The results of ``keys`` (each held), in their order: what the built-ins'
        ``window_results`` of the plain states give."""
        slot = self.slot
        rows = np.fromiter((slot[k] for k in keys), dtype=np.int64, count=len(keys))
        return self._results(rows)

    def all_results(self) -> list[Any]:
        """The results of every key, in the order of :attr:`keys`."""
        return self._results(np.arange(len(self.keys)))

    def _results(self, rows: np.ndarray) -> list[Any]:
        assert self.lanes is not None
        lanes = iter(self.lanes)
        columns: list[list[Any]] = []
        for kind, _ in self.plan.parts:
            lane = next(lanes)[rows]
            if kind == "avg":
                n = next(lanes)[rows]
                if len(lane) and _largest(lane) < _EXACT:
                    columns.append((lane / n).tolist())
                else:  # int / int: the exact quotient rounded once
                    columns.append([t / c for t, c in zip(lane.tolist(), n.tolist())])
                continue
            if kind == "sum":
                next(lanes)
            columns.append(lane.tolist())
        names = self.plan.names
        if names is None:
            return columns[0]
        return [dict(zip(names, row)) for row in zip(*columns)]

    def result_column(self) -> np.ndarray | None:
        """Every key's result (in the order of :attr:`keys`) as one number column, when the
        aggregate is one part (else None): the column its results would make."""
        if self.plan.names is not None or self.lanes is None:
            return None
        m = len(self.keys)
        lane = self.lanes[0][:m]
        if self.plan.parts[0][0] != "avg":
            return lane.copy()
        if m and _largest(lane) < _EXACT:
            return lane / self.lanes[1][:m]
        return np.array(self.all_results(), dtype=np.float64)

    def plain(self) -> dict[Hashable, Any]:
        """The per-key states (key -> state), as the built-ins' insert-only adds make them."""
        if self.lanes is None:
            return {}
        m = len(self.keys)
        lanes = iter(self.lanes)
        parts: list[list[Any]] = []
        for kind, _ in self.plan.parts:
            lane = next(lanes)
            values = lane[:m].tolist()
            if kind in ("sum", "avg"):
                parts.append(list(zip(values, next(lanes)[:m].tolist())))
            elif kind in ("min", "max"):
                tie = 0 if lane.dtype.kind == "i" else 2  # (Extreme's rank of an int, a float)
                parts.append([Best((0, v, tie)) for v in values])
            else:
                parts.append(values)
        if self.plan.names is None:
            return dict(zip(self.keys, parts[0]))
        return dict(zip(self.keys, map(list, zip(*parts))))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Hashable, Any]:
        return self.plain()  # (a snapshot holds plain states: see the module docstring)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.plain(),))
