"""What a :class:`operators.detect.Detect` shows of itself (a base class of it): its live
partial matches per key, and the candidate runs that ended without a match, with what ended
each (docs/patterns.md#seeing-a-detect-step).

* **Partial matches** are computed on request, never kept: per key, its oldest *open*
  attempt (one that still wants rows: a ``B+`` taking rows, a ``C`` not arrived), the
  symbols its preferred run has bound so far (``A B B`` of ``A B+ C``), the events bound
  (their starts and ids) and its deadline (the first row's start + ``within``: a CTI past it
  ends the run). The keys are looked at oldest first (by their first held row), at most
  :data:`KEYS_LOOKED` of them, and at most ``limit`` partials are shown: never every key.
  The run is found again by the backtracking program over the rows (the predicates are
  called again: they are deterministic), or over the column mode's symbol masks.
* **Ended runs** are recorded where the matching already lets a candidate go: a CTI that
  frees an attempt that read past its first row (or wanted more) without matching -- the
  ``within`` deadline passed (or the input ended) while it wanted rows, or the last row it
  read fit none of the symbols its runs expected there (a failed predicate on that event) --
  and a deletion (a retraction to ``new_end == start``) of an event a candidate or match had
  bound. They are the last :data:`ENDED_KEPT` (a deque): a diagnostic, not state, so no
  checkpoint holds them (a restored step starts with none). The column mode keeps what
  it reads of the attempt it lets go, with its key (one small tuple per ended attempt,
  nothing per event), and reads its rows' starts and ids at the CTI's end, before its
  batches go.

::

    pattern 'A B+ C', within 10    rows a@1 x@2 a@3 b@4, then Cti(5)
    partial   A B so far: a@3 b@4, deadline 13
    ended     the run from a@1, at x@2 (neither B nor C)

    >>> from operators.detect import Detect
    >>> from operators.events import Cti, Insert
    >>> is_ = lambda v: lambda p, m: p == v
    >>> op = Detect("A B+ C", {"A": is_("a"), "B": is_("b"), "C": is_("c")}, within=10)
    >>> _ = op.process([Insert(t, t, t + 1, p) for t, p in
    ...                 [(1, "a"), (2, "x"), (3, "a"), (4, "b")]] + [Cti(5)])
    >>> v = op.partial_matches()
    >>> [(p.symbols, p.events, p.deadline) for p in v.partials]
    [((('A', 1), ('B', 1)), ((3, '3'), (4, '4')), 13)]
    >>> [(e.first_start, e.cause, e.at, e.by) for e in v.ended]
    [(1, 'event', 2, '2')]
"""

from __future__ import annotations

import heapq
import reprlib
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .detect_rows import BITS, END, ID, PAYLOAD, REACH, SEQ, START, WANTS, Match, Row
from .events import MAX_TIME
from .pattern import JMP, MATCH, PROGRESS, SAVE, SPLIT, SYM

if TYPE_CHECKING:
    from .detect_columns import ColumnState

#: Partial matches shown per detect step by default (the oldest).
PARTIALS_SHOWN = 20
#: Keys looked at (oldest first) to find the partial matches shown.
KEYS_LOOKED = 2_000
#: Ended candidate runs kept per detect step (the newest).
ENDED_KEPT = 50
#: Events of a partial match listed (the first and last half of them when it holds more).
EVENTS_SHOWN = 10
#: The characters of a key's or an id's repr shown.
REPR_CHARS = 60

#: the causes of an ended run (:attr:`Ended.cause`)
EVENT, WITHIN, END_OF_INPUT, RETRACTION = "event", "within", "end of input", "retraction"


def short(value: Any, chars: int = REPR_CHARS, level: int = 6) -> str:
    """A key, id or payload as a report shows it: its repr, ``level`` deep, cut to
    ``chars``."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = chars
    r.maxlevel = level
    try:
        text = r.repr(value)
    except Exception:  # noqa: BLE001 - only for a display
        text = f"<{type(value).__name__}>"
    return text if len(text) <= chars else text[:chars - 1] + "…"


@dataclass(frozen=True)
class Partial:
    """A key's oldest open candidate run: its ``key`` (repr; ``""`` without ``key=``), the
    ``symbols`` bound so far as runs ``(symbol, count)`` in order, the ``bound`` rows in all,
    ``events`` ``(start, id repr)`` of the first and last of them (all when at most
    :data:`EVENTS_SHOWN`), its ``deadline`` (first start + within), whether it is a
    speculative match already that may still extend (``matched``), and how many open runs
    the key holds in all (``open_runs``)."""

    key: str
    symbols: tuple[tuple[str, int], ...]
    bound: int
    events: tuple[tuple[int, str], ...]
    deadline: int
    matched: bool
    open_runs: int

    @property
    def start(self) -> int | None:
        """The first bound row's start (None: the run has bound nothing yet)."""
        return self.events[0][0] if self.events else None


@dataclass(frozen=True)
class Ended:
    """A candidate run that ended without a match: its ``key`` (repr), its first row
    (``first_start``, ``first_id`` repr), its ``deadline``, and what ended it (``cause``):
    ``"event"`` -- the event ``by`` starting at ``at`` fit none of the symbols its runs
    expected there; ``"within"`` -- the CTI ``at`` passed the deadline while it wanted rows;
    ``"end of input"`` -- the input ended while it wanted rows; ``"retraction"`` -- the event
    ``by`` (starting at ``at``) it had bound was deleted."""

    key: str
    first_start: int
    first_id: str
    cause: str
    at: int
    by: str | None
    deadline: int


@dataclass(frozen=True)
class DetectView:
    """What a detect step shows of itself: its ``step`` (name), ``pattern`` and ``within``;
    ``partials`` (the oldest, at most the limit asked), ``keys`` holding rows in all and
    ``looked`` at; ``ended`` the last ended candidate runs, newest last."""

    step: str
    pattern: str
    within: int
    partials: tuple[Partial, ...]
    keys: int
    looked: int
    ended: tuple[Ended, ...]


class EndedRuns:
    """The last :data:`ENDED_KEPT` ended candidate runs of a detect (see the module
    docstring): ``runs`` holds ``(cause, key, first start, first id, at, by id,
    deadline)``, or, as the column mode lets a candidate go, ``(seq, last seq read, wants,
    key)`` of its attempt (four items), until :meth:`resolve` reads its rows (before their
    batches go)."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: deque[Any] = deque(maxlen=ENDED_KEPT)

    def __deepcopy__(self, memo: Any) -> EndedRuns:  # (a diagnostic: a copy starts afresh)
        return EndedRuns()

    def resolve(self, cols: ColumnState, time: int, within: int) -> None:
        """Read the rows of the column mode's records, ended at ``Cti(time)``."""
        runs = self.runs
        for x in range(len(runs)):  # (at most ENDED_KEPT: a few µs a CTI)
            r = runs[x]
            if len(r) == 4:
                seq, read, wants, k = r
                first_start, first_id = _row_of(cols, seq)
                deadline = first_start + within
                if wants:
                    runs[x] = (run_out(time), k, first_start, first_id, time, None, deadline)
                else:
                    at, by = _row_of(cols, read)
                    runs[x] = (EVENT, k, first_start, first_id, at, by, deadline)

    def view(self) -> tuple[Ended, ...]:
        return tuple(Ended(short(r[1]) if r[1] is not None else "", r[2], short(r[3]), r[0],
                           r[4], None if r[5] is None else short(r[5]), r[6])
                     for r in self.runs if len(r) == 7)


def run_out(time: int) -> str:
    return END_OF_INPUT if time >= MAX_TIME else WITHIN


def _row_of(cols: ColumnState, seq: int) -> tuple[int, Any]:
    """The start and id of the column mode's row that came ``seq``-th."""
    try:
        return cols.start_id(seq)
    except (KeyError, IndexError):  # (its batch is gone)
        return 0, "?"


class Seeing:
    """The methods that show a detect's partial matches and ended runs, on its state."""

    # (the operator's state: made by Detect.__init__)
    keys: dict[Hashable, list[Any]]
    cols: Any
    ended: EndedRuns
    within: int
    pattern: str
    program: Any
    preds: tuple[Callable[[Any, Any], Any] | None, ...]
    index: dict[str, int]
    name: str

    if TYPE_CHECKING:
        def _test(self, pred: Callable[[Any, Any], Any], sym: int, payload: Any,
                  view: Match) -> bool: ...

    def partial_matches(self, limit: int = PARTIALS_SHOWN) -> DetectView:
        """The ``limit`` oldest partial matches (one per key: its oldest open run) and the
        last ended candidate runs (see the module docstring). Read-only; O(keys) to order
        them, then the rows of one ``within`` per key looked at."""
        heap: list[tuple[int, int, bool, Hashable]] = []
        for n, (k, ks) in enumerate(self.keys.items()):
            heap.append((ks[0][0][START], n, False, k))
        base = len(heap)
        for n, (k, ck) in enumerate(self.cols.keys.items(), base):
            if ck.starts:
                heap.append((ck.starts[0], n, False, k))
        heapq.heapify(heap)
        found: list[Partial] = []
        looked = 0
        while heap and len(found) < limit and looked < KEYS_LOOKED:
            _, n, exact, k = heapq.heappop(heap)
            if exact:  # (its oldest open run: no key left can have an older one)
                p = self._partial(k, n >= base)
                if p is not None:
                    found.append(p)
                continue
            looked += 1
            first = self._first_open(k, n >= base)
            if first is not None:
                heapq.heappush(heap, (first, n, True, k))
        return DetectView(self.name, self.pattern, self.within, tuple(found),
                          len(self.keys) + len(self.cols.keys), looked, self.ended.view())

    def _reading(self, ks: list[Any], kk: tuple[Any, ...]) -> list[tuple[int, Any]]:
        """The attempts of a key (``ks``) that read the row of order key ``kk`` past their
        first row and matched or want more (those a deletion of it may end): ``(seq, order
        key of the first row)`` each."""
        _, recs, reaching = ks
        return [(seq, first) for seq, first in reaching.items()
                if (rec := recs.get(seq)) is not None and first < kk <= rec[REACH]
                and (rec[END] is not None or rec[WANTS])]

    def _ended_by_deletion(self, ks: list[Any], before: list[tuple[int, Any]],
                           k: Hashable, row: Row) -> None:
        """Record the attempts ``before`` (:meth:`_reading`) that the deletion of ``row``
        left with no match and wanting nothing."""
        rows, recs, _ = ks
        for seq, kk in before:
            rec = recs.get(seq)
            if rec is not None and rec[END] is None and not rec[WANTS]:
                first = rows[bisect_left(rows, kk)]
                self.ended.runs.append((RETRACTION, k, first[START], first[ID], row[START],
                                        row[ID], first[START] + self.within))

    def _first_open(self, k: Hashable, columns: bool) -> int | None:
        """The start of key ``k``'s oldest open run (None: it has none)."""
        if columns:
            ck = self.cols.keys[k]
            for g, wants in zip(ck.firsts, ck.wants):
                if wants:
                    return int(ck.starts[bisect_left(ck.seqs, g)])
            return None
        rows, recs, _ = self.keys[k]
        for row in rows:
            rec = recs.get(row[SEQ])
            if rec is not None and rec[WANTS]:
                return int(row[START])
        return None

    def _partial(self, k: Hashable, columns: bool) -> Partial | None:
        """Key ``k``'s oldest open run, as :class:`Partial`."""
        code, regs, names = self.program.code, self.program.registers, self.program.names
        syms: list[int] = []
        if columns:
            ck = self.cols.keys[k]
            open_at = [a for a, wants in enumerate(ck.wants) if wants]
            i, count = bisect_left(ck.seqs, ck.firsts[open_at[0]]), len(open_at)
            starts, masks = ck.starts, ck.masks
            j = bisect_left(starts, starts[i] + self.within, i)
            open_run(code, regs, i, j, lambda pos, s: masks[pos] >> s & 1, syms)
            cols = self.cols
            at = [(int(starts[x]), cols.id_of(ck.seqs[x])) for x in _shown(i, len(syms))]
            first, matched = int(starts[i]), ck.ends[open_at[0]] is not None
        else:
            rows, recs, _ = self.keys[k]
            opens = [(x, recs[r[SEQ]]) for x, r in enumerate(rows)
                     if r[SEQ] in recs and recs[r[SEQ]][WANTS]]
            (i, rec), count = opens[0], len(opens)
            j = bisect_left(rows, (rows[i][START] + self.within,), i)
            view = Match(self.index, rows, i, syms)
            open_run(code, regs, i, j, self._tester(rows, view), syms)
            at = [(int(rows[x][START]), rows[x][ID]) for x in _shown(i, len(syms))]
            first, matched = int(rows[i][START]), rec[0] is not None
        runs: list[tuple[str, int]] = []
        for s in syms:
            if runs and runs[-1][0] == names[s]:
                runs[-1] = (names[s], runs[-1][1] + 1)
            else:
                runs.append((names[s], 1))
        return Partial("" if k is None else short(k), tuple(runs), len(syms),
                       tuple((t, short(e)) for t, e in at), first + self.within,
                       matched, count)

    def _tester(self, rows: list[Row], view: Match) -> Callable[[int, int], bool]:
        """Whether ``rows[pos]`` fits symbol ``s``, as the matching decides it."""
        preds = self.preds

        def test(pos: int, s: int) -> bool:
            pred = preds[s]
            if pred is None:
                return True
            b = rows[pos][BITS] >> 2 * s
            if b & 1:
                return bool(b & 2)
            try:
                return self._test(pred, s, rows[pos][PAYLOAD], view)
            except Exception:  # noqa: BLE001 - a predicate that raises: the matching says so
                return False
        return test


def _shown(i: int, n: int) -> list[int]:
    """The rows of a run of ``n`` rows from ``i`` whose events are listed."""
    if n <= EVENTS_SHOWN:
        return list(range(i, i + n))
    half = EVENTS_SHOWN // 2
    return [*range(i, i + half), *range(i + n - half, i + n)]


def open_run(code: Any, registers: int, i: int, j: int, test: Callable[[int, int], Any],
             syms: list[int]) -> list[int] | None:
    """The symbols bound by the preferred run from row ``i`` that wanted row ``j`` (the
    first of the backtracking program's threads to run out of rows before ``j``, as
    ``Matching._attempt`` runs them); ``syms`` is filled as the run goes (a predicate's
    ``match`` view reads it). None (``syms`` emptied): no thread wanted a row before the
    match was found."""
    stack: list[tuple[int, int, tuple[int, ...]]] = []
    regs: tuple[int, ...] = (-1,) * registers
    pc, pos = 0, i
    while True:
        op, a, b = code[pc]
        if op == SYM:
            if pos >= j:
                return syms
            if test(pos, a):
                syms.append(a)
                pos += 1
                pc += 1
                continue
        elif op == SPLIT:
            stack.append((b, pos, regs))
            pc = a
            continue
        elif op == JMP:
            pc = a
            continue
        elif op == SAVE:
            regs = (*regs[:a], pos, *regs[a + 1:])
            pc += 1
            continue
        elif op == PROGRESS:
            if regs[a] != pos:
                pc += 1
                continue
        elif op == MATCH and pos > i:
            syms.clear()
            return None
        if not stack:
            syms.clear()
            return None
        pc, pos, regs = stack.pop()
        del syms[pos - i:]
