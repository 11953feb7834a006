"""Ingress: turning plain rows into a physical stream, and deciding when time advances.

A source reads rows (dicts) and needs three decisions before the temporal algebra can run
(docs/ctis.md):

* **time**: which columns hold the start (and end) of each event, converted to integer ticks
  by :func:`operators.ticks.to_ticks` (1 tick = 1 µs since the Unix epoch, UTC);
* **shape**: ``"point"`` (``[s, s + 1)``), ``"interval"`` (``[s, e)``) or ``"edge"`` (a row
  without an end opens ``[s, ∞)``; a later row with the same id and an end closes it);
* **progress**: :class:`AdvanceTime` says when the source promises that time has moved on by
  emitting a CTI, what happens to an event that arrives behind such a promise, and how a quiet
  source still flushes its last events (the timer of the CTI article, docs/ctis.md).

:class:`AdvanceTime` lives in :mod:`operators.advance_time`, the late stream in
:mod:`operators.late_stream` and ``import_ctis`` in :mod:`operators.import_ctis`; this module
names them too.

:class:`Ingress` is composed of its concerns, each a part it is built of, their methods all on
it (no call more per row): the row path (:mod:`operators.ingress_rows`), the column path
(:mod:`operators.ingress_columns`) and the CTIs and late accounting
(:mod:`operators.ingress_progress`); this module holds the configuration, the entry point
:meth:`Ingress.push` and the checkpoint.

:class:`Ingress` is the pure state machine: rows in, ``Insert``/``Retract``/``Cti`` messages
out. It never reads a clock: callers pass their wall time (``now``) to :meth:`Ingress.push`
and :meth:`Ingress.poll`. Nothing is lost silently (docs/errors.md): each row is processed, dropped
or adjusted by the declared policy (recorded in ``late``), or sent to ``dead_letters`` with a
reason.

    >>> ingest([{"t": 10, "kwh": 1.5}, {"t": 12, "kwh": 0.5}], start="t")
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=0, start=10, end=11, payload={'t': 10, 'kwh': 1.5}),
     Insert(id=1, start=12, end=13, payload={'t': 12, 'kwh': 0.5}),
     Cti(time=13)]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .advance_time import DEFAULT_ADVANCE, POLICIES, SHAPES, AdvanceTime
from .errors import DeadLetter, LateEvent
from .events import MAX_TIME, MIN_TIME, Message
from .import_ctis import ImportCti
from .ingress_columns import IngressColumns
from .ingress_rows import IngressRows
from .late_stream import LateOut, LateStream, late_markers
from .ticks import to_ticks

__all__ = ["POLICIES", "SHAPES", "AdvanceTime", "ImportCti", "Ingress", "LateOut", "LateStream",
           "ingest", "late_markers", "to_ticks"]


def _getter(spec: Any, what: str) -> Callable[[Any], Any]:
    if callable(spec):
        return spec
    if isinstance(spec, str):
        def get(row: Any, _key: str = spec) -> Any:
            return row.get(_key)
        return get
    raise TypeError(
        f"Ingress({what}={spec!r}): give a column name (str) or a function row -> value"
    )


_STATS = ("received", "processed", "dropped", "adjusted", "dead_lettered", "ctis")
#: The state of per-key progress (:mod:`operators.ingress_keys`).
_KEY_FIELDS = ("_keys", "_lows", "_pushed", "_moved", "_low", "_late_keys")
#: Below every time: "no event yet" for the latest start and the horizon.
_NONE = MIN_TIME - 1


class Ingress(IngressRows, IngressColumns):
    """Turns rows (dicts) into physical messages: events of one shape plus generated CTIs.

    ``start``, ``end`` and ``id`` are column names or functions ``row -> value``; ``id=None``
    mints ids 0, 1, 2, ... (edges need an id column, so that an end edge can find its start
    edge). The payload of every event is the row itself.

    * ``"point"``: ``Insert(id, s, s + 1, row)``;
    * ``"interval"``: ``Insert(id, s, e, row)``;
    * ``"edge"``: a row with no end (missing, None, NaN) opens ``Insert(id, s, ∞, row)``; a
      row with an end closes the open edge with the same id:
      ``Retract(id, s, ∞, e, row_of_the_start_edge)``. The end edge's start column is not
      used (the open edge knows its start).

    Rows that cannot become events (a missing or unparsable time, ``end <= start``, a row
    that is not a dict, an id that was already used, an end edge for an id with no open edge)
    go to :attr:`dead_letters` with a reason; events behind the latest CTI are dropped or
    adjusted by ``advance.policy`` and recorded in :attr:`late`. :attr:`stats` counts every
    row: ``received == processed + dropped + adjusted + dead_lettered``.

    Memory: the open edges, plus the set of user ids already used (ids are unique within a
    stream, docs/model.md); minted ids cost nothing.

    >>> src = Ingress(start="t", end="until", shape="edge", id="k",
    ...               advance=AdvanceTime(every=1))
    >>> src.push([{"k": "a", "t": 5}, {"k": "a", "until": 9}])
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id='a', start=5, end=9223372036854775807, payload={'k': 'a', 't': 5}),
     Cti(time=5),
     Retract(id='a', start=5, end=9223372036854775807, new_end=9, payload={'k': 'a', 't': 5})]
    >>> src.end()
    [Cti(time=9)]
    """

    def __init__(
        self,
        start: str | Callable[[Any], Any],
        end: str | Callable[[Any], Any] | None = None,
        shape: str = "point",
        id: str | Callable[[Any], Any] | None = None,
        advance: AdvanceTime = DEFAULT_ADVANCE,
        name: str = "source",
    ) -> None:
        if shape not in SHAPES:
            raise ValueError(f"Ingress(shape={shape!r}): shape must be one of {SHAPES}")
        if shape == "interval" and end is None:
            raise ValueError(
                "Ingress(shape='interval') needs end=: the column (or function) that holds "
                "each event's end; use shape='point' for events without an end"
            )
        if shape == "edge" and id is None:
            raise ValueError(
                "Ingress(shape='edge') needs id=: the column (or function) that ties an end "
                "edge to its start edge"
            )
        if not isinstance(advance, AdvanceTime):
            raise TypeError(f"Ingress(advance={advance!r}): pass an AdvanceTime(...)")
        self.name = name
        self.shape = shape
        self._start_spec, self._end_spec = start, end
        self.advance = advance
        self._get_start = _getter(start, "start")
        self._get_end = _getter(end, "end") if end is not None else None
        self._get_id = _getter(id, "id") if id is not None else None
        #: With a column name anywhere, rows must be dicts.
        self._need_dict = any(isinstance(c, str) for c in (start, end, id))
        self._reset()

    def _reset(self) -> None:
        #: The latest CTI emitted (MIN_TIME: none yet).
        self.cti = MIN_TIME
        #: Records of late events (dropped or adjusted), oldest first.
        self.late: list[LateEvent] = []
        #: Records of rows that could not become events, oldest first.
        self.dead_letters: list[DeadLetter] = []
        #: Row and CTI counters.
        self.stats: dict[str, int] = dict.fromkeys(_STATS, 0)
        self._latest = _NONE  # largest start read from an accepted row
        self._top = _NONE  # largest start sent (adjusted starts included)
        self._horizon = _NONE  # largest finite end sent (start + 1 for ends at ∞)
        self._count = 0  # accepted events since the last count-based CTI
        self._mark: int | None = None  # latest start at the last interval-based CTI
        self._next_id = 0
        self._open: dict[Hashable, tuple[int, Any]] = {}  # edge id -> (start sent, row)
        self._used: set[Hashable] = set()  # user ids already sent
        self._dropped_edges: set[Hashable] = set()  # start edges dropped as late
        self._last_wall: float | None = None
        self._ended = False
        self._init_keys()  # per-key progress (AdvanceTime(per_key=...))

    # -- the entry points ---------------------------------------------------------------------
    def push(self, rows: Iterable[Any], now: float | None = None) -> list[Message]:
        """Process ``rows`` in order; return the events and the CTIs they generate.

        ``now`` is the caller's wall clock in seconds (e.g. ``time.monotonic()``), used only
        to time :attr:`AdvanceTime.idle_timeout`; a push that carries rows restarts the idle
        timer.

        >>> Ingress(start="t", advance=AdvanceTime(every=2)).push([{"t": 3}, {"t": 1}])
        ... # doctest: +NORMALIZE_WHITESPACE
        [Insert(id=0, start=3, end=4, payload={'t': 3}),
         Insert(id=1, start=1, end=2, payload={'t': 1}), Cti(time=3)]
        """
        if self._ended:
            raise RuntimeError(
                f"source {self.name!r}: push() after end(); the final CTI has been emitted, "
                f"so no event may follow (create a new Ingress for a new stream)"
            )
        if type(rows) is dict:
            return self.push_columns(rows, now)
        return self._push_rows(rows, now)

    # -- checkpoints and checks -----------------------------------------------------------------
    # (snapshot() and restore() by the convention of operators.processor.Stateful: restore() on an
    # Ingress with the same configuration resumes exactly where the snapshot's stood)
    _state_fields = ("cti", "late", "dead_letters", "stats", "_latest", "_top", "_horizon",
                     "_count", "_mark", "_next_id", "_open", "_used", "_dropped_edges",
                     "_last_wall", "_ended", *_KEY_FIELDS)

    def restore(self, state: dict[str, Any]) -> None:
        if "_keys" not in state:  # a snapshot from before per-key progress: it had none
            blank = Ingress(start="t")
            state = {**state, **{f: getattr(blank, f) for f in _KEY_FIELDS}}
        super().restore(state)

    def state_size(self) -> int:
        """Number of open edges held in state."""
        return len(self._open)

    def _check(self) -> None:
        """Assert the internal invariants (tests call this after every step)."""
        s = self.stats
        assert all(s[k] >= 0 for k in _STATS), s
        assert s["received"] == (s["processed"] + s["dropped"] + s["adjusted"]
                                 + s["dead_lettered"]), s
        assert s["processed"] + s["adjusted"] == 0 or self._top > _NONE, "events but no start"
        assert self._top <= self._horizon or self._top == _NONE
        for eid, (start, _) in self._open.items():
            assert MIN_TIME <= start < MAX_TIME, (eid, start)
            assert start <= self._top, (eid, start, self._top)
            assert eid in self._used and eid not in self._dropped_edges, eid
        if self.advance.every is not None:
            assert 0 <= self._count < self.advance.every
        assert MIN_TIME <= self.cti <= MAX_TIME

    def __repr__(self) -> str:
        return f"<Ingress {self.name} shape={self.shape} cti={self.cti}>"


def ingest(
    rows: Iterable[Any],
    start: str | Callable[[Any], Any],
    end: str | Callable[[Any], Any] | None = None,
    shape: str = "point",
    id: str | Callable[[Any], Any] | None = None,
    advance: AdvanceTime = DEFAULT_ADVANCE,
    name: str = "source",
) -> list[Message]:
    """Ingest a whole finite table: one :class:`Ingress`, ``push(rows)``, then ``end()``.

    Late and dead-lettered rows are not returned; use :class:`Ingress` to read them.

    >>> ingest([{"s": 2, "e": 5}, {"s": 1, "e": 3}], start="s", end="e", shape="interval")
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=0, start=2, end=5, payload={'s': 2, 'e': 5}),
     Insert(id=1, start=1, end=3, payload={'s': 1, 'e': 3}), Cti(time=5)]
    """
    source = Ingress(start, end=end, shape=shape, id=id, advance=advance, name=name)
    return source.push(rows) + source.end()
