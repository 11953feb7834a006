"""The built-in aggregates (docs/udm.md): Count, CountDistinct, Sum, Avg, Min, Max, TopK,
TimeWeightedAverage.

Every built-in is an :class:`~operators.udm.IncrementalAggregate`: a window operator keeps one
state per window and feeds it the deltas (events that joined or left the window since the last
call), so a window's result never needs a pass over all of its events. Each also offers
``compute(...)``, the same result from scratch, and is registered under a lowercase name::

    >>> Avg("kwh").compute([{"kwh": 1.0}, {"kwh": 2.0}, {"kwh": 4.5}])
    2.5
    >>> s = Max("kwh").initial_state()
    >>> s = Max("kwh").add(s, [{"kwh": 7}, {"kwh": 3}])
    >>> s = Max("kwh").remove(s, [{"kwh": 7}])
    >>> Max("kwh").result(s)
    3
    >>> from operators.udm import resolve
    >>> resolve("topk", 2, by="kwh").compute([{"kwh": 1}, {"kwh": 9}, {"kwh": 5}])
    ({'kwh': 9}, {'kwh': 5})

Results depend only on the multiset of events in the window, never on the order in which
they were added or removed: the engine recomputes and retracts results, and compares them with
a from-scratch evaluation, so ``add(a); add(b); remove(a)`` must give exactly ``add(b)``. Sums
are therefore kept *exactly* (floats as integers scaled by 2**1074, every finite double being
a multiple of 2**-1074), and a float result is the exact value correctly rounded once.

Floating-point NaN follows Spark: it ranks above every other number (Max and descending TopK
put it first) and makes a Sum or Avg NaN.

Result types follow one rule, whatever the order of the events (SQL's and numpy's; see
docs/operators.md#aggregate-result-types): a Sum of ints is an exact int, and a Sum with any
float among its terms is a float (``Sum`` of ``[2, -0.0]`` is ``2.0`` either way; a zero float
sum is ``0.0``). Min and Max return one of the window's values; among values that compare
equal they pick by a fixed rank, ``-0.0`` below a bool below an int below a float (``Max`` of
``[0, -0.0]`` is ``0``, ``Min`` is ``-0.0``; ``Max`` of ``[2, 2.0]`` is ``2.0``, ``Min`` is
``2``), as Java's ``Math.max`` ranks ``-0.0`` below ``0.0``.

``field`` (and ``by``) is a callable of the payload or a dict key / attribute name; ``None``
means the payload itself. States are plain picklable objects: the runtime checkpoints them.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from .columns import map_columns
from .events import MAX_TIME, MIN_TIME, fmt_time
from .expr import evaluate, trace
from .udm import ColumnAggregate, IncrementalAggregate, Window, field_getter, register, resolve

__all__ = ["Aggregates", "Avg", "Count", "CountDistinct", "Max", "Min", "Sum",
           "TimeWeightedAverage", "TopK",
           "canonical"]

# Every finite double is an integer multiple of 2**-1074 (the smallest subnormal).
_SCALE_BITS = 1074


class _Builtin(IncrementalAggregate):
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
        if type(self).add_groups is _Builtin.add_groups:
            return None  # no column-wise add at all: copying the rows would be wasted
        rows, bounds = _range_rows(lo, hi)
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


# -- Count ------------------------------------------------------------------------------------
class Count(_Builtin):
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
        if self.where is None:
            return [(0 if s is None else s) + (b - a)
                    for s, a, b in zip(states, bounds, bounds[1:])]
        mask = self._mask(columns, bounds[-1])
        if mask is None:
            return None
        sums = np.concatenate(([0], np.cumsum(mask, dtype=np.int64))).tolist()
        return [(0 if s is None else s) + sums[b] - sums[a]
                for s, a, b in zip(states, bounds, bounds[1:])]

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        if self.where is None:
            return [(0 if s is None else s) + (b - a) for s, a, b in zip(states, lo, hi)]
        mask = self._mask(columns, n)
        if mask is None:
            return None
        sums = np.concatenate(([0], np.cumsum(mask, dtype=np.int64))).tolist()
        return [(0 if s is None else s) + sums[b] - sums[a] for s, a, b in zip(states, lo, hi)]

    def remove(self, state: int, values: list[Any]) -> int:
        n = self._n(values)
        if n > state:
            raise ValueError(f"Count.remove: removing {n} events from a window that "
                             f"holds {state}; remove only events that were added")
        return state - n

    def result(self, state: int) -> int:
        return state

    def copy_state(self, state: int) -> int:
        return state


# -- exact sums -------------------------------------------------------------------------------
class _ExactSum:
    """An exact running sum of numbers under addition and subtraction.

    ints and finite floats go into one integer scaled by 2**1074 (exact, never overflows);
    infinities and NaNs are counted; other numbers (Fraction, Decimal, complex) are summed as
    they are. ``n`` counts the terms, ``n_float`` the float ones (a float term makes the sum a
    float, as in Python's ``sum``)."""

    __slots__ = ("n", "n_float", "n_other", "nan", "neg_inf", "other", "pos_inf", "scaled")

    def __init__(self) -> None:
        self.n = 0
        self.n_float = 0
        self.scaled = 0
        self.other: Any = 0
        self.n_other = 0
        self.nan = 0
        self.pos_inf = 0
        self.neg_inf = 0

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, s) for s in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"_ExactSum(n={self.n}, value={self.value()!r})"

    def copy(self) -> _ExactSum:
        twin = _ExactSum.__new__(_ExactSum)
        for name in self.__slots__:  # all immutable numbers
            setattr(twin, name, getattr(self, name))
        return twin

    def update(self, value: Any, sign: int, weight: int, who: str) -> None:
        """Add (sign=1) or subtract (sign=-1) ``value * weight`` (weight a non-negative int)."""
        kind = type(value)
        if kind is int or (kind is not float and isinstance(value, numbers.Integral)):
            self.scaled += sign * ((int(value) * weight) << _SCALE_BITS)
        elif kind is float or (isinstance(value, numbers.Real)
                               and not isinstance(value, numbers.Rational)):
            x = float(value)
            self.n_float += sign
            if math.isfinite(x):
                num, den = x.as_integer_ratio()
                # den is a power of two no larger than 2**1074
                self.scaled += sign * ((num * weight) << (_SCALE_BITS + 1 - den.bit_length()))
            elif math.isnan(x):
                self.nan += sign
            elif weight == 0:
                # inf * 0 is NaN in IEEE arithmetic
                self.nan += sign
            elif x > 0:
                self.pos_inf += sign
            else:
                self.neg_inf += sign
        elif isinstance(value, numbers.Number):
            # Number declares no arithmetic; the ones that get here (Fraction, Decimal) have it
            self.other = (self.other + value * weight  # type: ignore[operator]
                          if sign > 0 else self.other - value * weight)  # type: ignore[operator]
            self.n_other += sign
        else:
            raise TypeError(f"{who}: {value!r} ({type(value).__name__}) is not a number; pass a "
                            f"field (a key, attribute or function) that reads a number from "
                            f"the payload")
        self.n += sign

    def _special(self) -> float | None:
        if self.nan or (self.pos_inf and self.neg_inf):
            return math.nan
        if self.pos_inf:
            return math.inf
        if self.neg_inf:
            return -math.inf
        return None

    def divided(self, divisor: int) -> Any:
        """The sum divided by the positive int ``divisor``: ints and floats give the exact
        quotient correctly rounded to a float; Fraction and Decimal sums keep their type."""
        special = self._special()
        if special is not None:
            return special
        if self.n_other:
            return self.value() / divisor
        try:
            return self.scaled / (divisor << _SCALE_BITS)
        except OverflowError:
            return math.inf if self.scaled > 0 else -math.inf

    def value(self) -> Any:
        """The sum: an exact int when every term is an int, else the exact sum rounded once."""
        special = self._special()
        if special is not None:
            return special
        if self.n_float:
            plain: Any = self.divided(1) if not self.n_other else self.scaled / (1 << _SCALE_BITS)
        else:
            plain = self.scaled >> _SCALE_BITS
        return plain + self.other if self.n_other else plain


def _exact_group_sums(states: list[Any], column: np.ndarray,
                      bounds: Sequence[int]) -> list[_ExactSum]:
    """Add each group's values (``column[bounds[j]:bounds[j + 1]]``, finite normal float64)
    to ``states[j]`` (a new :class:`_ExactSum` for None), exactly, with numpy: each such
    double is ``m · 2**(e - 53)`` with an integer ``m`` below 2**53, so its scaled value (see
    :class:`_ExactSum`) is ``m << (e + 1021)``; the ``m`` of a group are summed in int64 (in
    two 26-bit halves, which cannot overflow) relative to the group's smallest exponent, or
    per exponent when a group's exponents lie far apart, and shifted once per sum."""
    mantissa, exponent = np.frexp(column)
    m = (mantissa * 2.0**53).astype(np.int64)
    shift = exponent.astype(np.int64) + 1021
    sizes = np.diff(bounds)
    group = np.repeat(np.arange(len(states)), sizes)
    out = [_ExactSum() if s is None else s for s in states]
    first = np.asarray(bounds[:-1])
    low = np.minimum.reduceat(shift, first)
    # halves of < 2**27, shifted by up to `room` bits, summed over a group: below 2**62
    room = 62 - 27 - int(sizes.max()).bit_length()
    if int((np.maximum.reduceat(shift, first) - low).max()) <= room:
        # one shift per group: the group's terms relative to its smallest exponent
        rel = shift - low[group]
        high_sums = np.add.reduceat((m >> 26) << rel, first).tolist()
        low_sums = np.add.reduceat((m & ((1 << 26) - 1)) << rel, first).tolist()
        for s, h, lo, base in zip(out, high_sums, low_sums, low.tolist()):
            s.scaled += (h << (base + 26)) + (lo << base)
    else:  # one shift per (group, exponent)
        key = group * 4096 + shift
        order = np.argsort(key, kind="stable")
        key, m = key[order], m[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        high_sums = np.add.reduceat(m >> 26, starts).tolist()
        low_sums = np.add.reduceat(m & ((1 << 26) - 1), starts).tolist()
        for k, h, lo in zip(key[starts].tolist(), high_sums, low_sums):
            s = k & 4095
            out[k >> 12].scaled += (h << (s + 26)) + (lo << s)
    for s, a, b in zip(out, bounds, bounds[1:]):
        s.n += b - a
        s.n_float += b - a
    return out


def _range_rows(lo: Sequence[int], hi: Sequence[int]) -> tuple[np.ndarray, list[int]]:
    """The rows of the ranges ``lo[j]:hi[j]`` one after the other, and the bounds of each
    range in that sequence."""
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    sizes = hi_a - lo_a
    bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    # row i of range j is lo[j] + (i - bounds[j])
    rows = np.arange(int(bounds[-1]), dtype=np.int64) + np.repeat(lo_a - bounds[:-1], sizes)
    return rows, bounds.tolist()


def _exact_range_sums(states: list[Any], column: np.ndarray, lo: Sequence[int],
                      hi: Sequence[int]) -> list[_ExactSum]:
    """:func:`_exact_group_sums` for (possibly overlapping) row ranges: the mantissas of
    every row, relative to the column's smallest exponent, are summed once as prefix sums in
    int64 (two 26-bit halves; the shifts must leave room for the whole column's sum, else the
    ranges are copied out and summed group by group), and each range's sum is the difference
    of two prefix sums, shifted once."""
    n = len(column)
    mantissa, exponent = np.frexp(column)
    m = (mantissa * 2.0**53).astype(np.int64)
    shift = exponent.astype(np.int64) + 1021
    nonzero = m != 0  # a zero adds nothing whatever its shift: leave it out of the range
    base = int(shift[nonzero].min()) if nonzero.any() else 0
    rel = np.where(nonzero, shift - base, 0)
    # halves of < 2**27, shifted by up to `room` bits, summed over all n rows: below 2**62
    room = 62 - 27 - n.bit_length()
    if int(rel.max()) > room:
        rows, bounds = _range_rows(lo, hi)
        return _exact_group_sums(states, column[rows], bounds)
    high = np.zeros(n + 1, dtype=np.int64)
    low = np.zeros(n + 1, dtype=np.int64)
    np.cumsum((m >> 26) << rel, out=high[1:])
    np.cumsum((m & ((1 << 26) - 1)) << rel, out=low[1:])
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    high_sums = (high[hi_a] - high[lo_a]).tolist()
    low_sums = (low[hi_a] - low[lo_a]).tolist()
    out = [_ExactSum() if s is None else s for s in states]
    for s, h, lo_sum, size in zip(out, high_sums, low_sums, (hi_a - lo_a).tolist()):
        s.scaled += (h << (base + 26)) + (lo_sum << base)
        s.n += size
        s.n_float += size
    return out


def _int_range_sums(states: list[Any], column: np.ndarray, lo: Sequence[int],
                    hi: Sequence[int]) -> list[_ExactSum]:
    """The states after adding the int ``column``'s rows ``lo[j]:hi[j]`` to ``states[j]``
    (None: a new one): exactly what ``update`` of each int gives, from int64 prefix sums
    (the caller checked that no sum leaves int64)."""
    prefix = np.zeros(len(column) + 1, dtype=np.int64)
    np.cumsum(column, dtype=np.int64, out=prefix[1:])
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    out = []
    for state, total, count in zip(states, (prefix[hi_a] - prefix[lo_a]).tolist(),
                                   (hi_a - lo_a).tolist()):
        state = _ExactSum() if state is None else state
        state.scaled += total << _SCALE_BITS
        state.n += count
        out.append(state)
    return out


class Sum(_Builtin):
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

    def initial_state(self) -> _ExactSum:
        return _ExactSum()

    def copy_state(self, state: _ExactSum) -> _ExactSum:
        return state.copy()

    def add(self, state: _ExactSum, values: list[Any]) -> _ExactSum:
        get, who = self._get, self.udm_name
        for v in values:
            state.update(get(v), 1, 1, who)
        return state

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        column = self._column(columns, bounds[-1])
        if column is not None and column.dtype.kind in "iu":
            return _int_range_sums(states, column, bounds[:-1], bounds[1:])
        return None if column is None else _exact_group_sums(states, column, bounds)

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        column = self._column(columns, n)
        if column is not None and column.dtype.kind in "iu":
            return _int_range_sums(states, column, lo, hi)
        return None if column is None else _exact_range_sums(states, column, lo, hi)

    def remove(self, state: _ExactSum, values: list[Any]) -> _ExactSum:
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

    def result(self, state: _ExactSum) -> Any:
        return state.value()


class Avg(Sum):
    """The mean of ``field`` over the window's events: the exact sum divided by the count,
    rounded once; ``None`` for an empty state (the engine never asks: windows are non-empty).

    >>> Avg().compute([1, 2])
    1.5
    """

    def result(self, state: _ExactSum) -> Any:
        if state.n == 0:
            return None
        return state.divided(state.n)


# -- several at once ---------------------------------------------------------------------------
class Aggregates(_Builtin):
    """Several incremental aggregates of the same window at once: the result is a dict
    ``{name: result}`` (one output event per window, one field per aggregate, as Spark's
    ``agg(count(...), sum(...))`` gives). Column-wise when every part is.

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
        for i, p in enumerate(self.parts.values()):
            mine = [s[i] for s in states]
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
        per_part = [p.add_groups([None if s is None else s[i] for s in states], columns, bounds)
                    for i, p in enumerate(self._columnar)]
        return [list(group) for group in zip(*per_part)]

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        if self._columnar is None or not self.column_ready(columns, n):
            return None  # checked first: no part may add when another cannot
        per_part = [p.add_ranges([None if s is None else s[i] for s in states],
                                 columns, n, lo, hi)
                    for i, p in enumerate(self._columnar)]
        return [list(group) for group in zip(*per_part)]

    def add_insert_only_ranges(self, states: list[Any], columns: Any, n: int,
                               lo: Sequence[int], hi: Sequence[int]) -> list[Any] | None:
        """:meth:`add_ranges` with each part's ``add_insert_only_ranges`` (where it has one)."""
        if self._columnar is None or not self.column_ready(columns, n):
            return None  # checked first: no part may add when another cannot
        per_part = [getattr(p, "add_insert_only_ranges", p.add_ranges)(
                        [None if s is None else s[i] for s in states], columns, n, lo, hi)
                    for i, p in enumerate(self._columnar)]
        return [list(group) for group in zip(*per_part)]


def _aggregates(parts: dict[str, Any]) -> Aggregates:
    return Aggregates(**parts)


# -- Min, Max, TopK: sorted multisets ---------------------------------------------------------
def _order_key(value: Any) -> tuple[int, Any]:
    """A sort key ranking NaN above every other value (as Spark does), so sorted containers
    keep their invariant when a NaN arrives."""
    if isinstance(value, numbers.Real) and value != value:
        return (1, 0)
    return (0, value)


#: The rank among equal values of the types whose values all rank 0 (:func:`_tie`), found
#: without an ABC check: ``_PLAIN_TIE(type(v))``, None for any other type.
_PLAIN_TIE = {int: 0, str: 0, bytes: 0, type(None): 0}.get


def _tie(value: Any) -> Any:
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
            ties = tuple(_tie(v) if t is None else t for v, t in zip(value, ties))
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


def _extreme_key(value: Any) -> tuple[int, Any, Any]:
    """The sort key of a Min/Max state: NaN above every other value (:func:`_order_key`), then
    the value, then its rank among equal values (:func:`_tie`)."""
    kind = type(value)
    if kind is float:  # the common cases first: an ABC check costs a Max a third of its time
        if value != value:
            return (1, 0, 0)
        return (0, value, -2 if value == 0 and math.copysign(1.0, value) < 0 else 2)
    if kind is int:
        return (0, value, 0)
    if kind is tuple:  # (a tuple is not a number: no NaN check)
        return (0, value, _tie(value))
    if isinstance(value, numbers.Real) and value != value:
        return (1, 0, 0)
    return (0, value, _tie(value))


def _sorted_add(sl: SortedList, key: Any, who: str, value: Any) -> None:
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
        _sorted_add(sl, k, who, math.nan if k[0] else k[1])


def _sorted_remove(sl: SortedList, key: Any, who: str, value: Any) -> None:
    try:
        sl.remove(key)
    except (ValueError, TypeError):
        raise ValueError(f"{who}.remove: {value!r} is not in the window's state; remove only "
                         f"events that were added (and a field that reads the same value "
                         f"every time)") from None


class _Best:
    """An insert-only Min/Max state (:meth:`_Builtin.add_insert_only_ranges`): the order key
    (:func:`_extreme_key`) of the extreme alone, where the general state keeps every value's
    key so that a removal can reveal the next one."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, Any, Any]) -> None:
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Best, (self.key,))

    def __repr__(self) -> str:
        return f"_Best({self.key!r})"

    def __len__(self) -> int:
        return 1


class _Extreme(_Builtin):
    """Min and Max: the window's values in a sorted multiset (a SortedList of
    :func:`_extreme_key`), so removing the current extreme reveals the next one in O(log n),
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

    def copy_state(self, state: SortedList | _Best) -> SortedList | _Best:
        return _Best(state.key) if isinstance(state, _Best) else state.copy()

    def _merged(self, state: _Best, keys: list[Any]) -> _Best:
        """The insert-only ``state`` with ``keys`` added: the extreme of the two."""
        try:
            return _Best(self._extreme([state.key, *keys]))
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
            keys = [_extreme_key(v) for v in got]
            best = [self._extreme(keys)] if keys else []
        except Exception:  # noqa: BLE001 -- the state's path raises the clear error
            return super().compute(values)
        return self.result(best)

    #: Max (else Min)
    _largest = False

    @staticmethod
    def _extreme(keys: list[Any]) -> Any:
        raise NotImplementedError

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
            keys.append(_extreme_key(v))
        if type(state) is _Best:
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
        a ``lexsort`` within the ranges), kept alone as the state (:class:`_Best`): no order
        key per value, no sorted state. Number columns only, floats without NaN or zero (their
        rank among equal values is :func:`_tie`'s business), and states that are new or
        insert-only; anything else takes :meth:`add_ranges`."""
        got = evaluate(trace(self._get), columns, n)
        cols = _number_columns(got, n)
        if (cols is None or not n or not all(s is None or type(s) is _Best for s in states)
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
        return [_Best(k) if s is None else self._merged(s, [k]) for s, k in zip(states, keys)]

    def _range_extremes(self, cols: tuple[np.ndarray, ...], lo: Sequence[int],
                        hi: Sequence[int]) -> tuple[np.ndarray, ...]:
        """Per range ``lo[j]:hi[j]`` (never empty) the row values of its extreme: one column
        by a ``reduceat``; a tuple of columns (compared item by item, as tuples compare) by a
        ``lexsort`` of the ranges' rows, the range's last (Max) or first (Min) row."""
        rows, bounds = _range_rows(lo, hi)
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
            if type(state) is _Best:
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
        """The order keys (:func:`_extreme_key`) of the field's ``n`` values ``got``,
        evaluated column-wise (no payload objects; a field returning a tuple of columns gives
        tuples), or None where :meth:`add` must see the payloads: the field does not run
        column-wise, or a value is None (``add`` says so)."""
        if type(got) is tuple:
            if not all(isinstance(c, np.ndarray) and c.shape == (n,) for c in got):
                return None
            values = zip(*(c.tolist() for c in got))
            if all(c.dtype.kind in "biu" for c in got):  # (Q7's (price, auction, bidder))
                # every tuple's rank among equal values is the same: its items' (_tie)
                tie = tuple(-1 if c.dtype.kind == "b" else 0 for c in got)
                return [(0, v, tie) for v in values]
            return [_extreme_key(v) for v in values]
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
            return [_extreme_key(v) for v in values]
        return None

    def remove(self, state: SortedList, values: list[Any]) -> SortedList:
        get, who = self._get, self.udm_name
        if type(state) is _Best:
            raise ValueError(f"{who}.remove: this state keeps only the extreme (an insert-only "
                             f"operator made it with add_insert_only_ranges), so nothing can "
                             f"be removed from it; use add_ranges for states that see removals")
        for p in values:
            v = get(p)
            _sorted_remove(state, _extreme_key(v), who, v)
        return state


class Min(_Extreme):
    """The smallest ``field`` value in the window (``None`` for an empty state); NaN is the
    minimum only when every value is NaN; of equal values, the lowest ranked (``-0.0``, then
    an int, then a float: see the module's type rule).

    >>> Min("t").compute([{"t": 4}, {"t": -2}, {"t": 9}])
    -2
    >>> Min().compute([0.0, -0.0]), Min().compute([2.0, 2])
    (-0.0, 2)
    """

    def result(self, state: SortedList | _Best) -> Any:
        if isinstance(state, _Best):
            flag, value, _ = state.key
            return math.nan if flag else value
        if not state:
            return None
        flag, value, _ = state[0]
        return math.nan if flag else value

    @staticmethod
    def _extreme(keys: list[Any]) -> Any:
        return min(keys)


class Max(_Extreme):
    """The largest ``field`` value in the window (``None`` for an empty state); NaN ranks
    above every number; of equal values, the highest ranked (a float, then an int, then
    ``-0.0``: see the module's type rule).

    >>> Max().compute([3.5, 1.0, 2.25])
    3.5
    >>> Max().compute([-0.0, 0]), Max().compute([2, 2.0])
    (0, 2.0)
    """

    def result(self, state: SortedList | _Best) -> Any:
        if isinstance(state, _Best):
            flag, value, _ = state.key
            return math.nan if flag else value
        if not state:
            return None
        flag, value, _ = state[-1]
        return math.nan if flag else value

    _largest = True

    @staticmethod
    def _extreme(keys: list[Any]) -> Any:
        return max(keys)


def canonical(payload: Any) -> str:
    """A deterministic text form of a payload, equal for equal payloads whatever their dict
    insertion or set iteration order: the tie-breaker of :class:`TopK`.

    >>> canonical({"b": 1, "a": {2, 1}})
    "{'a': {1, 2}, 'b': 1}"
    """
    if isinstance(payload, dict):
        items = sorted((canonical(k), canonical(v)) for k, v in payload.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(payload, (set, frozenset)):
        inner = ", ".join(sorted(canonical(v) for v in payload))
        return "{" + inner + "}" if type(payload) is set else f"frozenset({{{inner}}})"
    if isinstance(payload, tuple) and hasattr(payload, "_fields"):
        fields = ", ".join(f"{f}={canonical(v)}" for f, v in zip(payload._fields, payload))
        return f"{type(payload).__name__}({fields})"
    if isinstance(payload, list):
        return "[" + ", ".join(canonical(v) for v in payload) + "]"
    if isinstance(payload, tuple):
        return "(" + ", ".join(canonical(v) for v in payload) + (",)" if len(payload) == 1
                                                                 else ")")
    return repr(payload)


class _TopKState:
    """The window's payloads ranked: a SortedList of ``(order_key(by), canonical)`` entries
    plus the payloads behind each canonical form (payloads need not be comparable)."""

    __slots__ = ("payloads", "ranked")

    def __init__(self) -> None:
        self.ranked = SortedList()
        self.payloads: dict[str, list[Any]] = {}

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.payloads, self.ranked)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.payloads, self.ranked = state

    def __len__(self) -> int:
        return len(self.ranked)


class TopK(_Builtin):
    """The ``k`` payloads with the largest ``by`` values (smallest with ``descending=False``),
    as a tuple in rank order.

    The ranking is ``sorted(payloads, key=(by(p), canonical(p)), reverse=descending)[:k]``:
    ties on ``by`` are broken by :func:`canonical`, so the result does not depend on arrival
    order. Payloads should have a value ``repr`` (dicts, tuples, dataclasses, ...); the result
    is hashable when the payloads are.

    >>> TopK(2, by="score").compute([{"score": 3, "n": "a"}, {"score": 8, "n": "b"},
    ...                              {"score": 3, "n": "c"}])
    ({'score': 8, 'n': 'b'}, {'score': 3, 'n': 'c'})
    >>> TopK(2, descending=False).compute([5, 1, 4, 1])
    (1, 1)
    """

    def __init__(self, k: int, by: Any = None, descending: bool = True) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"TopK: k must be a positive int (how many payloads to keep), "
                             f"got {k!r}")
        self.k = k
        self.by = by
        self.descending = bool(descending)
        self._args = (k, by, self.descending)
        self._get: Callable[[Any], Any] = field_getter(by)

    def __repr__(self) -> str:
        order = "" if self.descending else ", descending=False"
        return f"TopK({self.k!r}, by={self.by!r}{order})"

    def initial_state(self) -> _TopKState:
        return _TopKState()

    def copy_state(self, state: _TopKState) -> _TopKState:
        twin = _TopKState()
        twin.ranked = state.ranked.copy()
        twin.payloads = {c: list(same) for c, same in state.payloads.items()}
        return twin

    def add(self, state: _TopKState, values: list[Any]) -> _TopKState:
        get, who = self._get, self.udm_name
        for p in values:
            v = get(p)
            c = canonical(p)
            _sorted_add(state.ranked, (_order_key(v), c), who, v)
            state.payloads.setdefault(c, []).append(p)
        return state

    def remove(self, state: _TopKState, values: list[Any]) -> _TopKState:
        get, who = self._get, self.udm_name
        for p in values:
            v = get(p)
            c = canonical(p)
            _sorted_remove(state.ranked, (_order_key(v), c), who, p)
            same = state.payloads[c]
            # equal canonical forms are (nearly always) equal payloads; prefer the equal one
            for i, q in enumerate(same):
                if q is p or _safe_eq(q, p):
                    del same[i]
                    break
            else:
                same.pop()
            if not same:
                del state.payloads[c]
        return state

    def result(self, state: _TopKState) -> tuple[Any, ...]:
        ranked, n = state.ranked, min(self.k, len(state.ranked))
        entries = ranked[len(ranked) - n:][::-1] if self.descending else ranked[:n]
        return tuple(state.payloads[c][0] for _, c in entries)


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 -- e.g. numpy arrays: fall back to the canonical match
        return False


# -- CountDistinct ----------------------------------------------------------------------------
class CountDistinct(_Builtin):
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


# -- TimeWeightedAverage ----------------------------------------------------------------------
class TimeWeightedAverage(_Builtin):
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

    def initial_state(self) -> _ExactSum:
        return _ExactSum()

    def copy_state(self, state: _ExactSum) -> _ExactSum:
        return state.copy()

    def _duration(self, start: int, end: int) -> int:
        if end >= MAX_TIME or start <= MIN_TIME or end < start:
            raise ValueError(f"{self.udm_name}: the event lifetime [{fmt_time(start)}, "
                             f"{fmt_time(end)}) has no finite duration to weight its value by; "
                             f"window the stream with clip=\"full\" (the default) or "
                             f"clip=\"right\" so lifetimes are cut to the window")
        return end - start

    def add(self, state: _ExactSum, values: list[tuple[int, int, Any]]) -> _ExactSum:
        get, who = self._get, self.udm_name
        for start, end, payload in values:
            state.update(get(payload), 1, self._duration(start, end), who)
        return state

    def remove(self, state: _ExactSum, values: list[tuple[int, int, Any]]) -> _ExactSum:
        if len(values) > state.n:
            raise ValueError(f"{self.udm_name}.remove: removing {len(values)} events from a "
                             f"window that holds {state.n}; remove only events that were added")
        get, who = self._get, self.udm_name
        for start, end, payload in values:
            state.update(get(payload), -1, self._duration(start, end), who)
        return state

    def result(self, state: _ExactSum) -> Any:
        raise TypeError(f"{self.udm_name} is time-sensitive: its result depends on the window; "
                        f"call window_result(state, window)")

    column_ready = Sum.column_ready
    _column = Sum._column  # borrowed: it reads only self._get

    def add_groups(self, states: list[Any], columns: Any,
                   bounds: Sequence[int]) -> list[Any] | None:
        """Column-wise :meth:`add` of **point** events (what the keyed window aggregate
        sends): each lasts one tick inside its window, so it weighs its value by 1."""
        column = self._column(columns, bounds[-1])  # type: ignore[misc]  # see _column
        return None if column is None else _exact_group_sums(states, column, bounds)

    def add_ranges(self, states: list[Any], columns: Any, n: int, lo: Sequence[int],
                   hi: Sequence[int]) -> list[Any] | None:
        """Column-wise :meth:`add` of point events, as :meth:`add_groups`."""
        column = self._column(columns, n)  # type: ignore[misc]  # see _column
        return None if column is None else _exact_range_sums(states, column, lo, hi)

    def window_result(self, state: _ExactSum, window: Window) -> Any:
        """``Σ value · duration / (window.end − window.start)``; ``None`` for an empty state."""
        start, end = window
        if end >= MAX_TIME or start <= MIN_TIME or end <= start:
            raise ValueError(f"{self.udm_name}: the window [{fmt_time(start)}, {fmt_time(end)}) "
                             f"has no finite positive length to average over; use a window "
                             f"with finite bounds")
        if state.n == 0:
            return None
        return state.divided(end - start)


# -- the registry -----------------------------------------------------------------------------
_BUILTINS: dict[str, Callable[..., Any]] = {
    "count": Count,
    "count_distinct": CountDistinct,
    "sum": Sum,
    "avg": Avg,
    "min": Min,
    "max": Max,
    "topk": TopK,
    "twa": TimeWeightedAverage,
    "time_weighted_average": TimeWeightedAverage,
}
for _name, _cls in _BUILTINS.items():
    register(_name, _cls)

