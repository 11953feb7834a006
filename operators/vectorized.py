"""Vectorised ``select`` and ``where``: a user function of a whole batch of payload columns.

``operators.expr`` runs a per-payload function column-wise only where it can prove the result
exact (arithmetic and comparisons on numbers). Strings, regular expressions and time formats
are beyond it, so such a function runs once per event. ``select(fn, vectorized=True)`` and
``where(pred, vectorized=True)`` are the explicit alternative (Spark's ``pandas_udf``,
Flink's vectorised Python functions): ``fn`` takes the payload columns of a batch -- what a
:class:`~operators.columns.Columns` holds: a dict of numpy arrays for row dicts, a tuple of
arrays for tuples, one array for scalars -- and returns

* for ``select``: columns of the same length in one of those three forms (numpy arrays, or
  pyarrow arrays, which become numpy columns: numbers and bools without nulls as they are,
  anything else as an object array of the Python values a row would hold);
* for ``where``: a boolean mask of the batch's length (numpy ``bool`` or a pyarrow boolean
  array without nulls).

**Exact by contract.** The operator applies ``fn`` to a ``Columns`` batch as a whole, and to a
single ``Insert`` or ``Retract`` as a one-row batch (a retraction gets the same one-row
payload as its insert, so a deterministic ``fn`` gives it the same answer). ``fn`` must give
each row what it gives that row alone: no value may depend on the other rows of the batch
(no ranks, no batch means). A wrong length, form or type is a :class:`ValueError` or
:class:`TypeError` naming the step and saying what was expected.

:func:`per_value` is the exact way to run plain Python per value of a column: it calls ``fn``
once per distinct value and gathers -- Nexmark's urls, channels and minutes have few distinct
values among a million bids.

    >>> import numpy as np
    >>> upper = Vectorized(lambda c: {"k": c["k"], "name": per_value(str.upper, c["name"])})
    >>> upper({"k": 1, "name": "ab"})  # one payload: a one-row batch
    {'k': 1, 'name': 'AB'}
    >>> upper.columns({"k": np.array([1, 2]), "name": np.array(["a", "b"], dtype=object)}, 2)
    {'k': array([1, 2]), 'name': array(['A', 'B'], dtype=object)}
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .columns import arrow_column, known_arrow, one_row, remember_arrow, row_at

__all__ = ["Vectorized", "per_value"]


class Vectorized:
    """A ``select`` function (``mask=False``) or a ``where`` predicate (``mask=True``) of
    payload columns (see the module doc). Called on one payload, it runs on a one-row batch,
    so it works wherever a function of a payload does."""

    #: Marks a function of whole batches for :mod:`operators.expr` (never traced).
    batchwise = True

    def __init__(self, fn: Callable[[Any], Any], mask: bool = False,
                 step: str | None = None) -> None:
        if isinstance(fn, Vectorized):
            fn = fn.fn
        if not callable(fn):
            raise TypeError(f"vectorized: give a function of the payload columns, not {fn!r}")
        self.fn: Callable[[Any], Any] = fn
        self.mask, self.step = mask, step
        self.__name__ = getattr(fn, "__name__", repr(fn))

    def __repr__(self) -> str:
        return f"vectorized({self.__name__})"

    def __call__(self, payload: Any) -> Any:
        out = self.columns(one_row(payload), 1)
        return bool(out[0]) if self.mask else row_at(out, 0)

    def columns(self, payload: Any, n: int) -> Any:
        """``fn`` on ``n`` events' payload columns, checked: a mask of ``n`` bools, or payload
        columns of ``n`` values each."""
        out = self.fn(payload)
        if self.mask:
            return self._mask(out, n)
        if type(out) is dict:
            return {k: self._column(c, n, f"column {k!r}") for k, c in out.items()}
        if type(out) is tuple:
            return tuple(self._column(c, n, f"column {i}") for i, c in enumerate(out))
        return self._column(out, n, "column")

    def _where(self) -> str:
        verb = "where" if self.mask else "select"
        step = f" (step {self.step!r})" if self.step else ""
        return f"{verb}({self.__name__}, vectorized=True){step}"

    def _column(self, c: Any, n: int, what: str) -> np.ndarray:
        c = _numpy(c)
        if not isinstance(c, np.ndarray) or c.ndim != 1:
            raise TypeError(
                f"{self._where()} returned {what} as {type(c).__name__}: return a dict, a tuple "
                f"or one of them of 1-d numpy or pyarrow arrays, one value per event")
        if len(c) != n:
            raise ValueError(
                f"{self._where()} returned {what} of {len(c)} values for a batch of {n} "
                f"events: return one value per event, in the batch's order")
        return c

    def _mask(self, m: Any, n: int) -> np.ndarray:
        if _is_arrow(m):
            if m.null_count:
                raise ValueError(f"{self._where()} returned a mask with {m.null_count} nulls: "
                                 f"return True or False for every event")
            m = _numpy(m)
        if not isinstance(m, np.ndarray) or m.ndim != 1 or m.dtype != bool:
            what = (f"an array of {m.dtype}" if isinstance(m, np.ndarray)
                    else type(m).__name__)
            raise TypeError(f"{self._where()} returned {what}: return a boolean mask (a numpy "
                            f"bool array or a pyarrow boolean array), one value per event")
        if len(m) != n:
            raise ValueError(f"{self._where()} returned a mask of {len(m)} values for a batch "
                             f"of {n} events: return one value per event, in the batch's order")
        return m


def _is_arrow(c: Any) -> bool:
    return type(c).__module__.startswith("pyarrow") and hasattr(c, "null_count")


def _numpy(c: Any) -> Any:
    """A pyarrow array as the numpy column a source would make of it; anything else as is."""
    return arrow_column(c) if _is_arrow(c) else c


def per_value(fn: Callable[[Any], Any], column: np.ndarray) -> np.ndarray:
    """``[fn(v) for v in column]`` as a column, with ``fn`` called once per distinct value
    (so ``fn`` must be deterministic): exact, and fast where values repeat. The result is an
    int64, float64 or bool array when every result is a Python int (within int64), float or
    bool, else an object array.

    >>> per_value(len, np.array(["ab", "c", "ab"], dtype=object))
    array([2, 1, 2])
    >>> per_value(lambda h: "day" if 8 <= h <= 18 else "night", np.array([3, 9, 3]))
    array(['night', 'day', 'night'], dtype=object)
    """
    distinct, index = _distinct_once(np.asarray(column))
    results = [fn(v) for v in distinct]
    if not results:
        return _as_column([])
    out = _as_column(results)[index]
    if out.dtype == object:  # strings cross to Ray as Arrow, taken from the few results
        remember_arrow(out, lambda: _strings_taken(results, index))
    return out


def _strings_taken(results: list[Any], index: np.ndarray) -> Any:
    """The Arrow string array of ``results[index]`` (taken in Arrow from the distinct
    results, not built from a Python string per row), or None when the results are not all
    strings (or None)."""
    import pyarrow as pa

    try:
        words = pa.array(results)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None
    return words.take(index) if type(words) is pa.StringArray else None


#: The read-only column :func:`per_value` last grouped, and its groups (Q22 asks three
#: functions of one url column in a row: grouped once, not three times).
_LAST: list[Any] = [None, None]


def _distinct_once(column: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """:func:`_distinct` of ``column``, remembered for the next call on the same read-only
    column (a source's, which nothing changes)."""
    seen, groups = _LAST
    if seen is not None and seen() is column:
        return groups
    groups = _distinct(column)
    if not column.flags.writeable:
        _LAST[:] = [weakref.ref(column), groups]
    return groups


def _distinct(column: np.ndarray) -> tuple[list[Any], np.ndarray]:
    """The distinct values of ``column`` (Python values) and each row's index into them.
    Values are told apart as exactly as ``fn`` could tell them: by type, and floats by their
    bits (``0.0`` and ``-0.0`` are two values)."""
    if column.dtype.kind in "biu":
        values, index = np.unique(column, return_inverse=True)
        return values.tolist(), index.reshape(-1)
    if column.dtype.kind == "f":
        bits, index = np.unique(column.view(f"u{column.dtype.itemsize}"), return_inverse=True)
        return bits.view(column.dtype).tolist(), index.reshape(-1)
    import pyarrow as pa
    import pyarrow.compute as pc

    try:  # (a column read from Arrow, or a string result, has its Arrow array at hand)
        known = known_arrow(column)
        encoded = pc.dictionary_encode(
            pa.array(column, from_pandas=False) if known is None else known,
            null_encoding="encode")
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        encoded = None  # mixed types: group them in Python
    if isinstance(encoded, pa.DictionaryArray) and type(encoded.dictionary) is pa.StringArray:
        # (only strings: pyarrow would turn bytes, decimals or dates into other types)
        return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False)
    values = column.tolist()
    seen: dict[Any, int] = {}
    try:
        index = np.fromiter((seen.setdefault(_key(v), len(seen)) for v in values),
                            dtype=np.int64, count=len(values))
    except TypeError:  # unhashable values: every row by itself
        return values, np.arange(len(values))
    first = np.full(len(seen), -1)
    first[index[::-1]] = np.arange(len(values))[::-1]  # each distinct value's first row
    return [values[i] for i in first.tolist()], index


def _key(v: Any) -> Any:
    return (float, v.hex()) if type(v) is float else (type(v), v)


def _as_column(results: list[Any]) -> np.ndarray:
    kinds = {type(r) for r in results}
    if kinds == {int} and all(-2**63 <= r < 2**63 for r in results):
        return np.array(results, dtype=np.int64)
    if kinds in ({float}, {bool}):
        return np.array(results)
    out = np.empty(len(results), dtype=object)
    out[:] = results
    return out
