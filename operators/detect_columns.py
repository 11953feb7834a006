"""The column mode of ``detect``: rows kept as columns per key and matched over symbol codes.

While every predicate of a ``detect`` is decided column-wise (:meth:`Detect.decided
<operators.detect.Detect.decided>`) and each key's rows come in start order (each later than
the key's rows so far, as a source in time order gives them), a column batch is matched
without a Python value per row: each row is a *symbol mask* (bit ``s`` set when symbol ``s``
may bind it), and an attempt runs a lazily built deterministic automaton over the masks
(:class:`Automaton`). Payloads are read only for the rows of a match (its measures), from the
batches they came in.

The automaton is the backtracking program run as a Pike VM: a state is the program's waiting
symbol instructions in order of preference; a step reads a row and keeps, in order, the
threads the row lets on, cutting the less preferred ones when a thread reaches ``MATCH``. It
finds the match the backtracking finds, reads the same rows and wants the same rows (the
threads it steps past a match are the ones the backtracking tries before it), so an attempt's
record (how far it read, whether it wanted more, its match) is the per-row path's. The rows a
match binds to each symbol come from the backtracking program over the masks, run once per
match.

A key leaves the column mode for the per-row state (``Detect._to_rows``) when an insert of it
comes, or a batch's rows of it are out of order; a deletion, or a batch whose predicates run
per row (or whose key is no int column), moves every key. A key in rows takes the rows of
later batches as rows, until its rows are all final and freed: it then starts again in the
column mode.
"""

from __future__ import annotations

import functools
from array import array
from bisect import bisect_left
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from .columns import Columns
from .pattern import JMP, MATCH, SPLIT, SYM, Program

#: States beyond this (a pattern with large counted repetitions) leave the column mode.
MAX_STATES = 4_096
#: Emptied :class:`ColumnKey` s kept to be used again.
SPARE_MOST = 4_096


class TooLarge(Exception):
    """The automaton would have more than :data:`MAX_STATES` states."""


class Automaton:
    """The deterministic automaton of a :class:`~operators.pattern.Program` without progress
    registers, over symbol masks, its states made as rows need them.

    ``step(state, mask) -> (state, matched)``: ``matched`` when a thread reached ``MATCH``
    after reading the row (the match so far then ends at it); state 0 is dead (no thread)."""

    def __init__(self, program: Program) -> None:
        assert program.registers == 0
        self.code = program.code
        self.states: list[tuple[int, ...]] = []
        self.ids: dict[tuple[int, ...], int] = {}
        self.moves: list[dict[int, tuple[int, bool]]] = []
        self._id(())
        threads, _ = self._closure([0], initial=True)
        self.start = self._id(threads)

    def _id(self, threads: tuple[int, ...]) -> int:
        sid = self.ids.get(threads)
        if sid is None:
            if len(self.states) >= MAX_STATES:
                raise TooLarge
            sid = self.ids[threads] = len(self.states)
            self.states.append(threads)
            self.moves.append({})
        return sid

    def _closure(self, pcs: list[int], initial: bool = False) -> tuple[tuple[int, ...], bool]:
        """The symbol instructions reached from ``pcs`` (in order of preference) without
        reading a row, and whether ``MATCH`` was reached (the less preferred are then cut);
        at the first row ``MATCH`` is no match (a match is never empty)."""
        code = self.code
        out: list[int] = []
        seen: set[int] = set()

        def add(pc: int) -> bool:
            if pc in seen:
                return False
            seen.add(pc)
            op, a, b = code[pc]
            if op == SYM:
                out.append(pc)
                return False
            if op == JMP:
                return add(a)
            if op == SPLIT:
                return add(a) or add(b)
            assert op == MATCH
            return not initial

        for pc in pcs:
            if add(pc):
                return tuple(out), True
        return tuple(out), False

    def step(self, state: int, mask: int) -> tuple[int, bool]:
        move = self.moves[state].get(mask)
        if move is None:
            code = self.code
            ahead = [pc + 1 for pc in self.states[state] if mask >> code[pc][1] & 1]
            threads, matched = self._closure(ahead)
            move = self.moves[state][mask] = (self._id(threads), matched)
        return move

    def run(self, masks: list[int], i: int, j: int) -> tuple[int | None, int, bool]:
        """The attempt from row ``i`` over rows ``i .. j - 1``: the last row of its match or
        None, the last row it read, whether it wanted row ``j``."""
        state, pos, end, moves = self.start, i, None, self.moves
        while True:
            if pos == j:
                return end, pos - 1, True
            mask = masks[pos]
            move = moves[state].get(mask)
            state, matched = self.step(state, mask) if move is None else move
            pos += 1
            if matched:
                end = pos - 1
            if not state:
                return end, pos - 1, False


def bind(program: Program, masks: list[int], i: int, e: int) -> list[int]:
    """The symbol bound to each row of the match from row ``i`` to row ``e``: the
    backtracking program over the masks, rows up to ``e`` (the preferred match found up to
    there is the one that ends at ``e``)."""
    code = program.code
    stack: list[tuple[int, int, int]] = []
    syms: list[int] = []
    pc, pos, j = 0, i, e + 1
    while True:
        op, a, b = code[pc]
        if op == SYM:
            if pos < j and masks[pos] >> a & 1:
                syms.append(a)
                pos += 1
                pc += 1
                continue
        elif op == SPLIT:
            stack.append((b, pos, len(syms)))
            pc = a
            continue
        elif op == JMP:
            pc = a
            continue
        elif op == MATCH and pos > i:
            assert pos == j, "the match ends where the automaton found it"
            return syms
        assert stack, "the automaton found a match"
        pc, pos, n = stack.pop()
        del syms[n:]


def shape(syms: list[int], count: int) -> list[slice | list[int]]:
    """Per symbol ``0 .. count - 1``, where the rows bound to it are in a match (``syms``:
    each row's symbol, :func:`bind`): a slice when they are adjacent or none (a symbol's
    rows most often are), else their indices.

    >>> shape([0, 1, 1, 2], 4)
    [slice(0, 1, None), slice(1, 3, None), slice(3, 4, None), slice(0, 0, None)]
    >>> shape([0, 1, 0], 2)
    [[0, 2], slice(1, 2, None)]
    """
    at: list[slice | list[int]] = []
    for s in range(count):
        rows = [x for x, t in enumerate(syms) if t == s]
        if not rows:
            at.append(slice(0, 0))
        elif rows[-1] - rows[0] + 1 == len(rows):
            at.append(slice(rows[0], rows[-1] + 1))
        else:
            at.append(rows)
    return at


class ColumnKey:
    """One key's rows in the column mode, in order: ``starts``, ``masks``, ``seqs`` (arrival
    numbers: where a row's id and payload are, see :class:`ColumnState`); the attempts that
    read past their row, wanted more or matched, in order, as parallel lists (a record is a
    column of them, no object of its own: a batch makes thousands, which the cyclic
    collector would scan): ``firsts`` (the seq of its first row), ``ends`` (the seq of its
    match's last row, or None), ``reach`` (the seq of the last row it read), ``wants``
    (whether it wanted a row it did not have), ``results`` (its match's payload, what
    ``measures`` gave) and ``oids`` (the id its match was output with; None in final mode).
    Every other row not inside a match is an attempt that read only its own row and failed.
    ``open``: the seqs of the attempts that wanted more rows than the key has."""

    __slots__ = ("ends", "firsts", "masks", "oids", "open", "reach", "results", "seqs",
                 "starts", "wants")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.masks: list[int] = []
        self.seqs: list[int] = []
        self.firsts: list[int] = []
        self.ends: list[int | None] = []
        self.reach: list[int] = []
        self.wants: list[bool] = []
        self.results: list[Any] = []
        self.oids: list[Any] = []
        self.open: list[int] = []

    def output(self, a: int) -> tuple[Any, ...]:
        """The output of the ``a``-th attempt's match: ``(start, end, payload, id)``."""
        seqs, starts, last = self.seqs, self.starts, self.ends[a]
        assert last is not None, "an attempt that matched"
        i = bisect_left(seqs, self.firsts[a])
        e = bisect_left(seqs, last, i)
        return (starts[i], starts[e] + 1, self.results[a], self.oids[a])

    def cut(self, a: int) -> None:
        """Forget the attempts from the ``a``-th on."""
        del self.firsts[a:], self.ends[a:], self.reach[a:], self.wants[a:]
        del self.results[a:], self.oids[a:]

    def drop(self, rows: int, a: int) -> None:
        """Forget the first ``rows`` rows and the first ``a`` attempts."""
        del self.starts[:rows], self.masks[:rows], self.seqs[:rows]
        del self.firsts[:a], self.ends[:a], self.reach[:a], self.wants[:a]
        del self.results[:a], self.oids[:a]
        if self.open:  # (in increasing order)
            del self.open[:bisect_left(self.open, self.seqs[0]) if self.seqs else None]


class ColumnState:
    """Every key's :class:`ColumnKey` and the batches their payloads are in (by the arrival
    number of each batch's first row)."""

    def __init__(self) -> None:
        self.keys: dict[Hashable, ColumnKey] = {}
        self.batches: dict[int, Columns] = {}
        self.firsts: list[int] = []
        #: per batch read from, the reader of its payloads (:func:`_reader`: its columns
        #: made Python sequences once for the batch rather than one numpy item at a time)
        self.readers: dict[int, Callable[[list[int]], list[Any]]] = {}
        #: emptied keys, to be used again (most keys empty at a CTI and come back in the
        #: next batch: a new one would be eleven new objects for the collector to scan)
        self.spare: list[ColumnKey] = []

    def __getstate__(self) -> dict[str, Any]:
        # (a snapshot holds the batches, not the readers made of them, nor the spare keys)
        return {**self.__dict__, "readers": {}, "spare": []}

    def new_key(self, k: Hashable) -> ColumnKey:
        """A key's :class:`ColumnKey`, new (no rows)."""
        ck = self.keys[k] = self.spare.pop() if self.spare else ColumnKey()
        return ck

    def free_key(self, k: Hashable) -> None:
        """Forget key ``k`` (it holds no rows any more)."""
        ck = self.keys.pop(k)
        if len(self.spare) < SPARE_MOST:
            assert not ck.firsts, "an attempt is at a row"
            ck.open.clear()
            self.spare.append(ck)

    def id_of(self, seq: int) -> Any:
        """The id of the row that came ``seq``-th."""
        return self.start_id(seq)[1]

    def start_id(self, seq: int) -> tuple[int, Any]:
        """The start and id of the row that came ``seq``-th."""
        first = self.firsts[bisect_left(self.firsts, seq + 1) - 1]
        batch = self.batches[first]
        eid = batch.ids[seq - first]
        return int(batch.starts[seq - first]), eid.item() if isinstance(eid, np.generic) else eid

    def payload(self, seq: int) -> Any:
        """The payload of the row that came ``seq``-th."""
        return self.payloads([seq])[0]

    def payloads(self, seqs: list[int]) -> list[Any]:
        """The payloads of the rows that came ``seqs``-th (in increasing order)."""
        firsts, at, n = self.firsts, 0, len(seqs)
        first = firsts[-1]
        if seqs[0] >= first:  # (all in the newest batch: most matches)
            return self.reader(first)([g - first for g in seqs])
        out: list[Any] = []
        while at < n:
            b = bisect_left(firsts, seqs[at] + 1) - 1
            first = firsts[b]
            upto = n if b + 1 == len(firsts) else bisect_left(seqs, firsts[b + 1], at)
            out += self.reader(first)([g - first for g in seqs[at:upto]])
            at = upto
        return out

    def reader(self, first: int) -> Callable[[list[int]], list[Any]]:
        """The reader of the payloads of the batch whose first row came ``first``-th."""
        read = self.readers.get(first)
        if read is None:
            read = self.readers[first] = _reader(self.batches[first].payload)
        return read

    def add_batch(self, first: int, msg: Columns) -> None:
        self.batches[first] = msg
        self.firsts.append(first)

    def drop_batches(self) -> None:
        """Forget the batches no held row is in."""
        least = min((ck.seqs[0] for ck in self.keys.values()), default=None)
        while self.firsts and (least is None or (len(self.firsts) > 1
                                                 and self.firsts[1] <= least)):
            first = self.firsts.pop(0)
            del self.batches[first]
            self.readers.pop(first, None)
            if least is None and not self.firsts:
                break


@functools.lru_cache(maxsize=256)
def _maker(names: tuple[Any, ...]) -> Callable[..., list[dict[Any, Any]]] | None:
    """``make(*columns, rows)``: the row dicts of ``rows`` of columns named ``names`` (str),
    as a comprehension of dict displays -- three times faster than ``dict(zip(names, t))``
    per row, and a match's rows are most of what the column mode spends (None: names that
    are not all short strings)."""
    if not names or len(names) > 32 or not all(type(n) is str for n in names):
        return None
    args = ", ".join(f"c{j}" for j in range(len(names)))
    items = ", ".join(f"{n!r}: c{j}[i]" for j, n in enumerate(names))
    # (the names are str, so their reprs are literals: nothing but them is in the code)
    return eval(f"lambda {args}, rows: [{{{items}}} for i in rows]", {})


def _reader(payload: Any) -> Callable[[list[int]], list[Any]]:
    """``read(rows)``: the payloads of a batch's rows ``rows``, its payload columns made
    Python sequences once (see :attr:`ColumnState.readers`)."""
    if isinstance(payload, dict):
        names, columns = list(payload), [_values(c) for c in payload.values()]
        make = _maker(tuple(names))
        if make is not None:
            return functools.partial(make, *columns)
        if not names:
            return lambda rows: [{} for _ in rows]
        return lambda rows: [dict(zip(names, t))
                             for t in zip(*[[c[i] for i in rows] for c in columns])]
    if isinstance(payload, tuple):
        values = [_values(c) for c in payload]
        if not values:
            return lambda rows: [() for _ in rows]
        return lambda rows: list(zip(*[[c[i] for i in rows] for c in values]))
    items = _values(payload)
    return lambda rows: [items[i] for i in rows]


def _values(column: np.ndarray) -> Any:
    """A payload column as what ``tolist()`` gives, indexed: an ``array.array`` of its ints
    (at most 63 bits) or float64s, which makes a Python value only for a row read (most are
    in no match) and holds no object for the cyclic collector to scan (a list of a batch's
    values would be scanned at every collection while the batch is held); else the list."""
    kind, size = column.dtype.kind, column.dtype.itemsize
    if column.dtype.isnative and ((kind == "i" and size <= 8) or (kind == "u" and size < 8)):
        return array("q", column.astype(np.int64, copy=False).tobytes())
    if column.dtype.isnative and kind == "f" and size == 8:
        return array("d", column.tobytes())
    return column.tolist()


def key_runs(keys: np.ndarray | None, starts: np.ndarray) -> tuple[
        np.ndarray, list[Any], list[int], list[bool]]:
    """The batch's rows grouped by key (in arrival order within a key): the order, each
    run's key, where each run begins (and the end), and whether each run's starts
    strictly increase."""
    n = len(starts)
    if keys is None:
        order = np.arange(n)
        bounds = [0, n]
        names: list[Any] = [None]
    else:
        order = np.argsort(narrow(keys), kind="stable")
        sk = keys[order]
        cut = np.flatnonzero(sk[1:] != sk[:-1]) + 1
        bounds = [0, *cut.tolist(), n]
        names = sk[bounds[:-1]].tolist()
    s = starts[order]
    later = s[1:] > s[:-1]
    if keys is not None and len(bounds) > 2:
        later[np.array(bounds[1:-1]) - 1] = True
    if later.all():
        return order, names, bounds, [True] * len(names)
    # (per run: no row at or before the one before it)
    bad = np.flatnonzero(~later) + 1
    runs = np.searchsorted(np.array(bounds), bad, side="right") - 1
    in_order = [True] * len(names)
    for r in set(runs.tolist()):
        in_order[r] = False
    return order, names, bounds, in_order


def narrow(keys: np.ndarray) -> np.ndarray:
    """Integer keys as ``uint16`` offsets from their least when they span fewer than 2**16
    values (the same order and ties): numpy's stable sort is a radix sort on 16 bits, ~10x
    faster than its merge sort on 64 (``A B+ C`` over 1,000 keys: ~4 % of the column mode's
    time went to sorting 65,536 keys by key); other keys as they are.

    >>> narrow(np.array([7, 5, 65_540])).dtype, narrow(np.array([7, 5, 65_541])).dtype
    (dtype('uint16'), dtype('int64'))
    """
    if keys.dtype.kind not in "iu" or keys.dtype.itemsize <= 2 or not len(keys):
        return keys
    least, most = int(keys.min()), int(keys.max())
    if most - least >= 1 << 16:
        return keys
    return (keys - least).astype(np.uint16) if least else keys.astype(np.uint16)


Measure = Callable[[int, int, list[int]], tuple[Any, ...]]
