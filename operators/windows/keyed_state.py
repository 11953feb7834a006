"""The per-key state of :class:`~operators.windows.keyed.KeyedWindowAggregate`: per window
number and key, the UDM's incremental state (or, for a non-incremental UDM, the window's events,
:class:`Members`), how events are added to it, and, over intervals, each key's frontier (which
windows of a key are produced yet).

:class:`KeyedWindowState` is the base the operator is built of: the row path
(:meth:`~operators.windows.keyed.KeyedWindowAggregate.on_insert`), the column path
(:mod:`operators.windows.keyed_column_path`) and the output
(:mod:`operators.windows.keyed_output`) all add to and read this state, on the operator itself,
so that no part costs a call or an attribute more per event.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable
from itertools import pairwise
from typing import Any

from ..errors import OperatorError
from ..events import MAX_TIME, MIN_TIME
from ..processor import Processor
from ..udm import UDM, Window
from .evaluate import Ids, WindowUdm
from .index import Grid
from .keyed_table import KeyTable, TablePlan
from .spec import HoppingWindow, OutputPolicy, ResolvedPolicy

__all__ = ["EVERY_KEY", "KeyedWindowState", "Members"]

#: :meth:`KeyedWindowState._reached` of every key
EVERY_KEY = object()


class Members:
    """A window's events for a non-incremental UDM, as it is given them: their starts and
    payloads in time order, ties in arrival order (what the general window operator passes:
    members sorted by ``(start, end)``, stably). A batch's events are added at once; the lists
    are sorted again only when they arrive out of order."""

    __slots__ = ("payloads", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.payloads: list[Any] = []

    def add(self, starts: list[int], payloads: list[Any], in_order: bool = False) -> None:
        """Add events in arrival order (``in_order``: already sorted by start)."""
        old = self.starts
        if not starts:
            return
        if (old and starts[0] < old[-1]) or (not in_order and any(
                b < a for a, b in pairwise(starts))):
            if 8 * len(starts) < len(old):  # a few late events (one at a time): insert them
                at, held = bisect_right, self.payloads
                for s, p in zip(starts, payloads):
                    i = at(old, s)  # after the equal starts: they arrived before it
                    old.insert(i, s)
                    held.insert(i, p)
                return
            every = old + starts
            order = sorted(range(len(every)), key=every.__getitem__)  # stable: arrival order
            payloads = self.payloads + payloads
            self.starts = [every[i] for i in order]
            self.payloads = [payloads[i] for i in order]
        else:
            old += starts
            self.payloads += payloads

    def __getstate__(self) -> tuple[list[int], list[Any]]:
        return self.starts, self.payloads

    def __setstate__(self, state: tuple[list[int], list[Any]]) -> None:
        self.starts, self.payloads = state

    def __len__(self) -> int:
        return len(self.starts)


class KeyedWindowState(Processor):
    """What a keyed window aggregate holds and how events join it (see the module docstring);
    the operator's constructor builds the attributes named here."""

    keyed: bool
    apply: bool
    intervals: bool
    policy: ResolvedPolicy
    final: bool
    key: Callable[[Any], Hashable]
    spec: HoppingWindow
    grid: Grid
    call: WindowUdm
    udm: UDM
    incremental: bool
    time_sensitive: bool
    add_ranges: Callable[..., Any] | None
    output: OutputPolicy
    #: window number -> key -> UDM state (incremental) or its events (:class:`Members`), or
    #: the window's :class:`~.keyed_table.KeyTable`
    open: dict[int, Any]
    ids: Ids
    sent: dict[int, dict[Hashable, Any]]
    touched: set[tuple[int, Hashable]]
    touched_runs: list[tuple[int, list[Hashable]]]
    cti: int
    latest: dict[Hashable, int]
    #: how the states of a built-in of number parts are kept column-wise (None: per key)
    table_plan: TablePlan | None

    def _values(self, starts: list[int], payloads: list[Any]) -> list[Any]:
        """What a window keeps of each event: the payload for an incremental UDM (the clipped
        point ``(s, s + 1, payload)`` for a time-sensitive one); ``(s, payload)`` for the
        others, which are computed at the end over the window's events in time order."""
        if not self.incremental:
            return list(zip(starts, payloads))
        if self.time_sensitive:
            return [(s, s + 1, p) for s, p in zip(starts, payloads)]
        return payloads

    def _add(self, groups: dict[tuple[int, Hashable], list[Any]]) -> None:
        """Add each group's values to its window's state: payloads to an incremental UDM's
        state; ``(start, payload)`` (in arrival order) to a non-incremental one's
        :class:`Members`, which the UDM sees in time order, ties in arrival order."""
        udm, open_ = self.udm, self.open
        if not self.final:
            self.touched.update(groups)
        for (n, k), values in groups.items():
            by_key = self._plain(n)
            if by_key is None:
                by_key = open_[n] = {}
            if self.incremental:
                state = by_key.get(k)
                try:
                    if state is None:
                        state = udm.initial_state()  # type: ignore[attr-defined]
                    by_key[k] = udm.add(state, values)  # type: ignore[attr-defined]
                except Exception as exc:
                    raise self._error(n, k, "add", exc) from exc
            else:
                members = by_key.get(k)
                if members is None:
                    members = by_key[k] = Members()
                members.add([s for s, _ in values], [p for _, p in values])

    def _add_members(self, windows: list[int], keys: list[Hashable], starts: list[int],
                     payloads: list[Any], lo: list[int], hi: list[int],
                     in_order: bool) -> None:
        """A non-incremental UDM: group ``j`` (window ``windows[j]``, key ``keys[j]``) gets
        the events ``lo[j]:hi[j]`` of ``starts`` and ``payloads`` (``in_order``: each such
        range is sorted by start, arrival order within equal starts)."""
        open_ = self.open
        by_key: dict[Hashable, Any] = {}
        last = None
        for n, k, a, b in zip(windows, keys, lo, hi):
            if n != last:
                by_key = open_.get(n)  # type: ignore[assignment]
                if by_key is None:
                    by_key = open_[n] = {}
                last = n
            members = by_key.get(k)
            if members is None:
                members = by_key[k] = Members()
            members.add(starts[a:b], payloads[a:b], in_order)
        if not self.final:
            self.touched.update(zip(windows, keys))

    def _plain(self, n: int) -> dict[Hashable, Any] | None:
        """Window ``n``'s states per key, a :class:`~.keyed_table.KeyTable` made plain first
        (for good: the per-key paths change them); None when there is no such window."""
        held = self.open.get(n)
        if type(held) is KeyTable:
            held = self.open[n] = held.plain()
        return held

    def _plain_all(self) -> None:
        for n in list(self.open):
            self._plain(n)

    def _advance(self, key: Hashable, frontier: int) -> None:
        """Intervals: ``key``'s frontier moves to ``frontier`` (the start of one of its events
        + 1): its windows starting before it are produced."""
        old = max(self.cti, self.latest.get(key, MIN_TIME))
        if frontier > old:
            self.latest[key] = frontier
            self._reached(old, frontier, key)

    def _reached(self, lo: int, hi: int, key: Any) -> None:
        """Speculative: the windows starting in ``[lo, hi)`` are produced now, for ``key`` (or
        every key, ``EVERY_KEY``): touched, so that the batch's end sends their rows (a row
        already sent and unchanged is not sent again)."""
        if self.final:
            return
        g = self.grid
        na, nb = g.first_starting_at(lo), g.first_starting_at(hi)
        open_ = self.open
        reached = range(na, nb) if nb - na <= len(open_) else [n for n in open_ if na <= n < nb]
        touched = self.touched
        for n in reached:
            by_key = open_.get(n)
            if not by_key:
                continue
            if key is EVERY_KEY:
                touched.update((n, k) for k in by_key)
            elif key in by_key:
                touched.add((n, key))

    def _produced(self, n: int, key: Hashable) -> bool:
        """Whether window ``n`` of ``key`` is produced: over points always (a point's windows
        start before it); over intervals once it starts before the key's frontier (a window
        of an interval that starts later waits until the frontier reaches it, as the general
        operator's windows do)."""
        return not self.intervals or self.grid.start(n) < max(
            self.cti, self.latest.get(key, MIN_TIME))

    def _window(self, n: int) -> Window:
        g = self.grid
        return Window(max(g.start(n), MIN_TIME), min(g.end(n), MAX_TIME))

    def _error(self, n: int, k: Hashable, what: str, exc: Exception) -> OperatorError:
        return self.call.error(self.name, what, self._window(n), f"of group {k!r}", exc)
