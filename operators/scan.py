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
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .columns import Columns
from .events import FreshId, Insert, Message, Retract
from .processor import Processor
from .udm import UDM, StreamOperator, resolve

_new = tuple.__new__


class Scan(Processor):
    """Steps a user state through the events in start order, once each is final; emits the
    outputs as points at the event's start. See the module docstring."""

    _state_fields = ("state", "pending", "heap", "seq", "stepped", "dirty")

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

    # -- messages -----------------------------------------------------------------------------
    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        eid, start, _, payload = msg
        seq = self.seq
        self.seq += 1
        self.pending[eid] = [start, payload, seq]
        heapq.heappush(self.heap, (start, self._tie(payload), seq, eid))
        return []

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """A batch of inserts: :meth:`on_insert`'s records and heap entries for all of them
        at once (no ``Insert`` per event; a batch sorted by start, into an empty heap, is a
        heap as it is)."""
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
            rec = self.pending.get(msg.id)
            if rec is not None and rec[0] == msg.start:
                del self.pending[msg.id]
        return []

    def on_cti(self, time: int, port: int) -> list[Message]:
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
        return len(self.pending) + (1 if self.dirty else 0)

    def _check(self) -> None:
        live = {(e[3], e[2]) for e in self.heap}
        for eid, (start, _, seq) in self.pending.items():
            assert (eid, seq) in live, f"pending event {eid!r} is not in the heap"
            assert start >= self.in_cti, f"pending event {eid!r} starts behind the CTI"


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
