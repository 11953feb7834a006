"""What the parts of :mod:`operators.detect` share: a row and its fields, an attempt's record
and its fields, the match a predicate sees, and when an attempt is final.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

new_tuple = tuple.__new__

#: A row: ``(start, tie key, arrival number, id, payload, bits)``; ``row[:3]`` orders rows
#: totally (the arrival number tells equal rows apart and is never passed). ``bits`` holds
#: the predicates a column batch decided for the row: for symbol ``s``, bit ``2s`` says
#: whether it was decided, bit ``2s + 1`` its answer (0 for a row that came as an insert).
Row = tuple[Any, ...]
# fields of a row
START, SEQ, ID, PAYLOAD, BITS = 0, 2, 3, 4, 5
#: Symbols whose predicates a column batch may decide (two bits each in an int64).
DECIDED_MOST = 31
#: Match shapes (the masks of its rows) whose bound symbols the column mode remembers.
BOUND_MOST = 4_096
# fields of an attempt record: [last row's order key or None (no match), the order key of the
# last row read, whether it wanted a row it did not have, its output (start, end, payload,
# id or None) or None]
END, REACH, WANTS, OUT = 0, 1, 2, 3
#: an attempt record's field: how many rows its match holds past its first
LEN = 4


class Match(Mapping[str, tuple[Any, ...]]):
    """The rows bound so far, as a predicate sees them: ``match["A"]`` is the tuple of the
    payloads bound to ``A``, in order (``()`` when none is yet). Valid during the call only."""

    __slots__ = ("_first", "_index", "_rows", "_syms")

    def __init__(self, index: dict[str, int], rows: list[Row], first: int,
                 syms: list[int]) -> None:
        self._index, self._rows, self._first, self._syms = index, rows, first, syms

    def __getitem__(self, name: str) -> tuple[Any, ...]:
        try:
            want = self._index[name]
        except KeyError:
            raise KeyError(f"match[{name!r}]: the pattern has no symbol {name!r}; its symbols "
                           f"are {', '.join(self._index)}") from None
        rows, first = self._rows, self._first
        return tuple(rows[first + k][PAYLOAD] for k, s in enumerate(self._syms) if s == want)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return f"Match({dict(self)!r})"


def final_at(rec: list[Any], first: Row, within: int) -> int:
    """The first CTI at which the attempt ``rec`` from row ``first`` is final: past every row
    it read and, if it wanted more rows, past ``start + within``."""
    at = rec[REACH][0] + 1
    if rec[WANTS] and first[START] + within > at:
        at = first[START] + within
    return at


def same_output(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two outputs with the same lifetime and payload (a payload that cannot be compared is
    taken as changed)."""
    try:
        return a[0] == b[0] and a[1] == b[1] and bool(a[2] == b[2])
    except Exception:  # noqa: BLE001 - e.g. numpy arrays: retract and insert again
        return False
