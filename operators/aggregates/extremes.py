"""Min and Max: the window's values in a sorted multiset, with the order keys (NaN above every
other value; a fixed rank among equal values) that TopK shares."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from ..expr import evaluate, trace
from ..udm import field_getter
from .base import Builtin, range_rows


def order_key(value: Any) -> tuple[int, Any]:
    """A sort key ranking NaN above every other value (as Spark does), so sorted containers
    keep their invariant when a NaN arrives."""
    if isinstance(value, numbers.Real) and value != value:
        return (1, 0)
    return (0, value)


#: The rank among equal values of the types whose values all rank 0 (:func:`tie`), found
#: without an ABC check: ``_PLAIN_TIE(type(v))``, None for any other type.
_PLAIN_TIE = {int: 0, str: 0, bytes: 0, type(None): 0}.get


def tie(value: Any) -> Any:
    """Where ``value`` ranks among the values equal to it, so that Min and Max pick the same
    one whatever the order of the events: ``-0.0`` (-2) below bools (-1) below ints (0) below
    other exact numbers such as Fraction and Decimal (1) below floats (2); a tuple ranks by its
    items; anything else 0. Numbers of numpy and Python types rank alike (a column-wise add
    and a per-event remove must make the same key)."""
    kind = type(value)
    if kind is int or kind is str:
        return 0
    if kind is tuple:  # a tuple of the common plain items takes no Python step per item
        ties = tuple(map(_PLAIN_TIE, map(type, value)))  # None where the item is not plain
        if None in ties:
            ties = tuple(tie(v) if t is None else t for v, t in zip(value, ties))
        return ties
    if kind is float or isinstance(value, (float, np.floating)):
        return -2 if value == 0 and math.copysign(1.0, value) < 0 else 2
    if kind is bool or isinstance(value, np.bool_):
        return -1
    if isinstance(value, numbers.Integral):
        return 0
    if isinstance(value, numbers.Number):
        return 1
    return 0


def extreme_key(value: Any) -> tuple[int, Any, Any]:
    """The sort key of a Min/Max state: NaN above every other value (:func:`order_key`), then
    the value, then its rank among equal values (:func:`tie`)."""
    kind = type(value)
    if kind is float:  # the common cases first: an ABC check costs a Max a third of its time
        if value != value:
            return (1, 0, 0)
        return (0, value, -2 if value == 0 and math.copysign(1.0, value) < 0 else 2)
    if kind is int:
        return (0, value, 0)
    if kind is tuple:  # (a tuple is not a number: no NaN check)
        return (0, value, tie(value))
    if isinstance(value, numbers.Real) and value != value:
        return (1, 0, 0)
    return (0, value, tie(value))


def sorted_add(sl: SortedList, key: Any, who: str, value: Any) -> None:
    try:
        sl.add(key)
    except TypeError as e:
        raise TypeError(f"{who}: cannot order {value!r} ({type(value).__name__}) against the "
                        f"window's other values ({e}); pass a field (a key, attribute or "
                        f"function) that reads comparable values") from None


def _number_columns(got: Any, n: int) -> tuple[np.ndarray, ...] | None:
    """The field's value ``got`` (a column, or a tuple of columns for a field giving a tuple)
    as a tuple of ``n``-row bool or number columns, or None."""
    cols = got if type(got) is tuple else (got,)
    if cols and all(isinstance(c, np.ndarray) and c.shape == (n,) and c.dtype.kind in "biuf"
                    for c in cols):
        return cols
    return None


def _presorted(got: Any, bounds: Sequence[int]) -> np.ndarray | None:
    """The permutation ordering the rows of each group ``bounds[j]:bounds[j + 1]`` by the
    field's value (ties in arrival order), where numpy's order is Python's: number and bool
    columns, NaN only alone (it sorts last, as its order key ranks it); else None."""
    cols = got if type(got) is tuple else (got,)
    if not all(c.dtype.kind in "biuf" for c in cols) or (
            len(cols) > 1 and any(c.dtype.kind == "f" and np.isnan(c).any() for c in cols)):
        return None
    group = np.repeat(np.arange(len(bounds) - 1), np.diff(np.asarray(bounds)))
    return np.lexsort((*reversed(cols), group))


def _sorted_update(sl: SortedList, keys: list[Any], who: str) -> None:
    """Add ``keys`` to ``sl`` at once (sorted, then merged: far fewer steps than one
    :meth:`SortedList.add` each); values that do not order against each other or against
    ``sl`` are added one by one, so that the error names the first such value."""
    if len(keys) > 1:
        try:
            batch = sorted(keys)  # stable: equal keys keep their order, as adds one by one
            if sl:
                _ = (batch[0] < sl[-1], sl[0] < batch[-1])  # the state's values order too
        except TypeError:
            pass
        else:
            try:
                sl.update(batch)
            except TypeError as e:  # a value ordering against the ends but not the middle
                raise TypeError(f"{who}: cannot order the window's values ({e}); pass a "
                                f"field (a key, attribute or function) that reads comparable "
                                f"values") from None
            return
    for k in keys:
        sorted_add(sl, k, who, math.nan if k[0] else k[1])


def sorted_remove(sl: SortedList, key: Any, who: str, value: Any) -> None:
    try:
        sl.remove(key)
    except (ValueError, TypeError):
        raise ValueError(f"{who}.remove: {value!r} is not in the window's state; remove only "
                         f"events that were added (and a field that reads the same value "
                         f"every time)") from None


class Best:
    """An insert-only Min/Max state (:meth:`Builtin.add_insert_only_ranges`): the order key
    (:func:`extreme_key`) of the extreme alone, where the general state keeps every value's
    key so that a removal can reveal the next one."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, Any, Any]) -> None:
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:
        return (Best, (self.key,))

    def __repr__(self) -> str:
        return f"Best({self.key!r})"

    def __len__(self) -> int:
        return 1


class Extreme(Builtin):
    """Min and Max: the window's values in a sorted multiset (a SortedList of
    :func:`extreme_key`), so removing the current extreme reveals the next one in O(log n),
    and the extreme among equal values is the same whatever the order of the events."""

    def __init__(self, field: Any = None) -> None:
        self.field = field
        self._args = (field,)
        self._get: Callable[[Any], Any] = field_getter(field)

    #: :meth:`compute` is cheaper than building a state (a window operator whose window may
    #: never change computes its result so, and builds the state only when it changes)
    cheap_compute = True

    def initial_state(self) -> SortedList:
        return SortedList()

    def copy_state(self, state: SortedList | Best) -> SortedList | Best:
        return Best(state.key) if isinstance(state, Best) else state.copy()

    def _merged(self, state: Best, keys: list[Any]) -> Best:
        """The insert-only ``state`` with ``keys`` added: the extreme of the two."""
        try:
            return Best(self._extreme([state.key, *keys]))
        except TypeError as e:
            raise TypeError(f"{self.udm_name}: cannot order the window's values ({e}); pass a "
                            f"field (a key, attribute or function) that reads comparable "
                            f"values") from None

    def compute(self, values: Iterable[Any]) -> Any:
        """The result from scratch: the extreme key of the values, no sorted state. Values
        that do not order (or a missing one) take the state's path, which names them."""
        values = list(values)
        get = self._get
        try:
            got = [get(p) for p in values]
            if any(v is None for v in got):
                raise TypeError
            keys = [extreme_key(v) for v in got]
            best = [self._extreme(keys)] if keys else []
        except Exception:  # noqa: BLE001 -- the state's path raises the clear error
            return super().compute(values)
        return self.result(best)

    #: Max (else Min)
    _largest = False

    @staticmethod
    def _extreme(keys: list[Any]) -> Any:
        raise NotImplementedError

    def result(self, state: SortedList | Best) -> Any:
        """The extreme (the last of the sorted keys for Max, the first for Min); None for an
        empty state."""
        if isinstance(state, Best):
            key = state.key
        elif not state:
            return None
        else:
            key = state[-1] if self._largest else state[0]
        flag, value, _ = key
        return math.nan if flag else value

    def window_results(self, states: list[Any], window: Any) -> list[Any]:
        """:meth:`result` of many states, an insert-only one's extreme read in place."""
        if not self.results_are(Extreme):
            return super().window_results(states, window)
        return [s.key[1] if type(s) is Best and not s.key[0] else self.result(s)
                for s in states]

    def add(self, state: SortedList, values: list[Any]) -> SortedList:
        get, who = self._get, self.udm_name
        keys = []
        for p in values:
            v = get(p)
            if v is None:  # alone, or beside NaN, a SortedList would not notice
                raise TypeError(f"{who}: cannot order None (a missing value) among the "
                                f"window's values; drop missing values first (where(...)) or "
                                f"pass a field (a key, attribute or function) that reads "
                                f"comparable values")
            keys.append(extreme_key(v))
        if type(state) is Best:
            return self._merged(state, keys)
        _sorted_update(state, keys, who)
        return state

    def column_ready(self, columns: Any, n: int) -> bool:
        got = evaluate(trace(self._get), columns, n)
        if n and _number_columns(got, n) is not None:  # (no None among numbers: no keys to build)
            return True
        return self._keys(got, n) is not None

    def add_insert_only_ranges(self, states: list[Any], columns: Any, n: int,
                               lo: Sequence[int], hi: Sequence[int]) -> list[Any] | None:
        """Each range's extreme found column-wise (a ``reduceat``, or for a tuple of columns
        a ``lexsort`` within the ranges), kept alone as the state (:class:`Best`): no order
        key per value, no sorted state. Number columns only, floats without NaN or zero (their
        rank among equal values is :func:`tie`'s business), and states that are new or
        insert-only; anything else takes :meth:`add_ranges`."""
        got = evaluate(trace(self._get), columns, n)
        cols = _number_columns(got, n)
        if (cols is None or not n or not all(s is None or type(s) is Best for s in states)
                or any(c.dtype.kind == "f" and (np.isnan(c).any() or not c.all())
                       for c in cols)):
            return self.add_ranges(states, columns, n, lo, hi)
        best = self._range_extremes(cols, lo, hi)
        ties = tuple(-1 if c.dtype.kind == "b" else 2 if c.dtype.kind == "f" else 0
                     for c in cols)
        keys: list[tuple[int, Any, Any]]
        if type(got) is tuple:
            keys = [(0, v, ties) for v in zip(*(c.tolist() for c in best))]
        else:
            keys = [(0, v, ties[0]) for v in best[0].tolist()]
        try:  # the extreme of two keys by one comparison: min/max keep the first of equals
            if self._largest:
                return [Best(k) if s is None or k > s.key else s for s, k in zip(states, keys)]
            return [Best(k) if s is None or k < s.key else s for s, k in zip(states, keys)]
        except TypeError:  # keys that do not order: _merged names the aggregate
            return [Best(k) if s is None else self._merged(s, [k]) for s, k in zip(states, keys)]

    def _range_extremes(self, cols: tuple[np.ndarray, ...], lo: Sequence[int],
                        hi: Sequence[int]) -> tuple[np.ndarray, ...]:
        """Per range ``lo[j]:hi[j]`` (never empty) the row values of its extreme: one column
        by a ``reduceat``; a tuple of columns (compared item by item, as tuples compare) by a
        ``lexsort`` of the ranges' rows, the range's last (Max) or first (Min) row."""
        rows, bounds = range_rows(lo, hi)
        first = np.asarray(bounds[:-1], dtype=np.int64)
        if len(cols) == 1:
            reduce = np.maximum if self._largest else np.minimum
            return (reduce.reduceat(cols[0][rows], first),)
        group = np.repeat(np.arange(len(first)), np.diff(np.asarray(bounds)))
        order = np.lexsort((*(c[rows] for c in reversed(cols)), group))
        at = order[np.asarray(bounds[1:], dtype=np.int64) - 1 if self._largest
                   else first]
        return tuple(c[rows[at]] for c in cols)

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        got = evaluate(trace(self._get), columns, bounds[-1])
        keys = self._keys(got, bounds[-1])
        if keys is None:
            return None
        order = _presorted(got, bounds)
        if order is not None:  # each group's keys in order: sorting them is one pass
            keys = [keys[i] for i in order.tolist()]
        out = []
        for j, state in enumerate(states):
            part = keys[bounds[j]:bounds[j + 1]]
            if type(state) is Best:
                out.append(self._merged(state, part))
                continue
            if state is None:  # a new group's state: its keys sorted once (not twice)
                try:
                    out.append(SortedList(part))
                    continue
                except TypeError:  # (added one by one below, which names the value)
                    state = SortedList()
            _sorted_update(state, part, self.udm_name)
            out.append(state)
        return out

    @staticmethod
    def _keys(got: Any, n: int) -> list[tuple[int, Any, Any]] | None:
        """The order keys (:func:`extreme_key`) of the field's ``n`` values ``got``,
        evaluated column-wise (no payload objects; a field returning a tuple of columns gives
        tuples), or None where :meth:`add` must see the payloads: the field does not run
        column-wise, or a value is None (``add`` says so)."""
        if type(got) is tuple:
            if not all(isinstance(c, np.ndarray) and c.shape == (n,) for c in got):
                return None
            values = zip(*(c.tolist() for c in got))
            if all(c.dtype.kind in "biu" for c in got):  # (Q7's (price, auction, bidder))
                # every tuple's rank among equal values is the same: its items' (tie)
                tie = tuple(-1 if c.dtype.kind == "b" else 0 for c in got)
                return [(0, v, tie) for v in values]
            return [extreme_key(v) for v in values]
        if not (isinstance(got, np.ndarray) and got.shape == (n,) and n):
            return None
        kind = got.dtype.kind
        if kind in "iu":
            return [(0, v, 0) for v in got.tolist()]
        if kind == "b":
            return [(0, v, -1) for v in got.tolist()]
        if kind == "f":
            keys = [(0, v, 2) for v in got.tolist()]
            for i in np.flatnonzero((got == 0) & np.signbit(got)).tolist():
                keys[i] = (0, keys[i][1], -2)
            for i in np.flatnonzero(np.isnan(got)).tolist():
                keys[i] = (1, 0, 0)
            return keys
        if kind == "O":
            values = got.tolist()
            if any(v is None for v in values):
                return None
            return [extreme_key(v) for v in values]
        return None

    def remove(self, state: SortedList, values: list[Any]) -> SortedList:
        get, who = self._get, self.udm_name
        if type(state) is Best:
            raise ValueError(f"{who}.remove: this state keeps only the extreme (an insert-only "
                             f"operator made it with add_insert_only_ranges), so nothing can "
                             f"be removed from it; use add_ranges for states that see removals")
        for p in values:
            v = get(p)
            sorted_remove(state, extreme_key(v), who, v)
        return state


class Min(Extreme):
    """The smallest ``field`` value in the window (``None`` for an empty state); NaN is the
    minimum only when every value is NaN; of equal values, the lowest ranked (``-0.0``, then
    an int, then a float: see the module's type rule).

    >>> Min("t").compute([{"t": 4}, {"t": -2}, {"t": 9}])
    -2
    >>> Min().compute([0.0, -0.0]), Min().compute([2.0, 2])
    (-0.0, 2)
    """

    @staticmethod
    def _extreme(keys: list[Any]) -> Any:
        return min(keys)


class Max(Extreme):
    """The largest ``field`` value in the window (``None`` for an empty state); NaN ranks
    above every number; of equal values, the highest ranked (a float, then an int, then
    ``-0.0``: see the module's type rule).

    >>> Max().compute([3.5, 1.0, 2.25])
    3.5
    >>> Max().compute([-0.0, 0]), Max().compute([2, 2.0])
    (0, 2.0)
    """

    _largest = True

    @staticmethod
    def _extreme(keys: list[Any]) -> Any:
        return max(keys)
