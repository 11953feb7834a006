"""``alter_lifetime(start=, duration=)``: give every event a new lifetime (a span operator).

The output lifetime of an event ``[s, e)`` is ``[s', e')`` with

* ``s' = start(s)`` — ``start`` is a function of the start time that never decreases
  (``lambda s: s - 10`` moves events 10 ticks earlier); ``None`` keeps ``s``;
* ``e' = s' + duration`` for an ``int`` duration; ``e' = s' + duration(s, e)`` for a function of
  the input lifetime (an open end is passed as ``MAX_TIME`` and a result far beyond any real
  time stays ∞); ``None`` keeps the length (``e' = e + s' - s``). ∞ stays ∞.

An output whose lifetime would be empty (``e' <= s'``) is not emitted.

The ends of the time axis: a finite ``e'`` past the axis is cut to its last finite instant
``LAST = MAX_TIME - 1`` (it stays finite: ``MAX_TIME`` is ∞); an event whose ``s'`` leaves the
axis (below ``MIN_TIME``, at or past ``LAST``) has no output and goes to :attr:`dead_letters`
with the reason, as do its retractions. The query goes on. Because a duration
function may depend on the input's end, a retraction can make an output event *change*,
*vanish* (retracted fully) or *appear* (inserted). An event that reappears after vanishing gets
a fresh id (:class:`~operators.events.FreshId`), so output ids are never reused.

CTIs: inserts land at ``start(c)`` or later, so the output CTI is at most ``start(c)``. Only a
full retraction changes an output of an ``int`` duration, so that is all. With ``duration=None``
an end moves by the event's start shift ``s' - s``, so the CTI is also held at
``c + min(s' - s)`` over the input events that can still be retracted (end at or after the input
CTI). With a duration *function* a retraction may move an output end anywhere after ``s'``, so
the CTI is held at the earliest ``s'`` of those events; an edge event that is never closed
holds it until the end of input.

    >>> from operators.events import Insert, Retract, Cti, MAX_TIME
    >>> op = AlterLifetime(duration=lambda s, e: e - s - 2)
    >>> op.process([Insert("a", 0, MAX_TIME, "x"), Retract("a", 0, MAX_TIME, 1, "x")])
    [Insert(id='a', start=0, end=9223372036854775807, payload='x'), \
Retract(id='a', start=0, end=9223372036854775807, new_end=0, payload='x')]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from sortedcontainers import SortedList

from .base import Processor
from .columns import Columns
from .errors import DeadLetter
from .events import MAX_TIME, MIN_TIME, FreshId, Insert, Message, Retract

#: Ends computed from an open end that land beyond this (year ~148,000) count as ∞.
_FAR_FUTURE = MAX_TIME // 2
#: The last finite instant of the time axis (MAX_TIME is ∞): finite ends are cut to it.
LAST = MAX_TIME - 1

StartFn = Callable[[int], int]
DurationFn = Callable[[int, int], int]


class AlterLifetime(Processor):
    _state_fields = ("generation", "open_by_end", "open_by_hold", "dead_letters")

    def __init__(
        self,
        start: StartFn | None = None,
        duration: int | DurationFn | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if isinstance(duration, bool) or not (
            duration is None or isinstance(duration, int) or callable(duration)
        ):
            raise TypeError(
                f"alter_lifetime: duration must be an int number of ticks, a function "
                f"(start, end) -> ticks, or None; got {duration!r}"
            )
        if isinstance(duration, int) and duration <= 0:
            raise ValueError(
                f"alter_lifetime: duration {duration} would make every lifetime empty; "
                f"use a positive number of ticks"
            )
        if start is not None and not callable(start):
            raise TypeError(
                f"alter_lifetime: start must be a function of the start time, got {start!r}; "
                f"to move events by a constant use shift(delta)"
            )
        self.start_fn = start
        self.duration = duration
        # None: an end moves by s' - s, held relative to the CTI; a function: held at s'
        self.holds_cti = callable(duration) or (duration is None and start is not None)
        self.relative_hold = duration is None
        #: input id -> [generation, current input end], for ids whose output vanished
        self.generation: dict[Hashable, list[int]] = {}
        #: input events that can still be retracted, with their CTI hold (see above)
        self.open_by_end: SortedList = SortedList()  # (end, hold, id)
        self.open_by_hold: SortedList = SortedList()  # (hold, id)
        self.dead_letters: list[DeadLetter] = []
        #: how the dead letters name this operator's lifetime mapping
        self.what = "the start function"

    # -- the lifetime mapping -----------------------------------------------------------
    def map_start(self, s: int) -> int:
        return self.start_fn(s) if self.start_fn is not None else s

    def map_end(self, s: int, s2: int, e: int) -> int:
        """The output end: ∞ for an open one, else cut to the last finite instant of the
        axis, ``LAST``."""
        d = self.duration
        if d is None:
            if e == MAX_TIME:
                return MAX_TIME
            e2 = e + s2 - s
        elif isinstance(d, int):
            e2 = s2 + d
        else:
            e2 = s2 + d(s, e)
            # a function of an open end (∞) that returns "∞ minus a little" keeps the end open
            if e == MAX_TIME and e2 >= _FAR_FUTURE:
                return MAX_TIME
        return e2 if e2 < LAST else LAST

    def lifetime(self, msg: Message, s: int, e: int) -> tuple[int, int]:
        """The output lifetime ``(s', e')`` of ``[s, e)``; an empty one (``e' <= s'``) when
        it has no output event, a start off the time axis included (then a dead letter says
        why)."""
        s2 = self.map_start(s)
        if s == e:  # a full retraction
            return s2, s2
        if not MIN_TIME <= s2 < LAST:
            where = "before the start" if s2 < MIN_TIME else "at or past the end"
            self._dead(msg, f"{self.what} moves the start {s} to {s2}: {where} of the time "
                            f"axis [MIN_TIME, MAX_TIME - 1); the event has no output")
            return s2, s2
        return s2, self.map_end(s, s2, e)

    def _dead(self, msg: Message, reason: str) -> None:
        self.dead_letters.append(DeadLetter(self.name, reason, msg))

    def out_id(self, id: Hashable) -> Hashable:
        gen = self.generation.get(id)
        return id if gen is None or gen[0] == 0 else FreshId(id, gen[0])

    # -- messages -----------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        s2, e2 = self.lifetime(msg, msg.start, msg.end)
        if self.holds_cti:
            hold = s2 - msg.start if self.relative_hold else s2
            self.open_by_end.add((msg.end, hold, msg.id))
            self.open_by_hold.add((hold, msg.id))
        if e2 <= s2:
            return []
        if s2 < self.out_cti:
            raise ValueError(
                f"the start function moved event {msg.id!r} from {msg.start} to {s2}, behind "
                f"the output CTI {self.out_cti}; start functions must never decrease"
            )
        return [Insert(msg.id, s2, e2, msg.payload)]

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """A constant ``duration`` (and no ``start``) sets every end at once: ``[s, s + d)``,
        with nothing to hold (what :meth:`on_insert` does event by event)."""
        d = self.duration
        if (self.start_fn is None and type(d) is int and len(msg)
                and int(msg.starts.max()) < LAST - d):
            return [Columns(msg.ids, msg.starts, msg.starts + d, msg.payload)]  # type: ignore[list-item]  # a Columns stands for its inserts
        return super().on_columns(msg, port)

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        s = msg.start
        full = msg.new_end == s
        dead = len(self.dead_letters)
        s2, old = self.lifetime(msg, s, msg.end)
        del self.dead_letters[dead:]  # said when the old lifetime arrived
        new = self.lifetime(msg, s, msg.new_end)[1]
        if self.holds_cti:
            hold = s2 - s if self.relative_hold else s2
            self.open_by_end.remove((msg.end, hold, msg.id))
            if full:
                self.open_by_hold.remove((hold, msg.id))
            else:
                self.open_by_end.add((msg.new_end, hold, msg.id))
        oid = self.out_id(msg.id)
        out: list[Message] = []
        gen: list[int] | None
        if old > s2 and new > s2:
            if old != new:
                out.append(Retract(oid, s2, old, new, msg.payload))
        elif old > s2:  # the output vanishes: its id is used up
            out.append(Retract(oid, s2, old, s2, msg.payload))
            gen = self.generation.setdefault(msg.id, [0, msg.end])
            gen[0] += 1
        elif new > s2:  # the output appears
            out.append(Insert(oid, s2, new, msg.payload))
        gen = self.generation.get(msg.id)
        if gen is not None:
            if full:
                del self.generation[msg.id]
            else:
                gen[1] = msg.new_end
        return out

    def on_cti(self, time: int, port: int) -> list[Message]:
        # an input event that ends before the CTI can never be retracted again
        if self.generation:
            for id in [i for i, g in self.generation.items() if g[1] < time]:
                del self.generation[id]
        out_time = self.map_start(time)
        if self.holds_cti:
            by_end, by_hold = self.open_by_end, self.open_by_hold
            while by_end and by_end[0][0] < time:
                _, hold, id = by_end.pop(0)
                by_hold.remove((hold, id))
            if by_hold:
                hold = by_hold[0][0]
                out_time = min(out_time, time + hold if self.relative_hold else hold)
        if time != MAX_TIME:  # cut to the axis, as ends are
            out_time = min(max(out_time, MIN_TIME), LAST)
        return self.emit_cti(out_time)

    def state_size(self) -> int:
        return len(self.open_by_end) + len(self.generation)

    def _check(self) -> None:
        assert len(self.open_by_end) == len(self.open_by_hold)
        assert all(e >= self.in_cti for e, _, _ in self.open_by_end)
        assert all(g[0] >= 1 for g in self.generation.values())
