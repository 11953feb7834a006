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

Column batches (:class:`~operators.columns.Columns`) keep travelling column-wise for an
``int`` duration or ``None`` (see :meth:`AlterLifetime.on_columns`): the start function runs
once on the start column when it traces (:mod:`operators.expr`), else once per start; a batch
that comes near an end of the axis, or a duration function, goes event by event.

    >>> from operators.events import Insert, Retract, Cti, MAX_TIME
    >>> op = AlterLifetime(duration=lambda s, e: e - s - 2)
    >>> op.process([Insert("a", 0, MAX_TIME, "x"), Retract("a", 0, MAX_TIME, 1, "x")])
    [Insert(id='a', start=0, end=9223372036854775807, payload='x'), \
Retract(id='a', start=0, end=9223372036854775807, new_end=0, payload='x')]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np
from sortedcontainers import SortedList

from .columns import Columns
from .errors import DeadLetter
from .events import MAX_TIME, MIN_TIME, FreshId, Insert, Message, Retract
from .expr import evaluate, trace
from .processor import Processor
from .ticks import Duration, to_duration

#: Ends computed from an open end that land beyond this (year ~148,000) count as ∞.
_FAR_FUTURE = MAX_TIME // 2
#: The last finite instant of the time axis (MAX_TIME is ∞): finite ends are cut to it.
LAST = MAX_TIME - 1
#: Column batches whose times (and duration) lie within ±2**61 ticks go column-wise: sums of
#: three such values stay inside int64 and far from both ends of the axis.
SAFE = 2**61

StartFn = Callable[[int], int]
DurationFn = Callable[[int, int], int]


class AlterLifetime(Processor):
    _state_fields = ("generation", "open_by_end", "open_by_hold", "dead_letters")

    def __init__(
        self,
        start: StartFn | None = None,
        duration: Duration | DurationFn | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if not callable(duration):
            try:  # a duration <= 0 would make every lifetime empty
                ticks: int | None = to_duration(duration, "alter_lifetime", "duration",
                                                positive=True, optional=True)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{exc}; or a function (start, end) -> ticks, or None") from None
            duration = ticks
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

    def map_starts(self, starts: np.ndarray) -> np.ndarray | None:
        """:meth:`map_start` of every start at once: an int64 array holding exactly what the
        start function gives per start, or None when that cannot be had (the batch then goes
        event by event, which raises or dead-letters where an event must). The function runs
        once on the column when it traces (:mod:`operators.expr`), else once per start."""
        fn = self.start_fn
        if fn is None:
            return starts
        values = evaluate(trace(fn), starts, len(starts))
        if values is not None:
            return values if values.dtype.kind == "i" else None
        out = [fn(s) for s in starts.tolist()]
        # what the event-by-event path accepts as a time (no bools, no floats, no numpy ints)
        if all(type(x) is int and -SAFE < x < SAFE for x in out):
            return np.array(out, dtype=np.int64)
        return None

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """The lifetimes of a batch of inserts at once, where that is what :meth:`on_insert`
        gives event by event: an ``int`` duration or ``None`` (a duration function goes event
        by event), every start and finite end within ±2**61 ticks before and after (so no
        output comes near an end of the axis and the arithmetic stays in int64) and no start
        moved behind the output CTI. Otherwise the batch goes event by event, which cuts
        ends, dead-letters starts leaving the axis and raises for a decreasing start
        function. Inserts hold the CTI as in :meth:`on_insert`: only ``duration=None`` with a
        start function holds anything."""
        d = self.duration
        if not len(msg) or callable(d) or (d is not None and d >= SAFE):
            return super().on_columns(msg, port)
        starts = msg.starts
        new = self.map_starts(starts) if _within(starts) else None
        if new is None or not _within(new) or int(new.min()) < self.out_cti:
            return super().on_columns(msg, port)
        ends: np.ndarray | None
        if d is not None:  # [s', s' + d)
            ends = None if d == 1 else new + d
        elif msg.points:  # [s', e + s' - s) = [s', s' + 1)
            ends = None
        else:
            finite = msg.ends != MAX_TIME
            if not _within(msg.ends[finite]):
                return super().on_columns(msg, port)
            ends = np.where(finite, msg.ends + (new - starts), MAX_TIME)
        if self.holds_cti:
            holds = (new - starts).tolist()
            self.open_by_end.update(zip(msg.ends.tolist(), holds, msg.ids.tolist()))
            self.open_by_hold.update(zip(holds, msg.ids.tolist()))
        return [msg.with_lifetimes(new, ends)]  # type: ignore[list-item]  # a Columns stands for its inserts

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
        # cut to the axis, as ends are (a CTI at ∞, the end of everything, stays at ∞)
        out_time = min(max(out_time, MIN_TIME), LAST if time != MAX_TIME else MAX_TIME)
        return self.emit_cti(out_time)

    def state_size(self) -> int:
        return len(self.open_by_end) + len(self.generation)

    def _check(self) -> None:
        assert len(self.open_by_end) == len(self.open_by_hold)
        assert all(e >= self.in_cti for e, _, _ in self.open_by_end)
        assert all(g[0] >= 1 for g in self.generation.values())


def _within(times: np.ndarray) -> bool:
    """Whether every time lies strictly within ±2**61 (see ``SAFE``)."""
    return not len(times) or (int(times.min()) > -SAFE and int(times.max()) < SAFE)
