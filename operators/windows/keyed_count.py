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

**Column batches (``emit="final"``, Min or Max).** While only
:class:`~operators.columns.Columns` batches of inserts have arrived whose key and field both
run on the columns (:mod:`operators.expr`: an integer key column; the field a column or a
tuple of columns), the events are held as those arrays (:class:`ColumnBuffer`), not one
member per event, and a CTI computes every window it closes at once: the closed rows sorted
by ``(end, key, field)`` (``numpy.lexsort`` over the field's leading number columns: the
*prefix*, up to the first column that is not bool, int or NaN-free float), and per window
the rows whose prefix is the extreme one are its candidates. A window with one candidate
outputs that row's field value (a value ahead on the prefix is ahead as a Python tuple too:
Nexmark Q9's ``(price, -time, id, ...)`` needs no Python comparison of its strings); a window
with several (a tie on the prefix, ``0.0`` beside ``-0.0``, or no prefix at all) runs the UDM
itself over its candidates, so that Min's and Max's rule among equal values decides, as on
the per-event path. The first message that is not such a batch (a single insert, a
retraction, a batch whose key or field runs per event or whose columns change dtype) turns
the held rows into the per-event windows, as if each had arrived alone.

Only incremental, time-insensitive aggregates that raise on failure qualify
(:func:`supports`): what they see does not depend on clipping (a member's clipped lifetime
in its by-end window is empty anyway) nor on the order of the members.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..aggregates import Max, Min
from ..columns import Columns, apply_columns, map_columns, payload_list
from ..errors import DeadLetter
from ..events import MAX_TIME, FreshId, Insert, Message, Retract
from ..expr import evaluate, trace
from ..group_apply import group_key
from ..key_groups import ByKey
from ..payloads import equal
from ..processor import Processor
from ..two_input_columns import concat_payload
from ..udm import IncrementalAggregate, Window, field_getter, resolve
from .evaluate import Ids, WindowUdm
from .spec import DEFAULT_POLICY, CountWindow, PolicyArg

__all__ = ["KeyedEndAggregate", "supports"]

_new = tuple.__new__

#: the one count window this operator computes
SPEC = CountWindow(1, "end")

# a window's record: [members {id: (start, payload)}, state, outputs [(id, payload)],
#                     joined this batch {id: payload}, left this batch [payload]]
W_MEMBERS, W_STATE, W_OUTPUTS, W_JOINED, W_LEFT = range(5)


def supports(spec: Any, udm: Any, kind: str, policy: PolicyArg, on_error: str) -> bool:
    """Whether :class:`KeyedEndAggregate` computes ``count_window(spec).aggregate(udm)`` per
    key: ``count_window(1, by="end")``, an incremental time-insensitive aggregate, failing
    loudly, under any ``policy`` (the operator applies it). The signature of every keyed
    ``supports`` (:mod:`topology.planning.rules`)."""
    try:
        resolved = resolve(udm)
    except Exception:  # noqa: BLE001 (the general path reports a bad UDM)
        return False
    return (isinstance(spec, CountWindow) and spec.n == 1 and spec.by == "end"
            and kind == "aggregate" and on_error == "raise"
            and isinstance(resolved, IncrementalAggregate)
            and not getattr(resolved, "time_sensitive", False))


class KeyedEndAggregate(ByKey, Processor):
    """``udm`` over the events of each key ending at each time (``count_window(1,
    by="end")`` under ``group_apply(key, ...)``), all keys in one operator; output payloads
    ``(key, result)``, points ``[end, end + 1)``.

    Cost per insert or retraction: O(1) dict work; per window touched by a batch, one ``add``
    (and ``remove``) of its batch's changes and one result."""

    _state_fields = ("windows", "ends", "ids", "dead_letters", "columns")

    def __init__(self, key: Callable[[Any], Hashable] | str, udm: Any, *,
                 policy: PolicyArg = DEFAULT_POLICY, name: str | None = None) -> None:
        super().__init__(name or "keyed count_window(1, by='end')")
        self.key = field_getter(key)
        self.policy = policy.resolve(SPEC)
        #: emit="final": each window's row once, when a CTI passes its end (or at finish)
        self.final = self.policy.final
        self.call = WindowUdm(udm, "aggregate", self.policy, "raise")
        self.udm = self.call.udm
        if not supports(SPEC, self.udm, "aggregate", self.policy, "raise"):
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
        #: the rows held column-wise while only column batches have arrived (emit="final",
        #: Min or Max: see the module doc); None: per event
        self.columns: ColumnBuffer | None = (
            ColumnBuffer() if self.final and type(self.udm) in (Max, Min) else None)
        self._field = trace(self.udm._get) if self.columns is not None else None  # type: ignore[attr-defined]

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
        if self.columns is not None:
            self._leave_columns()
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
            if n and self.columns is not None:
                self._leave_columns()
            return super().on_columns(msg, port) if n else []
        if self.columns is not None:
            if self._hold(msg, keys):
                return []
            self._leave_columns()
        join = self._join
        for key, eid, start, end, payload in zip(keys.tolist(), msg.ids.tolist(),
                                                 msg.starts.tolist(), msg.ends.tolist(),
                                                 msg.payloads()):
            if end != MAX_TIME:
                join(key, eid, start, end, payload)
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        if self.columns is not None:
            self._leave_columns()
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
        if self.columns is not None:
            rows = self._close_columns(time)
            if rows is not None:
                return rows + self.emit_cti(time)
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
        if self.columns is not None:
            rows = self._close_columns(MAX_TIME)
            if rows is not None:
                return rows
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
            if old and equal([p for _, p in old], payloads):
                continue
            out.extend(Retract(oid, end, end + 1, end, (key, p)) for oid, p in old)
            outputs = []
            for p in payloads:
                oid = ids.mint()
                outputs.append((oid, p))
                out.append(Insert(oid, end, end + 1, (key, p)))
            rec[W_OUTPUTS] = outputs
        return out

    # -- column batches ----------------------------------------------------------------------
    def _hold(self, msg: Columns, keys: np.ndarray) -> bool:
        """Hold a batch of inserts column-wise; False (nothing held) when its field does not
        run on the columns."""
        n = len(msg)
        got = evaluate(self._field, msg.payload, n)
        values = got if type(got) is tuple else (got,)
        if not values or not all(isinstance(c, np.ndarray) and c.shape == (n,) for c in values):
            return False
        ends = msg.ends.astype(np.int64)
        live = ends != MAX_TIME  # an edge event belongs to no window (it is not stored)
        index: Any = slice(None) if live.all() else np.flatnonzero(live)
        assert self.columns is not None
        self.columns.add(keys[index], ends[index], msg.starts.astype(np.int64)[index],
                         msg.ids[index], map_columns(msg.payload, lambda c: c[index]),
                         tuple(c[index] for c in values), type(got) is tuple)
        return True

    def _leave_columns(self) -> None:
        """Turn the held rows into the per-event windows, as if each had arrived alone."""
        buffer, self.columns = self.columns, None
        assert buffer is not None
        join = self._join
        for chunk in buffer.chunks:
            keys, ends, starts, ids, payload = chunk[:5]
            for key, eid, start, end, p in zip(keys.tolist(), ids.tolist(), starts.tolist(),
                                               ends.tolist(), payload_list(payload)):
                join(key, eid, start, end, p)

    def _close_columns(self, time: int) -> list[Message] | None:
        """The rows of the windows ending before ``time`` (final: a CTI passed them),
        computed at once and freed; None (nothing changed) when the held columns cannot be
        put together, and the operator has gone per event."""
        assert self.columns is not None
        closed = self.columns.take_before(time)
        if closed is None:
            self._leave_columns()
            return None
        if not len(closed[0]):
            return []
        keys, ends, _, ids, payload, values, is_tuple = closed
        prefix = []
        for c in values:
            if c.dtype.kind in "biu" or (c.dtype.kind == "f" and not np.isnan(c).any()):
                prefix.append(c)
            else:
                break
        m = len(keys)
        order = np.lexsort((*reversed(prefix), keys, ends))
        keys, ends = keys[order], ends[order]
        new_group = np.ones(m, dtype=bool)
        new_group[1:] = (keys[1:] != keys[:-1]) | (ends[1:] != ends[:-1])
        new_run = new_group.copy()
        for c in prefix:
            c = c[order]
            new_run[1:] |= c[1:] != c[:-1]
        if not _increasing(ids):  # (a join's pair ids: no two alike, no check)
            _check_unique_ids(ids[order], new_group)
        group_starts = np.flatnonzero(new_group)
        run_starts = np.flatnonzero(new_run)
        run_ends = np.append(run_starts[1:], m)
        run_of = np.cumsum(new_run) - 1
        if type(self.udm) is Max:  # the last run of each group
            extreme = run_of[np.append(group_starts[1:], m) - 1]
        else:  # Min: the first
            extreme = run_of[group_starts]
        lo, hi = run_starts[extreme], run_ends[extreme]
        w_keys, w_ends = keys[group_starts].tolist(), ends[group_starts].tolist()
        rep = order[lo]  # a candidate of each window: the extreme when it is the only one
        results = (list(zip(*(c[rep].tolist() for c in values))) if is_tuple
                   else values[0][rep].tolist())
        for g in np.flatnonzero(hi - lo > 1).tolist():  # a tie on the prefix: the UDM's rule
            rows = self._payloads(w_ends[g], self.call.initial(
                payload_list(_rows_of(payload, order[lo[g]:hi[g]]))))
            assert len(rows) == 1, "an aggregate has one row per window"
            results[g] = rows[0]
        ids = self.ids
        first = ids.next_id
        ids.next_id = first + len(results)
        name = ids.name
        return [_new(Insert, (FreshId(name, first + j), end, end + 1, (key, value)))
                for j, (key, end, value) in enumerate(zip(w_keys, w_ends, results))]

    # -- introspection -----------------------------------------------------------------------
    def key_functions(self) -> tuple[Callable[[Any], Any], ...]:
        return (self.key,)

    def keyed_output(self) -> bool:
        return True

    def state_size(self) -> int:
        """Events held plus windows held (held column-wise: the rows held plus their
        distinct ``(key, end)`` windows)."""
        if self.columns is not None:
            return self.columns.size()
        return sum(len(r[W_MEMBERS]) for r in self.windows.values()) + len(self.windows)

    def keep_state(self, keep: Callable[[Hashable], bool]) -> None:
        """Keep only the windows (or the rows held column-wise) of the keys ``keep`` keeps
        (rescaling: :mod:`operators.key_groups`; each row sent keeps its whole id)."""
        self.windows = {wk: rec for wk, rec in self.windows.items() if keep(wk[0])}
        self.ends = [e for e in self.ends if keep(e[1].key)]
        heapq.heapify(self.ends)
        if self.columns is not None:
            self.columns.keep_keys(keep)

    def add_state(self, other: KeyedEndAggregate) -> None:
        """Take in ``other``'s windows (of keys this one has none of): its held columns
        beside these while both hold columns, else both as per-event windows."""
        if self.columns is not None and other.columns is not None:
            self.columns.chunks.extend(other.columns.chunks)
            return
        for op in (self, other):
            if op.columns is not None:
                op._leave_columns()
                rows = op._flush()
                assert not rows, "a window held column-wise sent rows (it is emit='final')"
        self.windows.update(other.windows)
        self.ends.extend(other.ends)
        heapq.heapify(self.ends)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        # a NaN key read back from a checkpoint is another NaN object: make it NAN_KEY again,
        # in the windows and in the heap of ends (which pops windows by its key)
        self.windows = {(group_key(k), end): rec for (k, end), rec in self.windows.items()}
        for _, key in self.ends:
            key.key = group_key(key.key)

    def _check(self) -> None:
        if self.columns is not None:
            assert not self.windows and not self.ends, "per-event windows beside held columns"
            self.columns.check(self.in_cti)
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


def _increasing(ids: np.ndarray) -> bool:
    """Whether ``ids`` are numbers that increase, so that no two are alike."""
    return ids.dtype.kind in "iu" and bool((ids[1:] > ids[:-1]).all())


def _check_unique_ids(ids: np.ndarray, new_group: np.ndarray) -> None:
    """Raise, as the per-event path does, when one window (a run of ``new_group``) holds
    two events of one id."""
    group = np.cumsum(new_group)
    if ids.dtype.kind in "iu":
        order = np.lexsort((ids, group))
        g, i = group[order], ids[order]
        dup = np.flatnonzero((g[1:] == g[:-1]) & (i[1:] == i[:-1]))
        if len(dup):
            _duplicate(i[dup[0]].item())
        return
    seen: set[tuple[Any, Any]] = set()
    for w in zip(group.tolist(), ids.tolist()):
        if w in seen:
            _duplicate(w[1])
        seen.add(w)


def _duplicate(eid: Any) -> None:
    raise ValueError(f"duplicate id {eid!r}: it is still live; ids must be unique within a "
                     f"stream")


class ColumnBuffer:
    """The rows of a :class:`KeyedEndAggregate` held column-wise (see the module doc): chunks
    of ``[keys, ends, starts, ids, payload columns, field columns, field is a tuple, the
    least end]``, as the batches came."""

    __slots__ = ("chunks",)

    def __init__(self) -> None:
        self.chunks: list[list[Any]] = []

    def add(self, keys: np.ndarray, ends: np.ndarray, starts: np.ndarray, ids: np.ndarray,
            payload: Any, values: tuple[np.ndarray, ...], is_tuple: bool) -> None:
        if len(keys):
            self.chunks.append([keys, ends, starts, ids, payload, values, is_tuple,
                                int(ends.min())])

    def take_before(self, time: int) -> tuple[Any, ...] | None:
        """Remove and return the rows ending before ``time``, all chunks' together
        ``(keys, ends, starts, ids, payload, values, is_tuple)``; None (nothing removed)
        when the chunks' columns differ in form or dtype (they cannot be put together
        exactly)."""
        parts, keep = [], []
        for chunk in self.chunks:
            if chunk[7] >= time:
                keep.append(chunk)
                continue
            closed = chunk[1] < time
            if closed.all():
                parts.append(chunk)
                continue
            open_ = np.flatnonzero(~closed)
            closed_at = np.flatnonzero(closed)
            parts.append(_take(chunk, closed_at))
            keep.append(_take(chunk, open_))
        if not parts:
            return (_EMPTY,)
        first = parts[0]
        if len(parts) == 1:
            joined = first[:7]
        else:
            if any(p[6] != first[6] or len(p[5]) != len(first[5]) for p in parts):
                return None
            cols: list[Any] = []
            for f in range(4):
                if any(p[f].dtype != first[f].dtype for p in parts):
                    return None
                cols.append(np.concatenate([p[f] for p in parts]))
            payload = first[4]
            values = first[5]
            for p in parts[1:]:
                payload = concat_payload(payload, p[4])
                values = concat_payload(values, p[5])
                if payload is None or values is None:
                    return None
            joined = [*cols, payload, values, first[6]]
        self.chunks = keep
        return tuple(joined)

    def size(self) -> int:
        """The rows held plus their distinct ``(key, end)`` windows."""
        if not self.chunks:
            return 0
        keys = np.concatenate([c[0] for c in self.chunks])
        ends = np.concatenate([c[1] for c in self.chunks])
        order = np.lexsort((keys, ends))
        keys, ends = keys[order], ends[order]
        windows = 1 + int(((keys[1:] != keys[:-1]) | (ends[1:] != ends[:-1])).sum())
        return len(keys) + windows

    def keep_keys(self, keep: Callable[[Hashable], bool]) -> None:
        """Keep only the rows of the keys ``keep`` keeps."""
        chunks = []
        for chunk in self.chunks:
            distinct, which = np.unique(chunk[0], return_inverse=True)
            kept = np.array([keep(k) for k in distinct.tolist()], dtype=bool)[which.reshape(-1)]
            if kept.all():
                chunks.append(chunk)
            elif kept.any():
                chunks.append(_take(chunk, np.flatnonzero(kept)))
        self.chunks = chunks

    def check(self, cti: int) -> None:
        for chunk in self.chunks:
            assert len(chunk[0]) and chunk[7] == int(chunk[1].min())
            assert chunk[7] >= cti, "a row a CTI has passed is still held"
            assert (chunk[1] != MAX_TIME).all(), "an edge event is held"


_EMPTY = np.zeros(0, dtype=np.int64)


def _take(chunk: list[Any], index: np.ndarray) -> list[Any]:
    ends = chunk[1][index]
    return [chunk[0][index], ends, chunk[2][index], chunk[3][index],
            map_columns(chunk[4], lambda c: c[index]), tuple(c[index] for c in chunk[5]),
            chunk[6], int(ends.min())]


def _rows_of(payload: Any, index: np.ndarray) -> Any:
    return map_columns(payload, lambda c: c[index])
