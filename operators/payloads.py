"""Payload comparison shared by the CHT and the live-event index: a hashable stand-in for any
payload and the equality a retraction's payload is checked with.

    >>> freeze({"b": [1, 2], "a": float("nan")}) == freeze({"a": float("nan"), "b": [1, 2]})
    True
    >>> same_payload(float("nan"), float("nan"))
    True
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any


def freeze(value: Any, digits: int | None = None) -> Hashable:
    """A hashable, comparable stand-in for a payload: dicts, lists and sets become tuples;
    with ``digits``, floats are rounded to that many significant digits (float sums differ
    in their last bits between incremental and from-scratch evaluation)."""
    if isinstance(value, dict):
        return ("<dict>",) + tuple(
            sorted(((repr(k), freeze(v, digits)) for k, v in value.items()), key=repr)
        )
    if isinstance(value, (list, tuple)):
        return (f"<{type(value).__name__}>",) + tuple(freeze(v, digits) for v in value)
    if isinstance(value, (set, frozenset)):
        return ("<set>",) + tuple(sorted((freeze(v, digits) for v in value), key=repr))
    if isinstance(value, float):
        if math.isnan(value):
            return ("<nan>",)
        if digits is not None and value != 0 and math.isfinite(value):
            return float(f"{value:.{digits}g}")
        return value
    if hasattr(value, "_asdict"):
        return freeze(value._asdict(), digits)
    try:
        hash(value)
    except TypeError:
        return ("<unhashable>", repr(value))
    return value


def same_payload(a: Any, b: Any) -> bool:
    """Whether a retraction's payload ``a`` is its insert's ``b``: equal, with NaN equal to
    NaN (a payload that crossed a process boundary holds another NaN object)."""
    return a is b or a == b or freeze(a) == freeze(b)
