"""Helpers of the window operator (:mod:`operators.windows`): hopping-grid arithmetic and the
per-window entry of the WindowIndex.

A hopping grid numbers its windows by an integer ``n``: window ``n`` is
``[alignment + n·hop, alignment + n·hop + size)``. Every question the window operator asks of
the grid is one floor division, so no window is ever enumerated to find another::

    >>> g = Grid(size=10, hop=5)
    >>> g.first_ending_after(12), g.last_starting_before(12)   # windows overlapping time 12
    (1, 2)
    >>> [(g.start(n), g.end(n)) for n in g.span(12, 13)]
    [(5, 15), (10, 20)]
"""

from __future__ import annotations

from typing import Any


class Grid:
    """The windows ``[alignment + n·hop, alignment + n·hop + size)`` of a hopping spec."""

    __slots__ = ("alignment", "hop", "size")

    def __init__(self, size: int, hop: int, alignment: int = 0) -> None:
        self.size = size
        self.hop = hop
        self.alignment = alignment

    def start(self, n: int) -> int:
        return self.alignment + n * self.hop

    def end(self, n: int) -> int:
        return self.alignment + n * self.hop + self.size

    def first_ending_after(self, t: int) -> int:
        """The smallest ``n`` whose window ends after ``t`` (O(1))."""
        return (t - self.alignment - self.size) // self.hop + 1

    def last_starting_before(self, t: int) -> int:
        """The largest ``n`` whose window starts before ``t`` (O(1))."""
        return (t - self.alignment - 1) // self.hop

    def first_starting_at(self, t: int) -> int:
        """The smallest ``n`` whose window starts at or after ``t`` (O(1))."""
        return -((self.alignment - t) // self.hop)

    def span(self, start: int, end: int) -> range:
        """The numbers of the windows that overlap ``[start, end)`` (empty when the lifetime
        falls in a gap between windows, possible when ``size < hop``)."""
        return range(self.first_ending_after(start), self.last_starting_before(end) + 1)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Grid, (self.size, self.hop, self.alignment))


#: Marks a window whose incremental state must be rebuilt from its members before use: a new
#: window (a snapshot window builds it early if it is split), a snapshot window split or
#: merged under a time-sensitive UDM where the clipping changes what the UDM sees, or one
#: whose UDM state raised (in add, remove or copy_state).
REBUILD = "<rebuild>"


class Win:
    """One entry of the WindowIndex: a window ``[start, end)`` and what the operator keeps for
    it until a CTI closes it.

    * ``members``: event id -> ``(start, end, payload)``, the events overlapping the window
      (the end is exact wherever the UDM can see it: see ``WindowOperator._view``);
    * ``state``: the incremental UDM state (or :data:`REBUILD`); ``shared`` says another
      window may hold the same state object (the halves of a split snapshot window start
      with their parent's state), so it is copied before ``add``/``remove`` change it;
    * ``result``: the UDM's last result as a list of payloads (time-insensitive UDMs and
      aggregates) or of ``(start, end, payload)`` (time-sensitive UDOs); ``dirty`` says it is
      stale;
    * ``outputs``: the output events emitted for the window, ``(id, start, end, payload)``,
      exactly as they were sent (retractions repeat them);
    * ``close``: the CTI at or after which nothing can change the window any more;
    * ``failure``: the reason (what was called, the error) when the UDM failed on the window's
      current members (with ``on_error="dead_letter"``): a dead letter once the window is
      final, unless a later evaluation succeeds first.
    """

    __slots__ = (
        "close",
        "dead",
        "dirty",
        "end",
        "failure",
        "members",
        "outputs",
        "result",
        "shared",
        "start",
        "state",
    )

    def __init__(self, start: int, end: int, members: dict[Any, tuple[int, int, Any]] | None
                 = None) -> None:
        self.start = start
        self.end = end
        self.members: dict[Any, tuple[int, int, Any]] = members if members is not None else {}
        self.state: Any = REBUILD
        self.shared = False
        self.result: list[Any] = []
        self.dirty = True
        self.outputs: list[tuple[Any, int, int, Any]] = []
        self.close: int | None = None
        self.dead = False
        self.failure: str | None = None

    def __repr__(self) -> str:
        return f"<Win [{self.start}, {self.end}) {len(self.members)} events>"
