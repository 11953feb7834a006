"""``group_apply(key, session_window(gap) → aggregate)`` over point inserts, for all keys at
once: the planner's column-wise path for sessions per key (user sessions, Nexmark Q11), equal
in CHT to the general :class:`~operators.group_apply.GroupApply` of a
:class:`~operators.windows.session.SessionWindowOperator`.

Points never retract, so a key's sessions only ever grow or merge: the operator keeps, per key,
its sessions not final yet (first and last start, the UDM's incremental state and the rows the
state was made of), sorted by start. A batch of :class:`~operators.columns.Columns` is sorted
once by (key, start) with numpy; cutting it where the key changes or a start is ``gap`` or more
after the previous one gives the batch's own sessions per key, whose states a built-in
aggregate adds column-wise in one call (``add_ranges``). Each batch session then joins the
key's sessions it reaches (a session ``[f .. l]`` reaches ``[F .. L]`` when ``f < L + gap`` and
``F < l + gap``): in order, the one session it extends took the batch's rows into its own state
directly; when a late batch session bridges two or more, their states are rebuilt from the
rows they kept. In-order input therefore costs a sort per batch and a few Python steps per
(key, batch)::

    key a:   ·0  ·2             ·12        key b:  ·3          gap 5, Count, Cti(20)
    sessions a [0 ──── 7) 2     a [12 ─── 17) 1    b [3 ──── 8) 1

    >>> from operators.aggregates import Count
    >>> from operators.cht import to_cht
    >>> from operators.events import Insert, Cti
    >>> from operators.windows import SessionWindow
    >>> op = KeyedSessionAggregate(lambda p: p, SessionWindow(5), Count(), name="ks")
    >>> to_cht(op.process([Insert(1, 0, 1, "a"), Insert(2, 2, 3, "a"), Insert(3, 3, 4, "b"),
    ...                    Insert(4, 12, 13, "a"), Cti(20)]))
    [(0, 7, ('a', 2)), (3, 8, ('b', 1)), (12, 17, ('a', 1))]

Keys are grouped as ``group_apply`` groups them (:func:`~operators.group_apply.group_key`):
every NaN key, and every tuple key with NaN in the same places, is one group, column-wise (the
key column coded by :func:`~operators.windows.keyed_columns.named_codes`), event by
event and across a checkpoint.

``emit="speculative"`` (the default): every session a batch touched gets its current row at
the end of the batch (the row sent before is retracted, as is the row of a session merged into
another). ``emit="final"``: a session's row is sent once, when a CTI reaches its end; at the
end of input, :meth:`finish` sends the rest. After ``Cti(c)`` the sessions ending at or before
``c`` are final and freed; the output CTI is ``c`` or the first start of a session still held,
if earlier (``point_end``: ``c``).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Hashable, Iterable
from itertools import pairwise
from typing import Any

import numpy as np

from ..columns import Columns, apply_columns, map_columns, payload_list
from ..errors import OperatorError
from ..events import FreshId, Insert, Message, Retract, add_time
from ..group_apply import group_key
from ..key_groups import ByKey
from ..processor import Processor
from ..udm import IncrementalAggregate, Window, field_getter, resolve
from .evaluate import Ids, WindowUdm
from .keyed_columns import SAFE, merged_batch, named_codes, retraction_error
from .spec import DEFAULT_POLICY, PolicyArg, SessionWindow

__all__ = ["KeyedSessionAggregate", "supports_sessions"]

_new = tuple.__new__

#: The rows a session's state was made of: (payload columns, their row count, lo, hi) for
#: rows lo:hi of a batch, or (None, payloads, 0, 0) for events taken one by one.
Chunk = tuple[Any, Any, int, int]


def supports_sessions(spec: Any, udm: Any, kind: str, policy: PolicyArg,
                      on_error: str) -> bool:
    """Whether :class:`KeyedSessionAggregate` computes ``session_window(spec).aggregate(udm)``
    over points: a session spec without ``max_duration``, an incremental time-insensitive
    aggregate (every built-in but TimeWeightedAverage), ``policy`` (resolved for the spec)
    with output ``window`` or ``point_end``, failing loudly."""
    try:
        resolved = resolve(udm)
    except Exception:  # noqa: BLE001 (the general path reports a bad UDM)
        return False
    if not isinstance(spec, SessionWindow):
        return False
    return (spec.max_duration is None
            and spec.gap < SAFE and kind == "aggregate" and on_error == "raise"
            and policy.resolve(spec).window_rows
            and isinstance(resolved, IncrementalAggregate)
            and not getattr(resolved, "time_sensitive", False))


class _Session:
    """A key's session not final yet: its first and last start, the UDM state, the rows it
    was made of (to rebuild a merge) and the row sent for it (speculative)."""

    __slots__ = ("chunks", "dead", "first", "last", "sent", "state")

    def __init__(self, first: int, last: int, state: Any, chunks: list[Chunk]) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.chunks = chunks
        self.sent: tuple[FreshId, int, int, Any] | None = None
        self.dead = False

    def __repr__(self) -> str:
        return f"_Session({self.first}, {self.last}, {self.state!r})"


def _by_last(s: _Session) -> int:
    return s.last


def _by_first(s: _Session) -> int:
    return s.first


class KeyedSessionAggregate(ByKey, Processor):
    """One session-window aggregate per value of ``key(payload)`` over point events; payloads
    become ``(key, result)`` as ``group_apply`` gives them (``keyed=False``: one group and the
    bare result, a session window aggregate without group_apply)."""

    _state_fields = ("sessions", "ids")
    by_key = "sessions"  # (rescaling: operators/key_groups.py)

    def __init__(self, key: Callable[[Any], Hashable] | str, spec: SessionWindow, udm: Any,
                 policy: PolicyArg = DEFAULT_POLICY, keyed: bool = True,
                 name: str | None = None) -> None:
        super().__init__(name)
        resolved = policy.resolve(spec)
        if not supports_sessions(spec, udm, "aggregate", resolved, "raise"):
            raise ValueError(f"KeyedSessionAggregate takes a session_window without "
                             f"max_duration and an incremental, time-insensitive aggregate "
                             f"(a built-in but TimeWeightedAverage), got {spec!r}, {udm!r}; "
                             f"use the general session window operator")
        self.policy = resolved
        self.final = resolved.final
        self.keyed = keyed
        self.key = field_getter(key)
        self.spec = spec
        self.gap = spec.gap
        self.call = WindowUdm(udm, "aggregate", resolved)
        self.udm: Any = self.call.udm
        self.add_ranges = getattr(self.udm, "add_ranges", None)
        self.output = resolved.output
        self.point = self.output.point
        #: key -> its sessions not final yet, sorted by first start (disjoint, and at least
        #: ``gap`` apart: last + gap <= next first)
        self.sessions: dict[Hashable, list[_Session]] = {}
        self.ids = Ids(self.name)
        #: speculative: the sessions this batch touched, and retractions of merged ones
        self._touched: dict[int, tuple[Hashable, _Session]] = {}
        self._retired: list[Message] = []

    # -- input ------------------------------------------------------------------------------
    def process(self, batch: Iterable[Message], port: int = 0) -> list[Message]:
        """A batch of Columns and CTIs is added all at once, then its CTIs close sessions (an
        event after a CTI starts at or after it, too late for a session that CTI closes)."""
        msgs = batch if isinstance(batch, list) else list(batch)
        merged = merged_batch(msgs, self.in_cti)  # (an event behind a CTI: per message, which
        return super().process(msgs if merged is None else merged, port)  # names the culprit)

    def on_insert(self, msg: Insert, port: int) -> list[Message]:
        s = msg.start
        if msg.end != s + 1:
            raise ValueError(f"{msg!r} is not a point event; the keyed session aggregate takes "
                             f"only points (the planner chose it for a point source, so this "
                             f"is a bug: report it)")
        k = group_key(self.key(msg.payload))  # NaN keys: one group (a NaN equals nothing)
        sessions = self.sessions.get(k)
        reached = self._reached(sessions, s, s) if sessions else []
        base = reached[0] if len(reached) == 1 else None
        try:
            state = self.udm.add(self.udm.initial_state() if base is None
                                 else base.state, [msg.payload])
        except Exception as exc:
            raise self._error(k, s, s, "add", exc) from exc
        self._merge(k, s, s, state, base, (None, [msg.payload], 0, 0))
        return []

    def on_retract(self, msg: Retract, port: int) -> list[Message]:
        raise retraction_error(msg, "keyed session aggregate")

    def on_columns(self, msg: Columns, port: int) -> list[Message]:
        starts = msg.starts
        n = len(starts)
        if not n:
            return []
        if not msg.points and not bool((msg.ends - starts == 1).all()):
            return super().on_columns(msg, port)  # on_insert names the culprit
        if int(starts.max()) >= SAFE or int(starts.min()) <= -SAFE:
            return super().on_columns(msg, port)
        keys = apply_columns(self.key, msg)
        named = named_codes(keys)
        if named is not None:  # strings, other objects, NaN: grouped by their int codes
            names, keys = named
        if not (isinstance(keys, np.ndarray) and keys.dtype.kind in "biu"):
            return super().on_columns(msg, port)  # floats, objects: per event
        order = np.lexsort((starts, keys))
        ks, ss = keys[order], starts[order]
        cut = np.empty(n, dtype=bool)
        cut[0] = True
        np.logical_or(ks[1:] != ks[:-1], ss[1:] - ss[:-1] >= self.gap, out=cut[1:])
        lo_a = np.flatnonzero(cut)
        hi_a = np.empty_like(lo_a)
        hi_a[:-1] = lo_a[1:]
        hi_a[-1] = n
        firsts, lasts = ss[lo_a].tolist(), ss[hi_a - 1].tolist()
        group_keys = ks[lo_a].tolist()
        if named is not None:
            group_keys = [names[c] for c in group_keys]
        lo, hi = lo_a.tolist(), hi_a.tolist()
        cols = map_columns(msg.payload, lambda c: c[order])
        # the one session of its key each batch session extends, when no other batch session
        # reaches it (else the merges rebuild states from the rows they kept)
        reaches: list[list[_Session]] = []
        times_reached: dict[int, int] = {}
        get = self.sessions.get
        for k, f, last in zip(group_keys, firsts, lasts):
            sessions = get(k)
            reached = self._reached(sessions, f, last) if sessions else []
            for ses in reached:
                times_reached[id(ses)] = times_reached.get(id(ses), 0) + 1
            reaches.append(reached)
        bases = [r[0] if len(r) == 1 and times_reached[id(r[0])] == 1 else None
                 for r in reaches]
        states = self._add_ranges([None if b is None else b.state for b in bases], cols, n,
                                  lo, hi, group_keys, firsts, lasts)
        merge = self._merge
        touched = None if self.final else self._touched
        for k, f, last, state, base, a, b, reached in zip(group_keys, firsts, lasts, states,
                                                          bases, lo, hi, reaches):
            if base is not None and len(reached) == 1:  # it extends one session: in order
                base.chunks.append((cols, n, a, b))
                if f < base.first:
                    base.first = f
                if last > base.last:
                    base.last = last
                base.state = state
                if touched is not None:
                    touched[id(base)] = (k, base)
            elif not reached:  # a new session (no merge can reach it: see _merge)
                ses = _Session(f, last, state, [(cols, n, a, b)])
                sessions = get(k)
                if sessions is None:
                    self.sessions[k] = [ses]
                elif sessions[-1].first < f:
                    sessions.append(ses)
                else:
                    insort(sessions, ses, key=_by_first)
                if touched is not None:
                    touched[id(ses)] = (k, ses)
            else:
                merge(k, f, last, state, base, (cols, n, a, b))
        return []

    def _add_ranges(self, states: list[Any], cols: Any, n: int, lo: list[int], hi: list[int],
                    keys: list[Any], firsts: list[int], lasts: list[int]) -> list[Any]:
        """Each range's rows added to its state (None: a new one), column-wise when the UDM
        can."""
        if self.add_ranges is not None:
            try:
                got = self.add_ranges(states, cols, n, lo, hi)
            except Exception as exc:
                raise self._error(keys[0], firsts[0], lasts[-1], "add", exc) from exc
            if got is not None:
                return list(got)
        values = payload_list(cols)
        udm, out = self.udm, []
        for state, a, b, k, f, last in zip(states, lo, hi, keys, firsts, lasts):
            try:
                out.append(udm.add(udm.initial_state() if state is None else state, values[a:b]))
            except Exception as exc:
                raise self._error(k, f, last, "add", exc) from exc
        return out

    def _add_chunks(self, state: Any, chunks: list[Chunk]) -> Any:
        """``state`` with the rows of ``chunks`` added (rebuilding a merged session)."""
        udm = self.udm
        for cols, n, a, b in chunks:
            got = None
            if cols is None:
                state = udm.add(state, n)
                continue
            if self.add_ranges is not None:
                got = self.add_ranges([state], cols, n, [a], [b])
            state = got[0] if got is not None else udm.add(state, payload_list(cols)[a:b])
        return state

    def _reached(self, sessions: list[_Session], f: int, last: int) -> list[_Session]:
        """The sessions of a key that a batch session ``[f .. last]`` joins."""
        gap = self.gap
        tail = sessions[-1]
        if tail.last + gap <= f:  # in order: after every session of the key
            return []
        if len(sessions) == 1 or sessions[-2].last + gap <= f:  # only the last can be reached
            return [tail] if tail.first < last + gap else []
        i = bisect_right(sessions, f - gap, key=_by_last)  # the first with last + gap > f
        out = []
        for s in sessions[i:]:
            if s.first >= add_time(last, gap):
                break
            out.append(s)
        return out

    def _merge(self, k: Hashable, f: int, last: int, state: Any, base: _Session | None,
               chunk: Chunk) -> None:
        """Put the batch session ``[f .. last]`` of key ``k`` (its rows' ``state``, which
        already holds ``base``'s) among the key's sessions, merging those it reaches."""
        sessions = self.sessions.get(k)
        if sessions is None:
            sessions = self.sessions[k] = []
        reached = self._reached(sessions, f, last) if sessions else []
        if not reached:
            ses = _Session(f, last, state, [chunk])
            insort(sessions, ses, key=_by_first)
        else:
            if base is None:  # a bridge, or a session another batch session extended too
                ses = reached[0]
                try:
                    state = self._add_chunks(state, ses.chunks)
                except Exception as exc:
                    raise self._error(k, f, last, "add", exc) from exc
            else:
                assert any(r is base for r in reached), "a batch session lost its session"
                ses = base
            for other in reached:
                if other is ses:
                    continue
                try:
                    state = self._add_chunks(state, other.chunks)
                except Exception as exc:
                    raise self._error(k, f, last, "add", exc) from exc
                ses.chunks.extend(other.chunks)
                other.dead = True
                if other.sent is not None:
                    oid, s, e, p = other.sent
                    self._retired.append(_new(Retract, (oid, s, e, s, p)))
            ses.chunks.append(chunk)
            ses.first = min(f, reached[0].first)
            ses.last = max(last, reached[-1].last)
            ses.state = state
            i = sessions.index(reached[0])
            sessions[i:i + len(reached)] = [ses]
        if not self.final:
            self._touched[id(ses)] = (k, ses)

    # -- CTIs and output --------------------------------------------------------------------
    def end_batch(self) -> list[Message]:
        return [] if self.final else self._correct()

    def _row(self, k: Hashable, ses: _Session) -> tuple[int, int, Any]:
        first, end = ses.first, ses.last + self.gap  # (starts and gap below 2**61)
        try:
            result = self.udm.window_result(ses.state, _new(Window, (first, end)))
        except Exception as exc:
            raise self._error(k, first, ses.last, "result", exc) from exc
        return (end - 1 if self.point else first, end, (k, result) if self.keyed else result)

    def _correct(self) -> list[Message]:
        """Speculative: each touched session's current row replaces the one sent before."""
        out, self._retired = self._retired, []
        if not self._touched:
            return out
        for k, ses in self._touched.values():
            if ses.dead:
                continue
            s, e, p = self._row(k, ses)
            sent = ses.sent
            if sent is not None:
                if sent[1] == s and sent[2] == e and sent[3] == p:
                    continue
                out.append(_new(Retract, (sent[0], sent[1], sent[2], sent[1], sent[3])))
            oid = self.ids.mint()
            out.append(_new(Insert, (oid, s, e, p)))
            ses.sent = (oid, s, e, p)
        self._touched.clear()
        return out

    def on_cti(self, time: int, port: int) -> list[Message]:
        out = [] if self.final else self._correct()
        earliest = time
        closed = time - self.gap  # sessions whose last start is at or before it are final
        empty = []
        for k, sessions in self.sessions.items():
            first = sessions[0]
            if first.last > closed:
                if first.first < earliest:
                    earliest = first.first
                continue
            i = 0
            while i < len(sessions) and sessions[i].last <= closed:
                if self.final:
                    s, e, p = self._row(k, sessions[i])
                    out.append(_new(Insert, (self.ids.mint(), s, e, p)))
                i += 1
            del sessions[:i]
            if sessions:
                earliest = min(earliest, sessions[0].first)
            else:
                empty.append(k)
        for k in empty:
            del self.sessions[k]
        cti = time if self.point else earliest
        return out + self.emit_cti(cti)

    def finish(self) -> list[Message]:
        """End of input: with ``emit="final"`` the sessions no CTI has closed, as they stand
        (speculative rows are up to date already)."""
        if not self.final:
            out = self._correct()
            self.sessions.clear()
            return out
        rows = [self._row(k, ses) for k, sessions in self.sessions.items() for ses in sessions]
        self.sessions.clear()
        rows.sort(key=lambda r: r[0])
        return [_new(Insert, (self.ids.mint(), s, e, p)) for s, e, p in rows]

    def _error(self, k: Hashable, first: int, last: int, what: str,
               exc: Exception) -> OperatorError:
        return self.call.error(self.name, what, Window(first, add_time(last, self.gap)),
                               f"of group {k!r}", exc)

    def state_size(self) -> int:
        return sum(len(s) for s in self.sessions.values())

    def snapshot(self) -> dict[str, Any]:
        assert not self._touched and not self._retired, "snapshot taken in the middle of a step"
        return super().snapshot()

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        # a NaN key read back from a checkpoint is another NaN object: make it NAN_KEY again
        self.sessions = {group_key(k): v for k, v in self.sessions.items()}

    def _check(self) -> None:
        assert not self._touched and not self._retired, "changes left after a batch"
        for k, sessions in self.sessions.items():
            assert sessions, f"key {k!r} holds no session"
            for a, b in pairwise(sessions):
                assert add_time(a.last, self.gap) <= b.first, f"key {k!r}: {a} reaches {b}"
            for s in sessions:
                assert s.first <= s.last and not s.dead
                assert add_time(s.last, self.gap) > self.in_cti, f"a final session kept: {s}"
