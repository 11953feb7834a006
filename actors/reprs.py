"""Payloads shown to people: a ``repr`` that never fails, and one cut to a width.

Used where a step's output must be named in an error (a payload pickle cannot take:
:mod:`actors.outbox`), shown by a monitor (:meth:`OperatorShell.newest_rows
<actors.inspection.Inspection.newest_rows>`) or written to a trace (:mod:`actors.recorder`).
"""

from __future__ import annotations

import reprlib
from itertools import islice
from typing import Any


def safe_repr(obj: Any) -> str:
    """``repr(obj)``, or a stand-in when its repr raises.

    >>> class Bad:
    ...     def __repr__(self) -> str:
    ...         raise RuntimeError
    >>> safe_repr(Bad())
    '<Bad object>'
    """
    try:
        return repr(obj)
    except Exception:  # noqa: BLE001 - only for a display or an error message
        return f"<{type(obj).__name__} object>"


class ShortRepr(reprlib.Repr):
    """:class:`reprlib.Repr` that keeps a dict's own key order, as ``repr`` does."""

    def repr_dict(self, x: Any, level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        shown = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}"
                 for k, v in islice(x.items(), self.maxdict)]
        return "{" + ", ".join(shown + (["..."] if len(x) > self.maxdict else [])) + "}"


def short_repr(obj: Any, width: int) -> str:
    """``repr(obj)`` cut to about ``width`` characters, without building the whole repr of a
    large payload (strings, bytes and containers are cut before they are repr'd).

    >>> short_repr({"b": 1, "a": "x" * 50}, 20)
    "{'b': 1, 'a': 'xxxx…"
    """
    r = ShortRepr()
    r.maxstring = r.maxother = r.maxlong = width
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 32
    r.maxarray = 32
    r.maxlevel = 4
    try:
        text = r.repr(obj)
    except Exception:  # noqa: BLE001 - only for a display
        text = safe_repr(obj)
    return text if len(text) <= width else text[:width - 1] + "…"
