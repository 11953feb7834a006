"""What the hopping and snapshot window operators share: the WindowIndex of :class:`Win`
entries, per-window membership updates (incremental deltas), evaluation and output through
:mod:`operators.windows.evaluate`, and cleanup by CTIs. See :mod:`operators.windows.hopping`
for the semantics (docs/windows.md)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from sortedcontainers import SortedDict, SortedList

from ..errors import DeadLetter
from ..events import Message, fmt_time
from ..processor import Processor
from ..udm import Window
from .evaluate import Ids, Rec, WindowUdm, diff, not_behind
from .index import REBUILD, Win
from .spec import OutputPolicy, ResolvedPolicy, WindowSpec


def _by_time(rec: Rec) -> tuple[int, int]:
    return rec[0], rec[1]


class WindowBase(Processor):
    """What hopping and snapshot windows share: UDM calls, per-window membership updates
    (incremental deltas), the output diff with retraction of earlier output, and cleanup."""

    _state_fields: ClassVar[tuple[str, ...]] = ("windows", "closing", "ids", "dead_letters")

    def __init__(self, spec: WindowSpec, udm: Any, kind: str, policy: ResolvedPolicy,
                 name: str | None, on_error: str) -> None:
        """``policy`` is resolved for ``spec`` (:meth:`WindowPolicy.resolve`, which the hopping
        and snapshot operators call); its ``emit`` is :class:`~.final_output.FinalOutput`'s."""
        super().__init__(name)
        self.spec = spec
        self.policy = policy
        self.call = WindowUdm(udm, kind, policy, on_error)
        self.udm = self.call.udm
        #: how results become rows
        self.output: OutputPolicy = policy.output
        self.ts = self.call.time_sensitive
        self.incremental = self.call.incremental
        self.clip_left = policy.clips_left
        self.clip_right = policy.clips_right
        #: the UDM sees true member ends, so any retraction of a member changes the window
        self.unclipped = self.ts and not self.clip_right
        #: the WindowIndex: key -> Win (hopping: the window number; snapshot: its start)
        self.windows: SortedDict = SortedDict()
        #: (close time, key) of every window: a CTI at or after close frees it
        self.closing: SortedList = SortedList()
        self.ids = Ids(self.name)
        #: windows on which the UDM raised, with ``on_error="dead_letter"``
        self.dead_letters: list[DeadLetter] = []
        self._touched: dict[int, Win] = {}
        self._pool: list[tuple[Any, int, int, Any, Win]] = []

    # -- what the UDM sees -------------------------------------------------------------------
    def _view(self, w: Win, rec: Rec) -> Any:
        if not self.ts:
            return rec[2]
        s, e, p = rec
        if self.clip_left and s < w.start:
            s = w.start
        if self.clip_right and e > w.end:
            e = w.end
        return (s, e, p)

    def _members(self, w: Win) -> list[Rec]:
        return sorted(w.members.values(), key=_by_time)

    # -- errors ----------------------------------------------------------------------------------
    def _failed(self, w: Win, exc: Exception, what: str) -> None:
        """The UDM raised on ``w``: fail the query, or keep the failure with the window until
        it is final (a later evaluation replaces or clears it; see :meth:`_free`)."""
        w.failure = self.call.failed(self.name, what, Window(w.start, w.end),
                                     f"holding {len(w.members)} events", exc)

    def _dead_letter(self, w: Win) -> None:
        """Record the failure of a window that is final (or at the end of the input)."""
        if w.failure is not None:
            self.dead_letters.append(self.call.dead_letter(
                self.name, w.failure, Window(w.start, w.end), self._members(w)))
            w.failure = None

    # -- the runtime's entry point ------------------------------------------------------------
    def end_batch(self) -> list[Message]:
        """Inserts and retractions only update the windows; the change of their output is
        emitted once per batch: before each CTI (which must follow the output it covers) and
        here, at the end. A window touched by ten events of one batch is evaluated once and
        its output corrected once."""
        return self._flush() if self._touched else []

    # -- membership --------------------------------------------------------------------------
    def _touch(self, w: Win) -> None:
        """Mark ``w`` as changing in this step; its earlier output goes to the diff pool."""
        if id(w) not in self._touched:
            self._touched[id(w)] = w
            for rec in w.outputs:
                self._pool.append((*rec, w))
            w.outputs = []

    def _kill(self, w: Win, key: Any) -> None:
        """Remove ``w`` from the index; its output will be retracted."""
        self._touch(w)
        w.dead = True
        if w.close is not None:
            self.closing.remove((w.close, key))
            w.close = None
        if self.windows.get(key) is w:
            del self.windows[key]

    def _put(self, key: Any, w: Win) -> Win:
        self.windows[key] = w
        self._touch(w)
        return w

    def _set_member(self, w: Win, eid: Any, rec: Rec | None) -> None:
        """Make event ``eid`` a member of ``w`` with lifetime ``rec`` (None: not a member);
        feeds the incremental state the delta when what the UDM sees changes."""
        old = w.members.get(eid)
        if old is None and rec is None:
            return
        ov = None if old is None else self._view(w, old)
        nv = None if rec is None else self._view(w, rec)
        if old is not None and rec is not None and (not self.ts or ov == nv):
            w.members[eid] = rec
            return
        self._touch(w)
        w.dirty = True
        if rec is None:
            del w.members[eid]
        else:
            w.members[eid] = rec
        if self.incremental and w.state is not REBUILD:
            if w.shared:
                self._own_state(w)
                if w.state is REBUILD:
                    return
            try:
                if old is not None:
                    w.state = self.udm.remove(w.state, [ov])  # type: ignore[attr-defined]
                if rec is not None:
                    w.state = self.udm.add(w.state, [nv])  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 -- reported with the window
                w.state = REBUILD
                self._failed(w, exc, "add/remove")

    def _own_state(self, w: Win) -> None:
        """Give ``w`` a state of its own before it changes (see ``Win.shared``); a state the
        UDM cannot copy is rebuilt from the members instead."""
        w.shared = False
        try:
            w.state = self.udm.copy_state(w.state)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 -- rebuilding gives the same state
            w.state = REBUILD

    def _share_state(self, src: Win, dst: Win) -> None:
        """Start ``dst`` from ``src``'s incremental state, for a window whose UDM sees the
        same member views as ``src`` did (a split or merged snapshot window): no member is
        added again. Both may then hold one object, copied by the first to change it."""
        if self.incremental and src.state is not REBUILD:
            dst.state = src.state
            dst.shared = src.shared = True

    # -- evaluation ----------------------------------------------------------------------------
    def _evaluate(self, w: Win) -> None:
        call = self.call
        window = Window(w.start, w.end)
        try:
            if self.incremental:
                if w.state is REBUILD:  # (sorted) members are needed only to rebuild a state
                    w.state = call.initial([self._view(w, r) for r in self._members(w)])
                    w.shared = False
                result = call.result(w.state, window)
            else:
                result = call.compute([self._view(w, r) for r in self._members(w)], window)
        except Exception as exc:  # noqa: BLE001 -- reported with the window
            if self.incremental:
                w.state = REBUILD
            w.result, w.dirty = [], False
            self._failed(w, exc, "compute")
            return
        w.result, w.dirty, w.failure = result, False, None

    # -- output ----------------------------------------------------------------------------------
    def _close_time(self, w: Win) -> int:
        raise NotImplementedError

    def _key(self, w: Win) -> Any:
        raise NotImplementedError

    def _flush(self) -> list[Message]:
        """Evaluate the windows touched by this step and emit the difference between their
        earlier and their new output."""
        touched, pool = self._touched, self._pool
        if not touched:
            return []
        self._touched, self._pool = {}, []
        new: list[tuple[Win, Rec]] = []
        for w in touched.values():
            if w.dead:
                continue
            if w.dirty:
                self._evaluate(w)
            new.extend((w, row) for row in self.output.rows(w.start, w.end, w.result,
                                                             self.call.stamped))
            key = self._key(w)
            if w.close is not None:
                self.closing.remove((w.close, key))
            w.close = self._close_time(w)
            self.closing.add((w.close, key))
        return [self._checked(msg, w) for msg, w in diff(pool, new, self.ids, _sent)]

    def _checked(self, msg: Message, w: Win) -> Message:
        if msg.sync_time >= self.out_cti:
            return msg
        return not_behind(msg, self.out_cti, self.output.keep,
                          f"window operator {self.name!r}: UDM {self.call.name!r} changed the "
                          f"output of window [{fmt_time(w.start)}, {fmt_time(w.end)})")

    def _free(self, c: int) -> None:
        closing, windows = self.closing, self.windows
        while closing and closing[0][0] <= c:
            _, key = closing.pop(0)
            w = windows.pop(key)
            w.close = None
            if w.failure is not None:  # final: no later input can make the UDM succeed
                self._dead_letter(w)

    def finish(self) -> list[Message]:
        """End of input: the windows still held are as final as they will get, so the ones
        the UDM fails on go to the dead letters now (their input is in no output row)."""
        for w in self.windows.values():
            self._dead_letter(w)
        return []

    def snapshot(self) -> dict[str, Any]:
        assert not self._touched, "snapshot taken in the middle of a step"
        return super().snapshot()

    def _check(self) -> None:
        assert not self._touched and not self._pool
        assert len(self.closing) == len(self.windows)
        for key, w in self.windows.items():
            assert not w.dead and w.members, (key, w)
            assert (w.close, key) in self.closing, (key, w)
            assert self._key(w) == key
            for s, e, _ in w.members.values():
                assert s < w.end and e > w.start, (w, s, e)
            if self.incremental:
                assert not w.dirty


def _sent(w: Hashable, row: tuple[Any, int, int, Any]) -> None:
    w.outputs.append(row)  # type: ignore[attr-defined]
