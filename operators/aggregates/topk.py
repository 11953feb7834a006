"""TopK: the ``k`` payloads with the largest (or smallest) ``by`` values, ties broken by
:func:`canonical`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from sortedcontainers import SortedList

from ..payloads import equal
from ..udm import field_getter
from .base import Builtin
from .extremes import order_key, sorted_add, sorted_remove


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


class TopK(Builtin):
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

    def _entries(self, values: list[Any]) -> Iterator[tuple[Any, Any, str]]:
        """Each payload with its ``by`` value and its canonical form."""
        get = self._get
        for p in values:
            yield p, get(p), canonical(p)

    def add(self, state: _TopKState, values: list[Any]) -> _TopKState:
        who = self.udm_name
        for p, v, c in self._entries(values):
            sorted_add(state.ranked, (order_key(v), c), who, v)
            state.payloads.setdefault(c, []).append(p)
        return state

    def remove(self, state: _TopKState, values: list[Any]) -> _TopKState:
        who = self.udm_name
        for p, v, c in self._entries(values):
            sorted_remove(state.ranked, (order_key(v), c), who, p)
            same = state.payloads[c]
            # equal canonical forms are (nearly always) equal payloads; prefer the equal one
            for i, q in enumerate(same):
                if q is p or equal(q, p):
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


