"""``scan(step, initial, tie=None)``: a user-defined stream operator (StreamInsight's UDSO).

The user's ``step(state, payload) -> (state, outputs)`` is called once per input event, in
start-time order, as soon as a CTI has made the event's existence final: after ``Cti(c)`` no
event starting before ``c`` can arrive or be deleted any more, so the events that start before
``c`` are given to ``step`` (retractions that arrived before are applied first; an event
deleted before the CTI is never seen; a lifetime corrected later does not matter, only the
start and the payload do). Events with equal starts are ordered by ``tie(payload)`` (default
``repr(payload)``, then ``repr`` again when ``tie`` is not total), so the order, and with it
the output, is the same on every plan, batching and runtime. Each payload in ``outputs``
becomes the point event ``[start, start + 1)`` of the input event. The output is final: it is
never retracted::

    input     a 1 [2 ──── 6)   b 5 [4 ─ 5)   c 3 [4 ─────── 9)   d 7 [7 ─ 8) deleted
    CTIs                           Cti(5) ↑                              Cti(10) ↑
    step order                a (start 2), c (start 4, repr '3' < '5'), b (start 4)
    step      running maximum: state 0 → 1 → 3 → 5, output the new maximum when it grows
    output    1 @ [2, 3)   3 @ [4, 5)   5 @ [4, 5)        (d was deleted before Cti(10))

    >>> from operators.events import Insert, Retract, Cti
    >>> op = Scan(lambda m, p: (max(m, p), [p] if p > m else []), 0)
    >>> op.process([Insert("a", 2, 6, 1), Insert("b", 4, 5, 5), Insert("c", 4, 9, 3),
    ...             Insert("d", 7, 8, 7), Cti(5), Retract("d", 7, 8, 7, 7), Cti(10)])
    ... # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=FreshId(0, 0), start=2, end=3, payload=1),
     Insert(id=FreshId(1, 0), start=4, end=5, payload=3),
     Insert(id=FreshId(2, 0), start=4, end=5, payload=5), Cti(time=5), Cti(time=10)]

The state starts as a deep copy of ``initial`` (or :meth:`StreamOperator.initial`'s result for
the class form, :class:`operators.udm.StreamOperator`), is threaded through ``step`` (which may
update it in place and return it) and is checkpointed with the operator. Under
``group_apply`` each key has its own state. Pending events (not stepped yet) are kept by id
and in a heap of ``(start, tie)``; a CTI drains the heap up to its time, so the state is the
user's state plus the events after the CTI.

**The column form**, :class:`ColumnScan`: ``step_columns(state, batch)`` is called once per
CTI with all the events it made final as one :class:`~operators.columns.Columns` in the same
order (start, tie, repr, arrival), and returns output columns with, per output row, the batch
row it belongs to; the CHT is the per-event form's. Its pending events are kept as the column
batches they came in (single inserts gathered into one), deletions applied when the CTI comes;
the order is a ``lexsort`` of the starts and the tie key's columns (as the column expressions
compute them, :func:`~operators.columns.apply_columns`), strings by their rank, where numpy
orders the keys as Python does; in Python otherwise. Its outputs are one column batch per CTI.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import pickle
from collections.abc import Callable, Hashable, Iterable
from typing import Any

import numpy as np

from .columns import Columns, apply_columns, concat, rows_as_columns
from .events import FreshId, Insert, Message, Retract
from .processor import Processor
from .udm import UDM, StreamOperator, resolve

_new = tuple.__new__


class Scan(Processor):
    """Steps a user state through the events in start order, once each is final; emits the
    outputs as points at the event's start. See the module docstring."""

    #: (and ``state``, the user's, pickled by :meth:`snapshot`)
    _state_fields = ("pending", "heap", "seq", "stepped", "dirty", "chunks", "loose",
                     "deletes", "emitted")

    def __init__(self, step: Any, initial: Any = None, tie: Callable[[Any], Any] | None = None,
                 name: str | None = None) -> None:
        super().__init__(name)
        self.udso = udso = as_stream_operator(step, initial, tie)
        self.step_fn = udso.step
        self.tie_fn = udso.tie
        #: the default tie (repr) is total; a user's is made total by repr after it
        self.plain_tie = getattr(udso.tie, "__func__", None) is StreamOperator.tie
        self.state = udso.initial()
        #: events not stepped yet: id -> [start, payload, seq]
        self.pending: dict[Hashable, list[Any]] = {}
        #: (start, tie key, seq, id) min-heap of the pending events; an entry whose seq is
        #: not its event's (deleted, or the id reused) is skipped when it surfaces
        self.heap: list[tuple[int, Any, int, Hashable]] = []
        self.seq = 0
        #: events stepped so far: the origin of output ids
        self.stepped = 0
        #: the state may differ from the initial one (see state_size)
        self.dirty = False
        #: a ColumnScan: pending events kept as column batches, stepped a CTI at a time
        self.columnar = isinstance(udso, ColumnScan)
        #: (columnar) pending batches in arrival order, each ``(Columns, seqs)``
        self.chunks: list[tuple[Columns, np.ndarray]] = []
        #: (columnar) single inserts not in a batch yet: ``(seq, id, start, payload)``
        self.loose: list[tuple[int, Hashable, int, Any]] = []
        #: (columnar) full deletions not applied yet: ``(seq when it came, id, start)``
        self.deletes: list[tuple[int, Hashable, int]] = []
        #: (columnar) outputs so far: the origin of output ids
        self.emitted = 0

    # -- messages -----------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        eid, start, _, payload = msg
        seq = self.seq
        self.seq += 1
        if self.columnar:
            self.loose.append((seq, eid, start, payload))
            return []
        self.pending[eid] = [start, payload, seq]
        heapq.heappush(self.heap, (start, self._tie(payload), seq, eid))
        return []

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """A batch of inserts: :meth:`on_insert`'s records and heap entries for all of them
        at once (no ``Insert`` per event; a batch sorted by start, into an empty heap, is a
        heap as it is)."""
        if self.columnar:
            if len(msg):
                self._flush_loose()
                self.chunks.append((msg, np.arange(self.seq, self.seq + len(msg))))
                self.seq += len(msg)
            return []
        ids, starts, payloads = msg.ids.tolist(), msg.starts.tolist(), msg.payloads()
        seq0 = self.seq
        self.seq += len(ids)
        tie, pending = self._tie, self.pending
        entries = []
        for i, (eid, start, payload) in enumerate(zip(ids, starts, payloads), seq0):
            pending[eid] = [start, payload, i]
            entries.append((start, tie(payload), i, eid))
        if self.heap:
            self.heap.extend(entries)
            heapq.heapify(self.heap)
        else:
            entries.sort()
            self.heap = entries
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        # only a full deletion matters (step sees the start and the payload); a retraction of
        # an event stepped already cannot delete it: its start is behind the CTI
        if msg.new_end == msg.start:
            if self.columnar:
                self.deletes.append((self.seq, msg.id, msg.start))
                return []
            rec = self.pending.get(msg.id)
            if rec is not None and rec[0] == msg.start:
                del self.pending[msg.id]
        return []

    def on_cti(self, time: int, port: int) -> list[Message]:
        if self.columnar:
            stepped = self._step_columns(time)
            if self.dirty and not self.chunks:
                self.dirty = not self._is_initial()
            return stepped + self.emit_cti(time)
        out: list[Message] = []
        heap, pending = self.heap, self.pending
        while heap and heap[0][0] < time:
            entry = heapq.heappop(heap)
            rec = pending.get(entry[3])
            if rec is None or rec[2] != entry[2]:
                continue
            if self.plain_tie or not heap or heap[0][:2] != entry[:2]:
                self._step(entry[0], entry[3], rec, out)
                continue
            # equal starts and equal tie keys: ordered by repr (a user's tie made total),
            # computed only for these
            group = [entry]
            while heap and heap[0][:2] == entry[:2]:
                group.append(heapq.heappop(heap))
            live = [(repr(r[1]), e[2], e[3], r) for e in group
                    if (r := pending.get(e[3])) is not None and r[2] == e[2]]
            live.sort(key=lambda x: x[:2])
            for _, _, eid, r in live:
                self._step(entry[0], eid, r, out)
        if self.dirty and not pending:
            self.dirty = not self._is_initial()
        if len(heap) > 2 * len(pending) + 64:  # drop the entries of deleted events
            self.heap = [e for e in heap if (r := pending.get(e[3])) is not None
                         and r[2] == e[2]]
            heapq.heapify(self.heap)
        out.extend(self.emit_cti(time))
        return out

    # -- checkpoints ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The pending events deep-copied, the user's state pickled: a checkpoint pickles it
        anyway, and ``pickle`` copies a state of many small objects several times faster than
        ``deepcopy`` (Q19's rankings of 60,000 auctions: 0.25 s against 1.9 s, at every
        checkpoint); a state that does not pickle is deep-copied."""
        snap = super().snapshot()
        try:
            snap["state"] = _Pickled(pickle.dumps(self.state, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:  # noqa: BLE001 - e.g. a lambda in the state: deep-copied as before
            snap["state"] = copy.deepcopy(self.state)
        return snap

    def restore(self, state: dict[str, Any]) -> None:
        if "state" not in state:
            raise ValueError(f"not a snapshot of {type(self).__name__} (it lacks ['state']): "
                             f"pass what its snapshot() returned")
        super().restore(state)
        saved = state["state"]
        self.state = (pickle.loads(saved.data) if type(saved) is _Pickled
                      else copy.deepcopy(saved))

    # -- helpers ------------------------------------------------------------------------------
    def _step(self, start: int, eid: Hashable, rec: list[Any], out: list[Message]) -> None:
        """Step the pending event ``eid`` (its record ``rec``) and emit its outputs."""
        del self.pending[eid]
        result = self.step_fn(self.state, rec[1])
        if not isinstance(result, tuple) or len(result) != 2:
            raise TypeError(
                f"scan: {self.udso.udm_name} returned {result!r}; step(state, payload) "
                f"must return a pair (new state, iterable of output payloads)")
        self.state, outputs = result
        try:
            outputs = list(outputs)
        except TypeError:
            raise TypeError(
                f"scan: {self.udso.udm_name} returned the outputs {outputs!r}, which is "
                f"not an iterable; return (state, []) for no output") from None
        origin = self.stepped
        self.stepped += 1
        self.dirty = True
        # (start is a valid time: the input event's; tuple.__new__ skips Insert's checks)
        out.extend(_new(Insert, (FreshId(origin, k), start, start + 1, p))
                   for k, p in enumerate(outputs))

    # -- the columnar form (ColumnScan) -------------------------------------------------------
    def _flush_loose(self) -> None:
        """The single inserts since the last batch as one more pending batch (so that the
        batches stay in arrival order)."""
        if not self.loose:
            return
        seqs, ids, starts, payloads = zip(*self.loose)
        self.loose = []
        oids = np.empty(len(ids), dtype=object)
        oids[:] = ids
        self.chunks.append((Columns(oids, np.array(starts, dtype=np.int64), None,
                                    columns_of(list(payloads), self.udso.udm_name)),
                            np.array(seqs, dtype=np.int64)))

    def _pending_batch(self) -> tuple[Columns, np.ndarray] | None:
        """The pending events as one batch with their arrival numbers, deletions applied
        (None: none pending)."""
        self._flush_loose()
        if not self.chunks:
            self.deletes = []
            return None
        if len(self.chunks) == 1:
            batch, seqs = self.chunks[0]
        else:
            joined = concat([c for c, _ in self.chunks])
            if joined is None:
                raise TypeError(
                    f"scan: {self.udso.udm_name} is a ColumnScan, whose events must share "
                    f"one payload form (all row dicts with the same fields, all tuples of one "
                    f"length, or all scalars); its input mixes them")
            batch, seqs = joined, np.concatenate([s for _, s in self.chunks])
        self.chunks = [(batch, seqs)]
        if self.deletes:
            # a full deletion deletes the latest pending event of its id that came before it
            # (when its start is the deletion's), as on_retract does per event
            where: dict[Hashable, list[tuple[int, int]]] = {}
            for pos, (eid, seq) in enumerate(zip(batch.ids.tolist(), seqs.tolist())):
                where.setdefault(eid, []).append((seq, pos))
            dead = np.zeros(len(batch), dtype=bool)
            starts = batch.starts
            for marker, eid, start in self.deletes:
                before = [pos for seq, pos in where.get(eid, ()) if seq < marker]
                if before and not dead[before[-1]] and starts[before[-1]] == start:
                    dead[before[-1]] = True
            self.deletes = []
            if dead.any():
                keep = ~dead
                batch, seqs = batch.take(keep), seqs[keep]
                self.chunks = [(batch, seqs)] if len(batch) else []
        return (batch, seqs) if len(batch) else None

    def _step_columns(self, time: int) -> list[Message]:
        """``Cti(time)``: the pending events that start before ``time``, in step order,
        given to ``step_columns`` at once; its outputs as one column batch of points."""
        pending = self._pending_batch()
        if pending is None:
            return []
        batch, seqs = pending
        order = self._order(batch, seqs)
        starts = batch.starts[order]
        k = int(np.searchsorted(starts, time, side="left"))
        if k == 0:
            return []
        rest = np.sort(order[k:])
        self.chunks = [(batch.take(rest), seqs[rest])] if len(rest) else []
        released = batch.take(order[:k])
        udso: Any = self.udso
        result = udso.step_columns(self.state, released)
        if not isinstance(result, tuple) or len(result) != 3:
            raise TypeError(
                f"scan: {udso.udm_name}.step_columns returned {result!r}; it must return "
                f"(new state, rows, output columns)")
        self.state, rows, payload = result
        self.stepped += k
        self.dirty = True
        rows = _checked_rows(rows, payload, k, udso.udm_name)
        m = len(rows)
        if m == 0:
            return []
        # output ids: the outputs counted (ints; this form never mints a FreshId)
        first = self.emitted
        self.emitted += m
        return [Columns(np.arange(first, first + m, dtype=np.int64),  # type: ignore[list-item]
                        released.starts[rows], None, payload)]

    def _order(self, batch: Columns, seqs: np.ndarray) -> np.ndarray:
        """The step order of a batch's events: by start, then tie key, then (equal user keys)
        ``repr`` of the payload, then arrival: column-wise where the tie keys are columns
        numpy orders as Python does (ints, floats without NaN, strings)."""
        n = len(batch)
        starts = batch.starts
        codes = None if self.plain_tie else _sort_codes(apply_columns(self.tie_fn, batch),
                                                        starts)
        if codes is None:
            keys = ([repr(p) for p in batch.payloads()] if self.plain_tie else
                    [self.tie_fn(p) for p in batch.payloads()])
            at, arrived = starts.tolist(), seqs.tolist()
            ranked = sorted(range(n), key=lambda i: (at[i], keys[i], arrived[i]))
            order = np.array(ranked, dtype=np.int64)
            if self.plain_tie or n < 2:
                return order
            same = np.array([keys[a] == keys[b] for a, b in itertools.pairwise(ranked)],
                            dtype=bool)
        else:
            order = np.lexsort((seqs, *reversed(codes), starts))
            if n < 2:
                return order
            same = np.ones(n - 1, dtype=bool)
            for c in codes:
                c = c[order]
                same &= c[1:] == c[:-1]
        s = starts[order]
        same &= s[1:] == s[:-1]
        if same.any():  # equal starts and tie keys: by repr, then arrival
            runs = np.flatnonzero(np.diff(np.r_[False, same, False].astype(np.int8)))
            order = order.copy()
            for a, b in zip(runs[::2].tolist(), runs[1::2].tolist()):
                group = order[a:b + 1].tolist()
                group.sort(key=lambda i: (repr(batch.payload_at(i)), seqs[i]))
                order[a:b + 1] = group
        return order

    def _tie(self, payload: Any) -> Any:
        """The heap's tie key: the user's (or repr, the default); equal user keys are
        ordered by repr when they surface (:meth:`on_cti`), not here for every event."""
        return self.tie_fn(payload)

    def _is_initial(self) -> bool:
        try:
            return bool(self.state == self.udso.initial())
        except Exception:  # noqa: BLE001 - a state that cannot be compared counts as changed
            return False

    def state_size(self) -> int:
        """Pending events, plus one while the user's state differs from the initial one: a
        ``group_apply`` drops a key whose sub-query holds no state, and a fresh scan starts
        from ``initial``, so a changed state must keep its key."""
        pending = len(self.pending) + len(self.loose) + sum(len(c) for c, _ in self.chunks)
        return pending + (1 if self.dirty else 0)

    def _check(self) -> None:
        for chunk, seqs in self.chunks:
            assert len(chunk) == len(seqs), "a pending batch and its arrival numbers differ"
            assert not len(chunk) or chunk.starts.min() >= self.in_cti, \
                "a pending batch starts behind the CTI"
        live = {(e[3], e[2]) for e in self.heap}
        for eid, (start, _, seq) in self.pending.items():
            assert (eid, seq) in live, f"pending event {eid!r} is not in the heap"
            assert start >= self.in_cti, f"pending event {eid!r} starts behind the CTI"


class _Pickled:
    """A scan's user state in a snapshot, as pickled bytes (:meth:`Scan.snapshot`)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Pickled, (self.data,))

    def __deepcopy__(self, memo: dict[int, Any]) -> _Pickled:
        return self  # (immutable)


class ColumnScan(StreamOperator):
    """A stream operator stepped a batch at a time: :meth:`step_columns` gets the events a CTI
    made final as one :class:`~operators.columns.Columns` in step order (by start, then
    :meth:`tie`, then ``repr``, exactly the order ``step`` would see them in) and returns
    ``(new state, rows, output columns)``: ``rows`` (non-decreasing int array) names for each
    output row the batch row whose output it is; the outputs are points at those rows' starts.
    Its CHT is the per-event scan's whose ``step`` outputs, for each event, its rows of the
    output columns in order. The batches' sizes depend on the CTIs, so the state after a batch
    must not depend on where the batches were cut."""

    def step_columns(self, state: Any, batch: Columns) -> tuple[Any, np.ndarray, Any]:
        """``(new state, rows, output payload columns)`` after the events of ``batch``."""
        raise NotImplementedError


class _FunctionScan(StreamOperator):
    """The function form ``scan(step, initial, tie)`` as a :class:`StreamOperator`."""

    def __init__(self, step: Callable[[Any, Any], tuple[Any, Iterable[Any]]], initial: Any,
                 tie: Callable[[Any], Any] | None) -> None:
        self.fn, self.initial_value = step, initial
        if tie is not None:
            self.tie = tie  # type: ignore[method-assign, assignment]

    def initial(self) -> Any:
        return copy.deepcopy(self.initial_value)

    def step(self, state: Any, payload: Any) -> tuple[Any, Iterable[Any]]:
        return self.fn(state, payload)

    @property
    def udm_name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


def as_stream_operator(step: Any, initial: Any = None,
                       tie: Callable[[Any], Any] | None = None) -> StreamOperator:
    """What ``Stream.scan`` was given, as a :class:`StreamOperator`: a StreamOperator (class,
    instance or registered name) or a function ``step(state, payload) -> (state, outputs)``
    with its ``initial`` state. Fails with the argument's name when it is neither."""
    if tie is not None and not callable(tie):
        raise TypeError(f"scan: tie={tie!r} is not callable; give a function of the payload "
                        f"that orders events with equal starts (default repr)")
    if isinstance(step, str) or (isinstance(step, type) and issubclass(step, StreamOperator)):
        step = resolve(step)
    if isinstance(step, UDM) and not isinstance(step, StreamOperator):
        raise TypeError(f"scan: step={step.udm_name} is a {type(step).__bases__[0].__name__}, "
                        f"not a StreamOperator; windows run aggregates and operators "
                        f"(.tumbling_window(...).aggregate(...)), scan runs a StreamOperator")
    if isinstance(step, StreamOperator):
        if initial is not None:
            raise ValueError(f"scan: initial={initial!r} is given with the stream operator "
                             f"{step.udm_name}, which makes its own state with initial()")
        if tie is not None:
            udso = copy.copy(step)
            udso.tie = tie  # type: ignore[method-assign, assignment]
            return udso
        return step
    if isinstance(step, type) or not callable(step):
        raise TypeError(f"scan: step={step!r} is not callable; give a function "
                        f"step(state, payload) -> (new state, output payloads), a "
                        f"StreamOperator or the name it is registered under")
    return _FunctionScan(step, initial, tie)


def columns_of(payloads: list[Any], name: str) -> Any:
    """Payloads as payload columns (:func:`~operators.columns.rows_as_columns`): a dict of
    arrays for row dicts with the same fields, a tuple of arrays for tuples of one length,
    else one array; a ColumnScan's input may not mix those forms."""
    cols = rows_as_columns(payloads)
    if not isinstance(cols, (dict, tuple)) and any(type(p) in (dict, tuple) for p in payloads):
        raise TypeError(f"scan: {name} is a ColumnScan, whose events must share one payload "
                        f"form (row dicts with the same fields, tuples of one length, or "
                        f"scalars); its input mixes them")
    return cols


def _sort_codes(keys: Any, starts: np.ndarray) -> list[np.ndarray] | None:
    """Tie keys computed column-wise (an array or a tuple of arrays) as arrays numpy sorts as
    Python compares them: ints and bools as they are, floats without NaN, strings by their
    rank; None when a column holds anything else (the caller then compares in Python). A
    column after the ones that order every equal start already is left out (the tuples'
    order is decided before it)."""
    n = len(starts)
    if isinstance(keys, np.ndarray):
        keys = (keys,)
    if not isinstance(keys, tuple) or not keys:
        return None
    if any(not isinstance(c, np.ndarray) or c.shape != (n,) for c in keys):
        return None
    codes: list[np.ndarray] = []
    if n < 2:
        return codes
    for c in keys:
        order = np.lexsort((*reversed(codes), starts))
        same = starts[order][1:] == starts[order][:-1]
        for d in codes:
            same &= d[order][1:] == d[order][:-1]
        if not same.any():
            return codes
        if c.dtype.kind in "biu" or (c.dtype.kind == "f" and not np.isnan(c).any()):
            codes.append(c)
        elif c.dtype.kind == "O" and set(map(type, c.tolist())) <= {str}:
            codes.append(np.unique(c, return_inverse=True)[1].reshape(n))
        else:
            return None
    return codes


def _checked_rows(rows: Any, payload: Any, k: int, name: str) -> np.ndarray:
    """``rows`` of a ``step_columns`` result as an int64 array, checked against its batch of
    ``k`` events and its output columns."""
    rows = np.asarray(rows)
    if rows.ndim != 1 or (len(rows) and rows.dtype.kind not in "iu"):
        raise TypeError(f"scan: {name}.step_columns returned rows {rows!r}; give a 1-d int "
                        f"array, for each output row the batch row it belongs to")
    rows = rows.astype(np.int64, copy=False)
    if len(rows) and (rows[0] < 0 or rows[-1] >= k or (np.diff(rows) < 0).any()):
        raise ValueError(f"scan: {name}.step_columns returned rows that are not "
                         f"non-decreasing batch rows in 0..{k - 1}")
    parts = (payload.values() if isinstance(payload, dict) else
             payload if isinstance(payload, tuple) else (payload,))
    for c in parts:
        if not isinstance(c, np.ndarray) or c.shape[:1] != rows.shape:
            raise TypeError(f"scan: {name}.step_columns returned output columns that are not "
                            f"arrays of {len(rows)} rows (one per entry of rows)")
    return rows
