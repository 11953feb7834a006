"""Window specifications: how a window operator divides the time axis (docs/windows.md).

====================================  =========================================  ===================
window                                windows W of the time axis                 an event is in W if
====================================  =========================================  ===================
``hopping_window(size, hop, align)``  ``[align + n·hop, align + n·hop + size)``  its lifetime
                                                                                 overlaps W
``tumbling_window(size, align)``      hopping with ``hop == size``               the same
``snapshot_window()``                 between consecutive distinct endpoints     the same
``count_window(n, by="start")``       ``[t_i, t_{i+n-1} + 1)`` over distinct     its start is in W
                                      start times ``t_0 < t_1 < ...``
``count_window(n, by="end")``         the same over distinct end times           its end is in W
``session_window(gap, max_duration)`` maximal runs of distinct starts, each next   its start is in W
                                      one ``< previous + gap``: ``[first start,
                                      min(last start + gap, first + max))``
====================================  =========================================  ===================

These are plain, immutable config objects; :func:`operators.windows.make_window` builds the
operator for one of them. Clipping (``clip=``) and output policies (``output=``) are options of
the operator, listed here as the names they accept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CLIP_POLICIES = ("none", "left", "right", "full")
OUTPUT_POLICIES = ("window", "point_end", "clip", "keep", "compressed")


def _positive(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive int number of ticks, got {value!r}")


@dataclass(frozen=True)
class HoppingWindow:
    """Windows ``[alignment + n·hop, alignment + n·hop + size)`` for every integer n."""

    size: int
    hop: int
    alignment: int = 0

    def __post_init__(self) -> None:
        _positive("hopping_window: size", self.size)
        _positive("hopping_window: hop", self.hop)
        if isinstance(self.alignment, bool) or not isinstance(self.alignment, int):
            raise ValueError(f"hopping_window: alignment must be an int, got {self.alignment!r}")

    @property
    def kind(self) -> str:
        return "tumbling" if self.size == self.hop else "hopping"


@dataclass(frozen=True)
class SnapshotWindow:
    """Windows between every two consecutive distinct endpoints of the live events."""

    @property
    def kind(self) -> str:
        return "snapshot"


@dataclass(frozen=True)
class CountWindow:
    """Windows spanning ``n`` consecutive distinct start (or end) times."""

    n: int
    by: Literal["start", "end"] = "start"

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n <= 0:
            raise ValueError(f"count_window: n must be a positive int, got {self.n!r}")
        if self.by not in ("start", "end"):
            raise ValueError(f"count_window: by must be 'start' or 'end', got {self.by!r}")

    @property
    def kind(self) -> str:
        return "count"


@dataclass(frozen=True)
class SessionWindow:
    """Sessions over the distinct start times: a maximal run in which each next start is less
    than the previous start + ``gap``, cut at ``first start + max_duration`` when given (an
    event starting there or later opens a new session). The window is ``[first start,
    min(last start + gap, first start + max_duration))`` (:mod:`operators.windows.session`)."""

    gap: int
    max_duration: int | None = None

    def __post_init__(self) -> None:
        _positive("session_window: gap", self.gap)
        if self.max_duration is not None:
            _positive("session_window: max_duration", self.max_duration)
            if self.max_duration < self.gap:
                raise ValueError(
                    f"session_window: max_duration ({self.max_duration!r}) must be at least "
                    f"the gap ({self.gap!r}): a session lasts at least one gap after its "
                    f"first event; pass a larger max_duration, or none")

    @property
    def kind(self) -> str:
        return "session"


WindowSpec = HoppingWindow | SnapshotWindow | CountWindow | SessionWindow


def hopping_window(size: int, hop: int, alignment: int = 0) -> HoppingWindow:
    return HoppingWindow(size, hop, alignment)


def tumbling_window(size: int, alignment: int = 0) -> HoppingWindow:
    return HoppingWindow(size, size, alignment)


def snapshot_window() -> SnapshotWindow:
    return SnapshotWindow()


def count_window(n: int, by: Literal["start", "end"] = "start") -> CountWindow:
    return CountWindow(n, by)


def session_window(gap: int, max_duration: int | None = None) -> SessionWindow:
    return SessionWindow(gap, max_duration)


def check_policies(spec: WindowSpec, clip: str, output: str) -> None:
    """Raise a clear ValueError for an unknown or inapplicable clipping/output policy."""
    if clip not in CLIP_POLICIES:
        raise ValueError(f"clip={clip!r} is not a clipping policy; use one of {CLIP_POLICIES}")
    if output not in OUTPUT_POLICIES:
        raise ValueError(f"output={output!r} is not an output policy; use one of "
                         f"{OUTPUT_POLICIES}")
    if output == "compressed" and not isinstance(spec, HoppingWindow):
        raise ValueError("output='compressed' applies to hopping and tumbling windows only")
    if isinstance(spec, CountWindow) and output not in ("point_end",):
        raise ValueError(f"count windows only support output='point_end', got {output!r}")
    if isinstance(spec, CountWindow) and clip != "full":
        raise ValueError(f"count windows always clip fully; clip={clip!r} cannot apply "
                         f"(leave clip out or pass clip='full')")
