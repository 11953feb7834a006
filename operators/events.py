"""Time, events and the physical message vocabulary of cedar.

Time is an integer number of ticks. An event has a payload and a lifetime ``[start, end)``:
start inclusive, end exclusive. A physical stream is a sequence of three kinds of messages:

* ``Insert(id, start, end, payload)`` adds an event;
* ``Retract(id, start, end, new_end, payload)`` moves the end of live event ``id`` from ``end``
  to ``new_end``; ``new_end == start`` deletes the event (a full retraction);
* ``Cti(time)`` promises that no later message changes the time axis before ``time``.

Messages are immutable tuples with value equality, so they are cheap to build, hash, compare
and pickle. Every constructor checks its invariants and says how to fix a violation::

    >>> Insert("a", 3, 5, {"kwh": 1.5})
    Insert(id='a', start=3, end=5, payload={'kwh': 1.5})
    >>> Insert("a", 5, 5, None)
    Traceback (most recent call last):
    ...
    ValueError: Insert 'a': end 5 is not after start 5; a lifetime [start, end) needs ...
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple, Self, final

#: The earliest representable time (ticks). Fits a signed 64-bit integer.
MIN_TIME: int = -(2**63) + 1
#: The end of time (written ∞): the end of an edge event whose end is not known yet.
MAX_TIME: int = 2**63 - 1

#: When datetimes are converted, one tick is one microsecond since the Unix epoch, UTC.
TICKS_PER_SECOND: int = 1_000_000


def _check_time(kind: str, eid: Any, name: str, value: Any) -> None:
    if type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(
            f"{kind} {eid!r}: {name} must be an int number of ticks, got {value!r} "
            f"({type(value).__name__}); convert datetimes with operators.ticks.to_ticks"
        )
    if not MIN_TIME <= value <= MAX_TIME:
        raise ValueError(
            f"{kind} {eid!r}: {name} {value} lies outside [MIN_TIME, MAX_TIME] = "
            f"[{MIN_TIME}, {MAX_TIME}]"
        )


def _rebuild(cls: type, fields: tuple[Any, ...]) -> Any:
    """Unpickle a message as it was, without the constructor's checks: a message passes
    through pickle unchanged (a source checks what it receives, and builds a dead letter of
    a message that breaks a rule, which a check here would turn into an error elsewhere)."""
    return tuple.__new__(cls, fields)


class _InsertFields(NamedTuple):
    id: Hashable
    start: int
    end: int
    payload: Any


@final  # never subclassed: the runtime dispatches on type(msg) is
class Insert(_InsertFields):
    """Adds the event ``id`` with lifetime ``[start, end)``; ``end == MAX_TIME`` is an open edge."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self)))

    def __new__(cls, id: Hashable, start: int, end: int, payload: Any = None) -> Insert:
        _check_time("Insert", id, "start", start)
        _check_time("Insert", id, "end", end)
        if end <= start:
            raise ValueError(
                f"Insert {id!r}: end {end} is not after start {start}; a lifetime [start, end) "
                f"needs end > start (a point event at t is [t, t + 1))"
            )
        return tuple.__new__(cls, (id, start, end, payload))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:  # type: ignore[override]  # mypy binds Self
        """Build from a sequence of fields, with the constructor's checks (NamedTuple's own
        ``_make``, which ``_replace`` uses, would skip them)."""
        return cls(*iterable)

    @property
    def sync_time(self) -> int:
        """The earliest time this message modifies: its start."""
        return self.start


class _RetractFields(NamedTuple):
    id: Hashable
    start: int
    end: int
    new_end: int
    payload: Any


@final  # never subclassed: the runtime dispatches on type(msg) is
class Retract(_RetractFields):
    """Moves the end of live event ``id`` from ``end`` to ``new_end`` (``new_end == start``
    deletes it)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self)))

    def __new__(
        cls, id: Hashable, start: int, end: int, new_end: int, payload: Any = None
    ) -> Retract:
        _check_time("Retract", id, "start", start)
        _check_time("Retract", id, "end", end)
        _check_time("Retract", id, "new_end", new_end)
        if end <= start:
            raise ValueError(
                f"Retract {id!r}: the retracted lifetime [{start}, {end}) is empty; `end` must "
                f"be the event's current end, which is after its start"
            )
        if new_end < start:
            raise ValueError(
                f"Retract {id!r}: new_end {new_end} is before start {start}; use "
                f"new_end == start to delete the event"
            )
        if new_end == end:
            raise ValueError(
                f"Retract {id!r}: new_end equals end ({end}); a retraction must change the end"
            )
        return tuple.__new__(cls, (id, start, end, new_end, payload))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:  # type: ignore[override]  # mypy binds Self
        """Build from a sequence of fields, with the constructor's checks (NamedTuple's own
        ``_make``, which ``_replace`` uses, would skip them)."""
        return cls(*iterable)

    @property
    def sync_time(self) -> int:
        """The earliest time this message modifies: ``min(end, new_end)``."""
        return self.end if self.end < self.new_end else self.new_end

    @property
    def is_full(self) -> bool:
        """True when the retraction deletes the event."""
        return self.new_end == self.start


class _CtiFields(NamedTuple):
    time: int


@final  # never subclassed: the runtime dispatches on type(msg) is
class Cti(_CtiFields):
    """Current time increment: no later message changes the time axis before ``time``."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self)))

    def __new__(cls, time: int) -> Cti:
        _check_time("Cti", None, "time", time)
        return tuple.__new__(cls, (time,))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Self:  # type: ignore[override]  # mypy binds Self
        """Build from a sequence of fields, with the constructor's checks (NamedTuple's own
        ``_make``, which ``_replace`` uses, would skip them)."""
        return cls(*iterable)

    @property
    def sync_time(self) -> int:
        return self.time


Message = Insert | Retract | Cti


class _KeyCtisFields(NamedTuple):
    times: tuple[tuple[Hashable, int], ...]


@final  # never subclassed: the runtime dispatches on type(msg) is
class KeyCtis(_KeyCtisFields):
    """Per-key progress (``AdvanceTime(per_key=...)``, docs/ctis.md): for each ``(key,
    time)`` of ``times``, no later message changes the time axis before ``time`` for an event
    whose key (by the source's ``per_key``) is ``key``. A hint beside the stream's own CTIs,
    which stay the low watermark: an operator keyed by the same key finalizes each key's
    output at that key's time (``group_apply``), every other operator ignores it, and the
    planner only routes it to those that use it. One message lists the keys whose time moved
    since the last one, so its size is bounded by the events before it.

    >>> KeyCtis((("m1", 40), ("m7", 12)))
    KeyCtis(times=(('m1', 40), ('m7', 12)))
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self)))

    def __new__(cls, times: Iterable[tuple[Hashable, int]]) -> KeyCtis:
        times = tuple(times)
        for key, t in times:
            _check_time("KeyCtis", key, "time", t)
        return tuple.__new__(cls, (times,))

    @property
    def sync_time(self) -> int:
        return min((t for _, t in self.times), default=MAX_TIME)


def point(id: Hashable, time: int, payload: Any = None) -> Insert:
    """A point event: the lifetime ``[time, time + 1)``."""
    return Insert(id, time, time + 1, payload)


def interval(id: Hashable, start: int, end: int, payload: Any = None) -> Insert:
    """An interval event ``[start, end)``."""
    return Insert(id, start, end, payload)


def edge_start(id: Hashable, start: int, payload: Any = None) -> Insert:
    """The start edge of an edge event: ``[start, MAX_TIME)`` until its end edge arrives."""
    return Insert(id, start, MAX_TIME, payload)


def edge_end(id: Hashable, start: int, end: int, payload: Any = None) -> Retract:
    """The end edge of an edge event opened by :func:`edge_start`: closes it at ``end``."""
    return Retract(id, start, MAX_TIME, end, payload)


def add_time(t: int, delta: int) -> int:
    """``t + delta`` where ∞ stays ∞ and the result is clamped to [MIN_TIME, MAX_TIME]."""
    if t == MAX_TIME:
        return MAX_TIME
    r = t + delta
    return MAX_TIME if r > MAX_TIME else MIN_TIME if r < MIN_TIME else r


def fmt_time(t: int) -> str:
    """Human-readable time: ``∞`` for MAX_TIME, ``-∞`` for MIN_TIME."""
    if t == MAX_TIME:
        return "∞"
    if t == MIN_TIME:
        return "-∞"
    return str(t)


class FreshId:
    """An output id minted by an operator where input and output events are not one to one
    (``origin`` is the input id or the operator's counter, ``n`` tells the generations apart).
    Never equal to a user id, whatever its type."""

    __slots__ = ("n", "origin")

    def __init__(self, origin: Hashable, n: int) -> None:
        self.origin = origin
        self.n = n

    def __eq__(self, other: object) -> bool:
        return (type(other) is FreshId and self.n == other.n
                and self.origin == other.origin)

    def __hash__(self) -> int:
        return hash((FreshId, self.origin, self.n))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FreshId, (self.origin, self.n))

    def __repr__(self) -> str:
        return f"FreshId({self.origin!r}, {self.n})"
