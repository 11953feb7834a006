"""The processors that stand at the inputs of a plan: where messages enter a query.

A source is hosted by the same generic shell as every operator (one actor per source); its
input port 0 receives what the driver (or a publishing query) sends:

* :class:`EventsSource` replays a physical stream and checks it on the way in
  (docs/errors.md: a message that breaks a rule of physical streams, docs/model.md, goes to
  the dead letters with the reason, it does not take the query down);
* :class:`RowsSource` turns plain rows into events with :class:`operators.ingress.Ingress`;
  the shell calls :meth:`RowsSource.poll` with its wall clock so that an idle source still
  advances time, and :meth:`RowsSource.finish` at the end of input (the final CTI);
* :class:`Passthrough` forwards what it receives (the input of a ``group_apply`` sub-query, or
  the published stream of another query, which is valid by construction).

    >>> from operators.events import Insert, Cti
    >>> src = EventsSource("from_events#0")
    >>> src.process([Insert("a", 5, 6), Cti(9), Insert("b", 2, 3)])
    [Insert(id='a', start=5, end=6, payload=None), Cti(time=9)]
    >>> src.dead_letters[0].reason.endswith("insert starts at 2, behind the CTI 9")
    True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .cht import InvalidStream, StreamValidator
from .columns import Columns, expand
from .errors import DeadLetter, LateEvent
from .events import MAX_TIME, MIN_TIME, Cti, Insert, KeyCtis, Message, Retract
from .ingress import Ingress
from .late_stream import late_markers
from .processor import Processor

#: How many ended events' ids a ``from_events`` source remembers to refuse their reuse: its
#: state (and every checkpoint of it) stays bounded however long the stream runs.
KEEP_IDS = 10_000


class EventsSource(Processor):
    """Replays a physical stream, sending malformed messages to :attr:`dead_letters`.

    Each message is checked on the way in twice: its fields by its constructor's rules (a
    message built with ``tuple.__new__``, or decoded from foreign bytes, skipped them) and its
    place in the stream by the rules of docs/model.md. A :class:`~operators.columns.Columns`
    batch is expanded to its inserts first (they are checked, and sent on, one by one).

    :attr:`stats` counts, like a rows source's: ``received`` messages (the events of a
    Columns batch one by one) = ``processed`` (sent on, CTIs included) + ``dead_lettered``;
    ``ctis`` counts the CTIs among the processed."""

    _state_fields = ("validator", "dead_letters", "stats")

    def __init__(self, name: str = "from_events") -> None:
        super().__init__(name)
        self.validator = StreamValidator("input", keep_ids=KEEP_IDS)
        self.dead_letters: list[DeadLetter] = []
        self.stats: dict[str, int] = {"received": 0, "processed": 0, "dead_lettered": 0,
                                      "ctis": 0}

    def process(self, batch: Iterable[Message | Columns], port: int = 0) -> list[Message]:
        if type(batch) is not list:
            batch = list(batch)
        if Columns in map(type, batch):
            batch = list(expand(batch))
        check = self.validator.check
        out: list[Message] = []
        append = out.append
        dead = len(self.dead_letters)
        ctis = 0
        lo, hi = MIN_TIME, MAX_TIME
        # untrusted until checked: built without its constructor, or not a message at all
        msg: Any
        for msg in batch:
            kind = type(msg)
            try:
                # the fields a constructor accepts: plain ints in order on the time axis; any
                # other message (or number of fields) is rebuilt by its constructor, which
                # fills in a missing payload or says what is wrong
                if kind is Insert:
                    if not (len(msg) == 4 and type(msg[1]) is int and type(msg[2]) is int
                            and lo <= msg[1] < msg[2] <= hi):
                        msg = Insert(*msg)
                elif kind is Cti:
                    ctis += 1  # taken back below if it is dead-lettered
                    if not (len(msg) == 1 and type(msg[0]) is int and lo <= msg[0] <= hi):
                        msg = Cti(*msg)
                elif kind is Retract:
                    if not (len(msg) == 5 and type(msg[1]) is int and type(msg[2]) is int
                            and type(msg[3]) is int and lo <= msg[1] <= msg[3] <= hi
                            and msg[1] < msg[2] <= hi and msg[3] != msg[2]):
                        msg = Retract(*msg)
                elif kind is KeyCtis:  # per-key progress: a per-key ingress feeds this source
                    msg = KeyCtis(*msg)
                else:
                    self._dead(msg, "not a physical message: expected Insert, Retract or Cti, "
                                    f"got {kind.__name__}")
                    continue
                check(msg)
            except InvalidStream as bad:
                self.dead_letters.append(DeadLetter(self.name, str(bad), msg))
                if kind is Cti:
                    ctis -= 1
                continue
            except (TypeError, ValueError) as bad:
                self._rejected(msg, bad)
                if kind is Cti:
                    ctis -= 1
                continue
            append(msg)
        stats = self.stats
        stats["received"] += len(batch)
        stats["processed"] += len(out)
        stats["dead_lettered"] += len(self.dead_letters) - dead
        stats["ctis"] += ctis
        return out

    def _rejected(self, msg: Any, bad: Exception) -> None:
        """Dead-letter a message its constructor (or the stream check) cannot take."""
        try:
            type(msg)(*msg)
        except (TypeError, ValueError):
            # kept as a plain tuple: the message itself could not be copied or unpickled
            # (both re-run the constructor), so it could not be checkpointed nor sent
            self._dead(tuple(msg), f"its fields break the rules of {type(msg).__name__}: "
                                   f"{bad}; build messages with their constructors",
                       shown=f"{type(msg).__name__}{tuple.__repr__(msg)}")
        else:
            self._dead(msg, f"it cannot be checked: {type(bad).__name__}: {bad}; an event id "
                            "must be hashable")

    def _dead(self, item: Any, problem: str, shown: str | None = None) -> None:
        where = f"input, message #{self.validator.position} {shown or _show(item)}"
        self.dead_letters.append(DeadLetter(self.name, f"{where}: {problem}", item))

    def state_size(self) -> int:
        return len(self.validator.events)


def _show(item: Any) -> str:
    """``repr(item)``; a message with the wrong number of fields has none of its own."""
    try:
        return repr(item)
    except Exception:  # noqa: BLE001 - only for a dead letter's reason
        if isinstance(item, tuple):
            return f"{type(item).__name__}{tuple.__repr__(item)}"
        return f"<{type(item).__name__} object>"


class RowsSource(Processor):
    """Ingests rows (dicts) through an :class:`operators.ingress.Ingress`; ``late``,
    ``dead_letters`` and ``stats`` are the ingress's records."""

    _parts = ("ingress",)  # its state is the ingress's (operators.ingress.Ingress.snapshot)

    def __init__(self, name: str = "from_rows", **ingress: Any) -> None:
        super().__init__(name)
        self.ingress = Ingress(name=name, **ingress)
        idle = self.ingress.advance.idle_timeout
        #: how often the hosting shell calls :meth:`poll` (None: never, no idle timeout)
        self.poll_every_s = None if idle is None else min(0.05, idle / 4)

    #: the planner sets this when the source has a late stream (``Stream.late()``): the late
    #: rows then also go out as :class:`~operators.ingress.LateOut` markers
    late_stream = False

    def process(self, batch: Iterable[Any], port: int = 0) -> list[Message]:
        first = len(self.ingress.late)
        if self.ingress.advance.per_key is not None and self.clock is not None:
            self.ingress.arrival = self.clock()  # when each key's rows last came (for why)
        out = self.ingress.push(batch, now=None if self.clock is None else self.clock())
        if self.late_stream and len(self.ingress.late) > first:
            out.extend(late_markers(self.ingress.late, first, self.ingress.late_lifetime))
        return out

    def poll(self, now: float) -> list[Message]:
        """The idle timer (``AdvanceTime(idle_timeout=...)``): a CTI when the source is quiet."""
        return self.ingress.poll(now)

    def next_poll(self, now: float) -> float | None:
        """When the idle timer may fire: see :meth:`operators.ingress.Ingress.next_poll`."""
        return self.ingress.next_poll(now)

    def finish(self) -> list[Message]:
        """End of input: the final CTI, past every finite endpoint."""
        return self.ingress.end()

    # read-only views of the ingress's records, which nothing assigns on a source
    @property
    def late(self) -> list[LateEvent]:  # type: ignore[override]
        return self.ingress.late

    @property
    def dead_letters(self) -> list[DeadLetter]:  # type: ignore[override]
        return self.ingress.dead_letters

    @property
    def stats(self) -> dict[str, int]:  # type: ignore[override]
        return self.ingress.stats

    def state_size(self) -> int:
        return self.ingress.state_size()


class Passthrough(Processor):
    """Forwards every message unchanged."""

    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        return batch if isinstance(batch, list) else list(batch)
