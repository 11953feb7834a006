"""Payload comparison shared by the CHT and the live-event index: a hashable stand-in for any
payload and the equality a retraction's payload is checked with.

    >>> freeze({"b": [1, 2], "a": float("nan")}) == freeze({"a": float("nan"), "b": [1, 2]})
    True
    >>> same_payload(float("nan"), float("nan"))
    True
    >>> identical(2, 2.0), identical(0.0, -0.0), identical((1, [2.5]), (1, [2.5]))
    (False, False, True)
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any


def freeze(value: Any, digits: int | None = None, *, exact: bool = False) -> Hashable:
    """A hashable, comparable stand-in for a payload: dicts, lists and sets become tuples;
    with ``digits``, floats are rounded to that many significant digits (float sums differ
    in their last bits between incremental and from-scratch evaluation). With ``exact``,
    numbers that compare equal but read differently stay apart: ``2`` and ``2.0``, ``0.0``
    and ``-0.0``, ``1`` and ``True`` (what a window's output must correct: a result that
    only changed its type is a changed result)."""
    if isinstance(value, dict):
        return ("<dict>",) + tuple(
            sorted(((repr(k), freeze(v, digits, exact=exact)) for k, v in value.items()),
                   key=repr)
        )
    if isinstance(value, (list, tuple)):
        return (f"<{type(value).__name__}>",) + tuple(freeze(v, digits, exact=exact)
                                                      for v in value)
    if isinstance(value, (set, frozenset)):
        return ("<set>",) + tuple(sorted((freeze(v, digits, exact=exact) for v in value),
                                         key=repr))
    if isinstance(value, float):
        if math.isnan(value):
            return ("<nan>",)
        if digits is not None and value != 0 and math.isfinite(value):
            return float(f"{value:.{digits}g}")
        if exact:
            return ("<float>", value, math.copysign(1.0, value))
        return value
    if exact and isinstance(value, bool):
        return ("<bool>", value)
    if hasattr(value, "_asdict"):
        return freeze(value._asdict(), digits, exact=exact)
    try:
        hash(value)
    except TypeError:
        return ("<unhashable>", repr(value))
    return value


def same_payload(a: Any, b: Any) -> bool:
    """Whether a retraction's payload ``a`` is its insert's ``b``: equal, with NaN equal to
    NaN (a payload that crossed a process boundary holds another NaN object)."""
    return a is b or a == b or freeze(a) == freeze(b)


def identical(a: Any, b: Any) -> bool:
    """Whether two results are the same value of the same kind: equal, and equal under
    ``freeze(exact=True)`` (``2`` is not ``2.0``, ``0.0`` is not ``-0.0``). Whether a window
    operator may keep the row it sent for a result instead of correcting it."""
    try:
        if not (a is b or a == b):
            return False
    except Exception:  # noqa: BLE001 - e.g. numpy arrays: fall back to the frozen forms
        pass
    return freeze(a, exact=True) == freeze(b, exact=True)


def equal(a: Any, b: Any) -> bool:
    """``a == b``, or False when comparing raises (numpy arrays, ...): a result that cannot
    be compared counts as changed.

    >>> equal([1, 2], [1, 2]), equal(2, 2.0)
    (True, True)
    """
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 -- e.g. numpy arrays: treat as changed
        return False
