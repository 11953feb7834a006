"""``group_apply(key, count_window(1, by="end") → aggregate)`` for all keys at once: the
planner's fast path for "per key, the aggregate of the events ending at each time" (Nexmark's
winning bid of an auction at its close: Q4, Q6, Q9), equal in CHT to the general
:class:`~operators.group_apply.GroupApply` of a
:class:`~operators.windows.count.CountWindowOperator`.

With ``n = 1`` and ``by="end"`` the count windows of a key are one window per distinct end
time ``t``, ``[t, t + 1)``, holding exactly the key's events that end at ``t``; its result is
the point ``[t, t + 1)``. So the operator keeps, per ``(key, end)``, the members (id → start,
payload), the incremental UDM state and the output sent; no sub-query per key, no event
index of distinct times. An insert joins the window of its end; a retraction leaves the window
of its old end and, unless full, joins the one of its new end. An edge event (end ∞) belongs
to no window until a retraction closes it (as on the general path, it is not stored: the
closing retraction carries its start and payload). As on the general path, every window a
batch touched is corrected once, at the end of the batch and before each CTI: the result sent
before is retracted and the new one inserted under a fresh id (nothing when it is the same);
a window left empty retracts its result::

    time      3        5        8               key = p[0], Max of p[1]
    input     a [1 ─ 5) 4,  a [2 ─ 5) 7,  b [0 ─ 8) 1,  CTI 6
    output    ('a', 7) @ [5, 6)   ('b', 1) @ [8, 9)        then CTI 6

    >>> from operators.aggregates import Max
    >>> from operators.events import Insert, Cti
    >>> op = KeyedEndAggregate(lambda p: p[0], Max(lambda p: p[1]), name="ends")
    >>> op.process([Insert(1, 1, 5, ("a", 4)), Insert(2, 2, 5, ("a", 7)),
    ...             Insert(3, 0, 8, ("b", 1)), Cti(6)])  # doctest: +NORMALIZE_WHITESPACE
    [Insert(id=FreshId('ends', 0), start=5, end=6, payload=('a', 7)),
     Insert(id=FreshId('ends', 1), start=8, end=9, payload=('b', 1)), Cti(time=6)]

With ``emit="final"`` each window's row is sent once, when a CTI passes its end (the
windows no CTI closed, at :meth:`~KeyedEndAggregate.finish`), and never retracted: the same
CHT. (The general count window sends speculative rows whatever ``emit`` says.)

**CTIs.** After ``Cti(c)`` no event can end before ``c`` any more (an insert starts at or
after ``c``; a retraction's old and new ends are at or after ``c``): the windows ending before
``c`` are final and freed, and every later output lies at ``c`` or later, so the output CTI is
``c`` (the general path's, for ``n = 1``).

Only incremental, time-insensitive aggregates that raise on failure qualify
(:func:`supports`): what they see does not depend on clipping (a member's clipped lifetime
in its by-end window is empty anyway) nor on the order of the members.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..columns import Columns, apply_columns
from ..errors import DeadLetter
from ..events import MAX_TIME, Insert, Message, Retract
from ..group_apply import group_key
from ..processor import Processor
from ..udm import IncrementalAggregate, Window, field_getter, resolve
from .count import _same
from .evaluate import Ids, WindowUdm
from .spec import DEFAULT_POLICY, CountWindow, WindowPolicy

__all__ = ["KeyedEndAggregate", "supports"]

#: the one count window this operator computes
SPEC = CountWindow(1, "end")

# a window's record: [members {id: (start, payload)}, state, outputs [(id, payload)],
#                     joined this batch {id: payload}, left this batch [payload]]
W_MEMBERS, W_STATE, W_OUTPUTS, W_JOINED, W_LEFT = range(5)


def supports(spec: Any, udm: Any, kind: str, on_error: str) -> bool:
    """Whether :class:`KeyedEndAggregate` computes ``count_window(spec).aggregate(udm)`` per
    key: ``count_window(1, by="end")``, an incremental time-insensitive aggregate, failing
    loudly."""
    try:
        resolved = resolve(udm)
    except Exception:  # noqa: BLE001 (the general path reports a bad UDM)
        return False
    return (isinstance(spec, CountWindow) and spec.n == 1 and spec.by == "end"
            and kind == "aggregate" and on_error == "raise"
            and isinstance(resolved, IncrementalAggregate)
            and not getattr(resolved, "time_sensitive", False))


class KeyedEndAggregate(Processor):
    """``udm`` over the events of each key ending at each time (``count_window(1,
    by="end")`` under ``group_apply(key, ...)``), all keys in one operator; output payloads
    ``(key, result)``, points ``[end, end + 1)``.

    Cost per insert or retraction: O(1) dict work; per window touched by a batch, one ``add``
    (and ``remove``) of its batch's changes and one result."""

    _state_fields = ("windows", "ends", "ids", "dead_letters")

    def __init__(self, key: Callable[[Any], Hashable] | str, udm: Any, *,
                 policy: WindowPolicy = DEFAULT_POLICY, name: str | None = None) -> None:
        super().__init__(name or "keyed count_window(1, by='end')")
        self.key = field_getter(key)
        self.policy = policy.for_window(SPEC)
        #: emit="final": each window's row once, when a CTI passes its end (or at finish)
        self.final = self.policy.final
        self.call = WindowUdm(udm, "aggregate", self.policy, "raise")
        self.udm = self.call.udm
        if not supports(SPEC, self.udm, "aggregate", "raise"):
            raise TypeError(f"KeyedEndAggregate needs an incremental, time-insensitive "
                            f"aggregate, got {udm!r}; use group_apply with count_window")
        #: (key, end) -> the window's record (W_*)
        self.windows: dict[tuple[Hashable, int], list[Any]] = {}
        #: a heap of (end, key) of the windows held, freed once a CTI passes the end
        self.ends: list[tuple[int, Any]] = []
        self.ids = Ids(self.name)
        #: no window fails (on_error="raise"); kept for the runtime, as every window has it
        self.dead_letters: list[DeadLetter] = []
        #: the windows touched in this batch, in order of first touch
        self._dirty: dict[tuple[Hashable, int], None] = {}

    # -- messages ---------------------------------------------------------------------------
    def _window(self, wk: tuple[Hashable, int]) -> list[Any]:
        rec = self.windows.get(wk)
        if rec is None:
            rec = self.windows[wk] = [{}, None, [], {}, []]
            heapq.heappush(self.ends, (wk[1], _Key(wk[0])))
        self._dirty[wk] = None
        return rec

    def _join(self, key: Hashable, eid: Hashable, start: int, end: int, payload: Any) -> None:
        try:
            rec = self._window((key, end))
        except TypeError:
            raise TypeError(f"the key function returned the unhashable {key!r}; return a "
                            f"hashable value (a tuple rather than a list, ...)") from None
        members = rec[W_MEMBERS]
        if eid in members:
            raise ValueError(f"duplicate id {eid!r}: it is still live; ids must be unique "
                             f"within a stream")
        members[eid] = (start, payload)
        rec[W_JOINED][eid] = payload

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        if msg.end != MAX_TIME:  # an edge event joins its window when a retraction closes it
            self._join(group_key(self.key(msg.payload)), msg.id, msg.start, msg.end,
                       msg.payload)
        return []

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        """A batch of inserts: the key runs once on the columns when it gives integers (which
        are their own group keys), and no ``Insert`` is built per event; else event by
        event."""
        n = len(msg)
        keys = apply_columns(self.key, msg) if n else None
        if not (isinstance(keys, np.ndarray) and keys.shape == (n,) and keys.dtype.kind in "iu"):
            return super().on_columns(msg, port) if n else []
        join = self._join
        for key, eid, start, end, payload in zip(keys.tolist(), msg.ids.tolist(),
                                                 msg.starts.tolist(), msg.ends.tolist(),
                                                 msg.payloads()):
            if end != MAX_TIME:
                join(key, eid, start, end, payload)
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        key = group_key(self.key(msg.payload))
        payload = msg.payload
        if msg.end != MAX_TIME:
            rec = self.windows.get((key, msg.end))
            held = None if rec is None else rec[W_MEMBERS].get(msg.id)
            if held is None or held[0] != msg.start:
                raise ValueError(f"retraction {msg!r} does not match an event held by the "
                                 f"operator (no such live event with this lifetime and key); "
                                 f"retract a live event with its current lifetime")
            assert rec is not None
            del rec[W_MEMBERS][msg.id]
            payload = held[1]
            self._dirty[(key, msg.end)] = None
            if msg.id in rec[W_JOINED]:  # joined in this batch: it never reached the state
                del rec[W_JOINED][msg.id]
            else:
                rec[W_LEFT].append(payload)
        if msg.new_end != msg.start and msg.new_end != MAX_TIME:
            self._join(key, msg.id, msg.start, msg.new_end, payload)
        return []

    def end_batch(self) -> list[Message]:
        return self._flush() if self._dirty else []

    def on_cti(self, time: int, port: int) -> list[Message]:
        out = self._flush() if self._dirty else []
        ends, windows = self.ends, self.windows
        while ends and ends[0][0] < time:
            end, key = heapq.heappop(ends)
            rec = windows.pop((key.key, end), None)
            if rec is not None and self.final:
                out.extend(self._rows(key.key, end, rec))
        return out + self.emit_cti(time)

    def finish(self) -> list[Message]:
        """End of input: with ``emit="final"``, the windows no CTI has closed, as they
        stand (speculative rows are up to date already)."""
        if not self.final:
            return []
        out: list[Message] = []
        for end, key in sorted(self.ends, key=lambda e: e[0]):
            rec = self.windows.pop((key.key, end), None)
            if rec is not None:
                out.extend(self._rows(key.key, end, rec))
        self.ends = []
        return out

    def _payloads(self, end: int, state: Any) -> list[Any]:
        """The output payloads of a window's state."""
        call = self.call
        results = call.result(state, Window(end, end + 1))
        return [p for _, _, p in call.output.rows(end, end + 1, results, call.stamped)]

    def _rows(self, key: Hashable, end: int, rec: list[Any]) -> list[Message]:
        """A final window's rows (``emit="final"``)."""
        mint = self.ids.mint
        return [Insert(mint(), end, end + 1, (key, p)) for p in self._payloads(end, rec[W_STATE])]

    def _flush(self) -> list[Message]:
        """Correct the output of every window the batch touched."""
        dirty, self._dirty = self._dirty, {}
        windows, call, udm, ids = self.windows, self.call, self.udm, self.ids
        out: list[Message] = []
        for wk in dirty:
            rec = windows[wk]
            key, end = wk
            old = rec[W_OUTPUTS]
            if not rec[W_MEMBERS]:  # empty: no window here any more
                del windows[wk]  # (its heap entry is skipped when a CTI passes it)
                out.extend(Retract(oid, end, end + 1, end, (key, p)) for oid, p in old)
                continue
            joined, left = rec[W_JOINED], rec[W_LEFT]
            state = rec[W_STATE]
            if state is None:
                state = call.initial([])
            if left:
                state = udm.remove(state, left)  # type: ignore[attr-defined]
            if joined:
                state = udm.add(state, list(joined.values()))  # type: ignore[attr-defined]
            rec[W_STATE] = state
            rec[W_JOINED], rec[W_LEFT] = {}, []
            if self.final:  # sent when a CTI passes the end
                continue
            payloads = self._payloads(end, state)
            if old and _same([p for _, p in old], payloads):
                continue
            out.extend(Retract(oid, end, end + 1, end, (key, p)) for oid, p in old)
            outputs = []
            for p in payloads:
                oid = ids.mint()
                outputs.append((oid, p))
                out.append(Insert(oid, end, end + 1, (key, p)))
            rec[W_OUTPUTS] = outputs
        return out

    # -- introspection -----------------------------------------------------------------------
    def key_functions(self) -> tuple[Callable[[Any], Any], ...]:
        return (self.key,)

    def keyed_output(self) -> bool:
        return True

    def state_size(self) -> int:
        """Events held plus windows held."""
        return sum(len(r[W_MEMBERS]) for r in self.windows.values()) + len(self.windows)

    def _check(self) -> None:
        assert not self._dirty, "windows left unflushed after a batch"
        for (key, end), rec in self.windows.items():
            assert rec[W_MEMBERS], f"an empty window of {key!r} at {end} is held"
            assert not rec[W_JOINED] and not rec[W_LEFT], "changes left unapplied"


class _Key:
    """A key in the heap of ends: windows ending at the same time are never compared by key
    (keys of different types need not be ordered)."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: _Key) -> bool:
        return False
