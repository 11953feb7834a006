"""Exact sums: :class:`ExactSum`, the running sum of numbers under addition and subtraction that
Sum, Avg and TimeWeightedAverage keep, and its column-wise additions (numpy)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import range_rows

# Every finite double is an integer multiple of 2**-1074 (the smallest subnormal).
SCALE_BITS = 1074


class ExactSum:
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
        return f"ExactSum(n={self.n}, value={self.value()!r})"

    def copy(self) -> ExactSum:
        twin = ExactSum.__new__(ExactSum)
        for name in self.__slots__:  # all immutable numbers
            setattr(twin, name, getattr(self, name))
        return twin

    def update(self, value: Any, sign: int, weight: int, who: str) -> None:
        """Add (sign=1) or subtract (sign=-1) ``value * weight`` (weight a non-negative int)."""
        kind = type(value)
        if kind is int or (kind is not float and isinstance(value, numbers.Integral)):
            self.scaled += sign * ((int(value) * weight) << SCALE_BITS)
        elif kind is float or (isinstance(value, numbers.Real)
                               and not isinstance(value, numbers.Rational)):
            x = float(value)
            self.n_float += sign
            if math.isfinite(x):
                num, den = x.as_integer_ratio()
                # den is a power of two no larger than 2**1074
                self.scaled += sign * ((num * weight) << (SCALE_BITS + 1 - den.bit_length()))
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
            return self.scaled / (divisor << SCALE_BITS)
        except OverflowError:
            return math.inf if self.scaled > 0 else -math.inf

    def value(self) -> Any:
        """The sum: an exact int when every term is an int, else the exact sum rounded once."""
        special = self._special()
        if special is not None:
            return special
        if self.n_float:
            plain: Any = self.divided(1) if not self.n_other else self.scaled / (1 << SCALE_BITS)
        else:
            plain = self.scaled >> SCALE_BITS
        return plain + self.other if self.n_other else plain


#: An insert-only Sum or Avg state over ints, ``(total, count)`` as plain ints
#: (:meth:`operators.aggregates.Sum.add_insert_only_ranges`).
IntTotal = tuple[int, int]


def exact(state: ExactSum | IntTotal | None) -> ExactSum:
    """``state`` as an :class:`ExactSum` (a new one for None; an :data:`IntTotal` scaled)."""
    if state is None:
        return ExactSum()
    if type(state) is not tuple:
        return state  # type: ignore[return-value]
    full = ExactSum()
    full.scaled = state[0] << SCALE_BITS
    full.n = state[1]
    return full


def exact_group_sums(states: list[Any], column: np.ndarray,
                      bounds: Sequence[int]) -> list[ExactSum]:
    """Add each group's values (``column[bounds[j]:bounds[j + 1]]``, finite normal float64)
    to ``states[j]`` (a new :class:`ExactSum` for None), exactly, with numpy: each such
    double is ``m · 2**(e - 53)`` with an integer ``m`` below 2**53, so its scaled value (see
    :class:`ExactSum`) is ``m << (e + 1021)``; the ``m`` of a group are summed in int64 (in
    two 26-bit halves, which cannot overflow) relative to the group's smallest exponent, or
    per exponent when a group's exponents lie far apart, and shifted once per sum."""
    mantissa, exponent = np.frexp(column)
    m = (mantissa * 2.0**53).astype(np.int64)
    shift = exponent.astype(np.int64) + 1021
    sizes = np.diff(bounds)
    group = np.repeat(np.arange(len(states)), sizes)
    out = [ExactSum() if s is None else s for s in states]
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


def exact_range_sums(states: list[Any], column: np.ndarray, lo: Sequence[int],
                      hi: Sequence[int]) -> list[ExactSum]:
    """:func:`exact_group_sums` for (possibly overlapping) row ranges: the mantissas of
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
        rows, bounds = range_rows(lo, hi)
        return exact_group_sums(states, column[rows], bounds)
    high = np.zeros(n + 1, dtype=np.int64)
    low = np.zeros(n + 1, dtype=np.int64)
    np.cumsum((m >> 26) << rel, out=high[1:])
    np.cumsum((m & ((1 << 26) - 1)) << rel, out=low[1:])
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    high_sums = (high[hi_a] - high[lo_a]).tolist()
    low_sums = (low[hi_a] - low[lo_a]).tolist()
    out = [ExactSum() if s is None else s for s in states]
    for s, h, lo_sum, size in zip(out, high_sums, low_sums, (hi_a - lo_a).tolist()):
        s.scaled += (h << (base + 26)) + (lo_sum << base)
        s.n += size
        s.n_float += size
    return out


def int_range_totals(column: np.ndarray, lo: Sequence[int],
                     hi: Sequence[int]) -> tuple[list[int], list[int]]:
    """The sum and the count of the int ``column``'s rows ``lo[j]:hi[j]``, from int64 prefix
    sums (the caller checked that no sum leaves int64)."""
    lo_a, hi_a = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    return int_range_column(column, lo_a, hi_a).tolist(), (hi_a - lo_a).tolist()


def int_range_column(column: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """:func:`int_range_totals`' sums as an int64 column (``lo``, ``hi``: int64 arrays)."""
    prefix = np.zeros(len(column) + 1, dtype=np.int64)
    np.cumsum(column, dtype=np.int64, out=prefix[1:])
    return prefix[hi] - prefix[lo]


def int_range_sums(states: list[Any], column: np.ndarray, lo: Sequence[int],
                    hi: Sequence[int]) -> list[ExactSum]:
    """The states after adding the int ``column``'s rows ``lo[j]:hi[j]`` to ``states[j]``
    (None: a new one): exactly what ``update`` of each int gives (:func:`int_range_totals`)."""
    out = []
    for state, total, count in zip(states, *int_range_totals(column, lo, hi)):
        state = ExactSum() if state is None else state
        state.scaled += total << SCALE_BITS
        state.n += count
        out.append(state)
    return out
