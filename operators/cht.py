"""The canonical history table (CHT): the logical meaning of a physical stream.

Apply every retraction to its insert (by id), drop rows whose lifetime became empty and forget
the ids: what remains is a multiset of ``(start, end, payload)`` rows. Two streams are
*equivalent* when their CHTs are equal; every operator is defined by what it does to the CHT.

    >>> from operators.events import Insert, Retract, Cti, MAX_TIME
    >>> to_cht([Insert("e0", 1, MAX_TIME, "P1"), Retract("e0", 1, MAX_TIME, 10, "P1"),
    ...         Retract("e0", 1, 10, 5, "P1"), Insert("e1", 4, 9, "P2"), Cti(12)])
    [(1, 5, 'P1'), (4, 9, 'P2')]

This module also holds :class:`StreamValidator`, which checks the rules of a well-formed
physical stream (docs/model.md) one message at a time.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, NoReturn

from . import live
from .events import Cti, Insert, KeyCtis, Message, Retract, fmt_time
from .payloads import freeze

Row = tuple[int, int, Any]


class InvalidStream(ValueError):
    """A physical stream broke one of its rules (docs/model.md; the message says which and
    where)."""


class NotEquivalent(AssertionError):
    """Two streams have different CHTs (the message shows the first differences)."""


def to_cht(messages: Iterable[Message]) -> list[Row]:
    """The CHT of a physical stream as ``(start, end, payload)`` rows in canonical order
    (a :class:`~operators.columns.Columns` batch counts as its inserts).

    Raises :class:`InvalidStream` for a retraction of an unknown id or whose lifetime or
    payload does not match its insert's; CTIs are ignored (use :func:`validate` to check them).
    """
    return sorted(cht_rows(messages), key=row_key)


def cht_rows(messages: Iterable[Message]) -> list[Row]:
    """The rows of :func:`to_cht` in no set order, without its canonical sort (which orders
    equal lifetimes by the payloads' text: ~25 µs a row). For a sink, which needs the rows
    and not their order."""
    from .columns import expand

    events = live.LiveEvents()
    for position, msg in enumerate(expand(messages)):
        problem = (events.insert(msg) if type(msg) is Insert else
                   events.retract(msg) if type(msg) is Retract else None)
        if problem is not None:
            raise InvalidStream(f"message #{position} {msg!r}: {problem}")
    return list(events.rows())


def row_key(row: Row) -> tuple[int, int, str]:
    """Sort key of a CHT row that works for any payload."""
    return (row[0], row[1], repr(freeze(row[2])))


def _rows(stream: Sequence[Any]) -> list[Row]:
    """Accept either a physical stream or CHT rows."""
    from .columns import Columns

    if stream and isinstance(stream[0], (Insert, Retract, Cti, Columns)):
        return to_cht(stream)
    return [tuple(r) for r in stream if not isinstance(r, Cti)]


def cht_diff(actual: Sequence[Any], expected: Sequence[Any], digits: int | None = 9,
             limit: int = 8) -> str | None:
    """None when the two streams (messages or CHT rows) are equivalent, else a readable
    account of the first differences: rows only in ``actual`` and rows only in ``expected``."""
    a_rows, e_rows = _rows(actual), _rows(expected)
    shown: dict[Any, Row] = {}  # frozen row -> an original row, to print payloads as given

    def count(rows: list[Row]) -> Counter[Any]:
        counts: Counter[Any] = Counter()
        for s, e, p in rows:
            key = (s, e, freeze(p, digits))
            shown.setdefault(key, (s, e, p))
            counts[key] += 1
        return counts

    a, e = count(a_rows), count(e_rows)
    if a == e:
        return None
    extra = sorted((shown[k] for k in (a - e).elements()), key=row_key)
    missing = sorted((shown[k] for k in (e - a).elements()), key=row_key)

    def show(rows: list[Any]) -> str:
        text = "\n".join(
            f"    [{fmt_time(s)}, {fmt_time(t)}) {p!r}" for s, t, p in rows[:limit]
        )
        more = f"\n    ... and {len(rows) - limit} more" if len(rows) > limit else ""
        return (text + more) if rows else "    (none)"

    first = min(extra[:1] + missing[:1], key=row_key)
    return (
        f"CHTs differ ({len(a_rows)} rows actual, {len(e_rows)} expected); first difference "
        f"at [{fmt_time(first[0])}, {fmt_time(first[1])}) {first[2]!r}\n"
        f"  only in actual:\n{show(extra)}\n  only in expected:\n{show(missing)}"
    )


def equivalent(actual: Sequence[Any], expected: Sequence[Any], digits: int | None = 9) -> bool:
    """True when the two streams have equal CHTs."""
    return cht_diff(actual, expected, digits) is None


def check_equivalent(actual: Sequence[Any], expected: Sequence[Any],
                     digits: int | None = 9) -> None:
    """Raise :class:`NotEquivalent` with the first differences unless the CHTs are equal."""
    diff = cht_diff(actual, expected, digits)
    if diff is not None:
        raise NotEquivalent(diff)


class StreamValidator:
    """Checks, message by message, that a physical stream is well formed (docs/model.md).

    * an Insert starts at or after the latest CTI, and its id is not live (nor, with
      ``unique_ids``, used before);
    * a Retract names a live id with its current lifetime and payload, and
      ``min(end, new_end)`` is at or after the latest CTI;
    * CTI times never decrease.

    The live events (:class:`~operators.live.LiveEvents`) are freed as CTIs make them final.
    With ``keep_ids`` only the ids of the last ``keep_ids`` events that ended (became final or
    were fully retracted) are remembered: a source that runs for ever keeps bounded state, and
    reuse of an id older than that goes undetected.
    """

    def __init__(self, name: str = "stream", unique_ids: bool = True,
                 keep_ids: int | None = None) -> None:
        self.name = name
        self.events = live.LiveEvents()
        self.dead: set[Hashable] | None = set() if unique_ids else None
        #: the ids in ``dead``, oldest first, when ``keep_ids`` bounds them
        self.dead_order: deque[Hashable] | None = deque() if keep_ids is not None else None
        self.keep_ids = keep_ids
        self.position = 0

    def _ended(self, ids: Iterable[Hashable]) -> None:
        if self.dead is None:
            return
        if self.dead_order is None or self.keep_ids is None:
            self.dead.update(ids)
            return
        for i in ids:
            if i not in self.dead:
                self.dead.add(i)
                self.dead_order.append(i)
        while len(self.dead_order) > self.keep_ids:
            self.dead.discard(self.dead_order.popleft())

    @property
    def cti(self) -> int:
        return self.events.cti

    def _fail(self, msg: Message, problem: str) -> NoReturn:
        raise InvalidStream(f"{self.name}, message #{self.position} {msg!r}: {problem}")

    def check(self, msg: Message) -> None:
        events = self.events
        if type(msg) is Insert:
            if self.dead is not None and msg.id in self.dead:
                self._fail(msg, f"duplicate id {msg.id!r}; ids must be unique within a stream")
            problem = events.insert(msg)
        elif type(msg) is Retract:
            problem = events.retract(msg)
            if problem is None and msg.new_end == msg.start:
                self._ended((msg.id,))
        elif type(msg) is Cti:
            if msg.time < events.cti:
                self._fail(msg, f"CTI goes back from {events.cti} to {msg.time}")
            final = events.advance_to(msg.time)
            if self.dead is not None:
                self._ended(r[0] for r in final)
            problem = None
        elif type(msg) is KeyCtis:
            problem = None  # per-key progress: its keys are the source's, unknown here
        else:
            problem = "not a physical message (Insert, Retract or Cti)"
        if problem is not None:
            self._fail(msg, problem)
        self.position += 1


def validate(messages: Iterable[Message], name: str = "stream",
             unique_ids: bool = True) -> None:
    """Raise :class:`InvalidStream` at the first message that breaks a rule of physical streams
    (docs/model.md). A :class:`~operators.columns.Columns` batch (an operator's output) stands
    for its inserts, in order, and is checked as them."""
    from .columns import expand

    validator = StreamValidator(name, unique_ids)
    for msg in expand(messages):
        validator.check(msg)
