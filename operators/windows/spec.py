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

Every size, hop, gap and duration is a span of time: an int of ticks (1 tick = 1 µs), a
``datetime.timedelta`` or a string such as ``"5 min"`` (:func:`operators.ticks.to_duration`),
held as ticks; a bad one is refused naming the function that was called and the argument.

These are plain, immutable config objects; :func:`operators.windows.make_window` builds the
operator for one of them. What a window operator does with its windows -- how it cuts member
lifetimes (``clip=``), how it stamps results (``output=``) and when it sends them (``emit=``)
-- is one :class:`WindowPolicy`, whose three vocabularies are written here once: the builder
(``Stream.window``) makes and checks it, the logical node holds it, and every window operator
takes it whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..ticks import to_duration


def _durations(spec: Any, call: str, *names: str) -> None:
    """Hold the fields ``names`` of a frozen spec as ticks, read by
    :func:`~operators.ticks.to_duration` (positive; ``max_duration`` may be None), the error
    naming ``call``."""
    for name in names:
        value = to_duration(getattr(spec, name), call, name, positive=True,
                            optional=name == "max_duration")
        object.__setattr__(spec, name, value)


@dataclass(frozen=True)
class HoppingWindow:
    """Windows ``[alignment + n·hop, alignment + n·hop + size)`` for every integer n."""

    size: int
    hop: int
    alignment: int = 0

    def __post_init__(self) -> None:
        _durations(self, "hopping_window", "size", "hop")
        object.__setattr__(self, "alignment",
                           to_duration(self.alignment, "hopping_window", "alignment"))

    @property
    def kind(self) -> str:
        return "tumbling" if self.size == self.hop else "hopping"

    def describe(self, show: Callable[[int], str] = str) -> str:
        """Its arguments for ``explain()``, durations written by ``show``."""
        align = f", alignment={show(self.alignment)}" if self.alignment else ""
        if self.size == self.hop:
            return f"size={show(self.size)}{align}"
        return f"size={show(self.size)}, hop={show(self.hop)}{align}"


@dataclass(frozen=True)
class SnapshotWindow:
    """Windows between every two consecutive distinct endpoints of the live events."""

    @property
    def kind(self) -> str:
        return "snapshot"

    def describe(self, show: Callable[[int], str] = str) -> str:
        return ""


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

    def describe(self, show: Callable[[int], str] = str) -> str:
        return f"n={self.n}" + (f", by={self.by!r}" if self.by != "start" else "")


@dataclass(frozen=True)
class SessionWindow:
    """Sessions over the distinct start times: a maximal run in which each next start is less
    than the previous start + ``gap``, cut at ``first start + max_duration`` when given (an
    event starting there or later opens a new session). The window is ``[first start,
    min(last start + gap, first start + max_duration))`` (:mod:`operators.windows.session`)."""

    gap: int
    max_duration: int | None = None

    def __post_init__(self) -> None:
        _durations(self, "session_window", "gap", "max_duration")
        if self.max_duration is not None and self.max_duration < self.gap:
            raise ValueError(
                f"session_window(max_duration=...): max_duration ({self.max_duration!r}) must "
                f"be at least the gap ({self.gap!r}): a session lasts at least one gap after "
                f"its first event; pass a larger max_duration, or none")

    @property
    def kind(self) -> str:
        return "session"

    def describe(self, show: Callable[[int], str] = str) -> str:
        most = "" if self.max_duration is None else f", max_duration={show(self.max_duration)}"
        return f"gap={show(self.gap)}{most}"


WindowSpec = HoppingWindow | SnapshotWindow | CountWindow | SessionWindow


def hopping_window(size: Any, hop: Any, alignment: Any = 0) -> HoppingWindow:
    """Windows of ``size`` every ``hop`` (durations: ticks, a timedelta or ``"5 min"``)."""
    return HoppingWindow(size, hop, alignment)


def tumbling_window(size: Any, alignment: Any = 0) -> HoppingWindow:
    """Windows of ``size`` end to end (a duration: ticks, a timedelta or ``"5 min"``).

    >>> tumbling_window("1 min") == tumbling_window(60_000_000)
    True
    """
    ticks = to_duration(size, "tumbling_window", "size", positive=True)
    return HoppingWindow(ticks, ticks, to_duration(alignment, "tumbling_window", "alignment"))


def snapshot_window() -> SnapshotWindow:
    return SnapshotWindow()


def count_window(n: int, by: Literal["start", "end"] = "start") -> CountWindow:
    return CountWindow(n, by)


def session_window(gap: Any, max_duration: Any = None) -> SessionWindow:
    return SessionWindow(gap, max_duration)


# -- window policies ------------------------------------------------------------------------------
#: ``clip=``: the part of a member's lifetime a time-sensitive UDM sees (docs/windows.md).
CLIP_POLICIES: dict[str, str] = {
    "none": "the lifetime as it is",
    "left": "cut to start no earlier than the window's start",
    "right": "cut to end no later than the window's end",
    "full": "cut to the window at both ends (the default; count windows always clip fully)",
}
#: ``output=``: how a window's results are stamped as rows (docs/windows.md).
OUTPUT_POLICIES: dict[str, str] = {
    "window": "each result lives [W.start, W.end) (the default but for count windows)",
    "point_end": "each result is the point [W.end - 1, W.end) (the only one of count windows)",
    "clip": "a time-sensitive UDO's own events, cut to the window",
    "keep": "a time-sensitive UDO's own events as they are (none may start before W.start)",
    "compressed": "hopping and tumbling windows: W owns [W.end - hop, W.end), and consecutive "
                  "windows with the same members share one row",
}
#: ``emit=``: when a window's rows are sent (docs/windows.md, "Speculative and final output").
EMIT_POLICIES: dict[str, str] = {
    "speculative": "as soon as the window has events, corrected by retractions (the default)",
    "final": "once, when a CTI passes the window's end; never retracted",
}
_DEFAULT_CLIP = "full"
_DEFAULT_EMIT = "speculative"


def _check_name(arg: str, value: object, names: dict[str, str], what: str) -> None:
    """Refuse a policy name that is not one of ``names`` (``what`` they are), naming the
    argument and the valid names."""
    if isinstance(value, str) and value in names:
        return
    valid = ", ".join(repr(k) for k in names)
    kind = "" if isinstance(value, str) else f" (a {type(value).__name__}, not a name)"
    err = ValueError if isinstance(value, str) else TypeError
    raise err(f"{arg}={value!r}{kind} is not {what}; use one of {valid}")


@dataclass(frozen=True)
class WindowPolicy:
    """What a window operator does with its windows, checked once, when it is made:

    * ``clip`` (:data:`CLIP_POLICIES`, default ``"full"``): the part of each member's lifetime
      a time-sensitive UDM sees -- ``"none"``, ``"left"`` (cut at the window's start),
      ``"right"`` (cut at its end) or ``"full"`` (both);
    * ``output`` (:data:`OUTPUT_POLICIES`; ``None``: the window's own default, ``"window"``, or
      ``"point_end"`` for count windows): how results are stamped -- ``"window"``,
      ``"point_end"``, ``"clip"``/``"keep"`` (a time-sensitive UDO's own events, cut to the
      window or kept) or ``"compressed"`` (hopping windows sharing rows);
    * ``emit`` (:data:`EMIT_POLICIES`, default ``"speculative"``): when rows are sent --
      ``"speculative"`` (at once, corrected by retractions) or ``"final"`` (once a CTI passes
      the window; never retracted).

    :meth:`resolve` fills in the window's default, refuses a policy that cannot apply to it
    and gives the :class:`ResolvedPolicy` every window operator runs by; ``Stream.window``
    does it where the query is written.

    >>> WindowPolicy(output="point_end").for_window(count_window(3))
    WindowPolicy(clip='full', output='point_end', emit='speculative')
    >>> WindowPolicy(clip="middle")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: clip='middle' is not a clipping policy; use one of 'none', 'left', 'right', 'full'
    """

    clip: str = _DEFAULT_CLIP
    output: str | None = None
    emit: str = _DEFAULT_EMIT

    def __post_init__(self) -> None:
        _check_name("clip", self.clip, CLIP_POLICIES, "a clipping policy")
        if self.output is not None:
            _check_name("output", self.output, OUTPUT_POLICIES, "an output policy")
        _check_name("emit", self.emit, EMIT_POLICIES, "an emit policy")

    @classmethod
    def of(cls, clip: str | None = None, output: str | None = None,
           emit: str | None = None) -> WindowPolicy:
        """The policy of the builder's keyword arguments (``None``: the default)."""
        return cls(_DEFAULT_CLIP if clip is None else clip, output,
                   _DEFAULT_EMIT if emit is None else emit)

    def resolve(self, spec: WindowSpec) -> ResolvedPolicy:
        """This policy for windows of ``spec``, resolved once: the output default filled in
        (``"point_end"`` for count windows, ``"window"`` otherwise); a ValueError, naming the
        argument, when a policy cannot apply (``output="compressed"`` off hopping windows;
        count windows other than ``output="point_end"``, ``clip="full"``).

        >>> WindowPolicy(emit="final").resolve(tumbling_window(5)).final_row_length
        5
        """
        count = isinstance(spec, CountWindow)
        output = self.output or default_output(spec)
        if output == "compressed" and not isinstance(spec, HoppingWindow):
            raise ValueError(f"output='compressed' applies to hopping and tumbling windows "
                             f"only, not to {spec.kind} windows; use output='window' or "
                             f"'point_end'")
        if count and output != "point_end":
            raise ValueError(f"output={output!r}: count windows only support "
                             f"output='point_end' (leave output out)")
        if count and self.clip != "full":
            raise ValueError(f"clip={self.clip!r}: count windows always clip fully (leave clip "
                             f"out or pass clip='full')")
        policy = self if output == self.output else replace(self, output=output)
        return ResolvedPolicy(spec, policy)

    def for_window(self, spec: WindowSpec) -> WindowPolicy:
        """This policy with ``spec``'s default output filled in (:meth:`resolve`, as the
        policy object the logical node holds)."""
        return self.resolve(spec).policy

    @property
    def final(self) -> bool:
        """Rows are sent once, final (``emit="final"``)."""
        return self.emit == "final"

    @property
    def window_rows(self) -> bool:
        """The output (filled in: :meth:`for_window`) stamps each result as one row of its
        window (:attr:`OutputPolicy.window_rows`); False while the output is not filled in."""
        return self.output is not None and OUTPUTS[self.output].window_rows

    def describe(self, spec: WindowSpec) -> str:
        """The policies that are not ``spec``'s defaults, as keyword arguments (for
        ``explain()``)."""
        return "".join(f", {k}={v!r}" for k, v, d in (
            ("clip", self.clip, _DEFAULT_CLIP), ("output", self.output, default_output(spec)),
            ("emit", self.emit, _DEFAULT_EMIT)) if v is not None and v != d)


def default_output(spec: WindowSpec) -> str:
    """The output policy of ``spec``'s windows when none is given: ``"point_end"`` for count
    windows, ``"window"`` for the others."""
    return "point_end" if isinstance(spec, CountWindow) else "window"


#: The policy of a window written with no ``clip=``, ``output=`` or ``emit=``.
DEFAULT_POLICY = WindowPolicy()

Rec = tuple[int, int, Any]


@dataclass(frozen=True)
class OutputPolicy:
    """What one output policy (:data:`OUTPUT_POLICIES`) does: how a window's results become
    rows, and where its rows start (what the output CTI is made of). One instance per name,
    in :data:`OUTPUTS`.

    ``window``: ``[W.start, W.end)``; ``point_end``: ``[W.end − 1, W.end)``; ``clip``: a
    time-sensitive UDO's own timestamps cut to the window; ``keep``: its timestamps as they
    are (none may start before ``W.start``); ``compressed``: ``window`` rows over the owned
    intervals of consecutive windows (the operator evaluates it as snapshot windows).

    >>> OUTPUTS["point_end"].rows(0, 10, ["a"], stamped=False)
    [(9, 10, 'a')]
    """

    name: str
    #: each result is one row, the window ``[W.start, W.end)`` (``window``)
    whole: bool = field(init=False)
    #: each result is one row, the point at the window's end (``point_end``)
    point: bool = field(init=False)
    #: a time-sensitive UDO's own stamps, cut to the window (``clip``)
    cuts: bool = field(init=False)
    #: a time-sensitive UDO's own stamps as they are: the output CTI is the input CTI
    #: (``keep``)
    keep: bool = field(init=False)
    #: consecutive hopping windows with the same members share a row (``compressed``)
    compressed: bool = field(init=False)

    def __post_init__(self) -> None:
        _check_name("output", self.name, OUTPUT_POLICIES, "an output policy")
        for attr, name in (("whole", "window"), ("point", "point_end"), ("cuts", "clip"),
                           ("keep", "keep"), ("compressed", "compressed")):
            object.__setattr__(self, attr, self.name == name)

    @property
    def stamps(self) -> bool:
        """Rows carry a time-sensitive UDO's own timestamps (cut to the window or not)."""
        return self.cuts or self.keep

    @property
    def window_rows(self) -> bool:
        """Each result is one row stamped by its window (``window`` or ``point_end``), not the
        UDO's own times nor shared rows: what the keyed column-wise operators produce."""
        return self.whole or self.point

    def row_start(self, start: int, end: int) -> int:
        """Where the rows of window ``[start, end)`` start (when not the UDO's own times)."""
        return end - 1 if self.point else start

    def rows(self, start: int, end: int, results: list[Any], stamped: bool) -> list[Rec]:
        """The rows of window ``[start, end)`` for its ``results``: payloads, or ``(start,
        end, payload)`` events when ``stamped`` (a time-sensitive UDO's)."""
        if stamped:  # (a time-sensitive UDO's events)
            if self.keep:
                return list(results)
            if self.cuts:
                return [(max(s, start), min(e, end), p) for s, e, p in results
                        if max(s, start) < min(e, end)]
            results = [p for _, _, p in results]
        s = self.row_start(start, end)
        return [(s, end, p) for p in results]


#: Every output policy, by name.
OUTPUTS: dict[str, OutputPolicy] = {name: OutputPolicy(name) for name in OUTPUT_POLICIES}


@dataclass(frozen=True)
class ResolvedPolicy:
    """A :class:`WindowPolicy` resolved for the windows of one ``spec``
    (:meth:`WindowPolicy.resolve`), answering what the window operators, the keyed fast paths
    and the planner ask of it; ``policy`` is the WindowPolicy with its output filled in.

    >>> p = WindowPolicy(clip="left").resolve(hopping_window(10, 5))
    >>> p.output.name, p.clips_left, p.clips_right, p.final
    ('window', True, False, False)
    """

    spec: WindowSpec
    policy: WindowPolicy
    #: how results become rows
    output: OutputPolicy = field(init=False)

    def __post_init__(self) -> None:
        if self.policy.output is None:
            raise ValueError(f"ResolvedPolicy needs the output filled in; build it with "
                             f"WindowPolicy.resolve(spec), got {self.policy!r}")
        object.__setattr__(self, "output", OUTPUTS[self.policy.output])

    def resolve(self, spec: WindowSpec) -> ResolvedPolicy:
        """This policy for ``spec``: itself when it was resolved for ``spec``."""
        return self if spec == self.spec else self.policy.resolve(spec)

    @property
    def clips_left(self) -> bool:
        """A member's start is cut to the window's start (``clip`` ``"left"`` or ``"full"``)."""
        return self.policy.clip in ("left", "full")

    @property
    def clips_right(self) -> bool:
        """A member's end is cut to the window's end (``clip`` ``"right"`` or ``"full"``)."""
        return self.policy.clip in ("right", "full")

    @property
    def final(self) -> bool:
        """Rows are sent once, final (``emit="final"``)."""
        return self.policy.final

    @property
    def compressed(self) -> bool:
        """Consecutive hopping windows share rows (``output="compressed"``, evaluated as
        snapshot windows)."""
        return self.output.compressed

    @property
    def window_rows(self) -> bool:
        """Each result is one row stamped by its window (:attr:`OutputPolicy.window_rows`)."""
        return self.output.window_rows

    @property
    def final_at_end(self) -> bool:
        """A row is final once the CTI reaches its end: rows are whole windows that no CTI
        lengthens (hopping and tumbling windows but compressed ones, sessions); snapshot,
        count and compressed rows only once the CTI passes it."""
        return isinstance(self.spec, SessionWindow) or (isinstance(self.spec, HoppingWindow)
                                                        and not self.compressed)

    @property
    def final_row_length(self) -> int | None:
        """The lifetime of every row when each is sent once, final, stamped by its window
        (``emit="final"``, output ``window`` or ``point_end``) of a hopping, tumbling or
        count window: its size, or 1 for a point; None otherwise (speculative rows are
        retracted, the others' lengths vary)."""
        if (not self.final or not self.window_rows
                or not isinstance(self.spec, (HoppingWindow, CountWindow))):
            return None
        if self.output.point:
            return 1
        return self.spec.size if isinstance(self.spec, HoppingWindow) else None

    def describe(self) -> str:
        """The policies that are not the spec's defaults, as keyword arguments."""
        return self.policy.describe(self.spec)


#: What a window operator's ``policy=`` takes: a policy, resolved for its spec when built.
PolicyArg = WindowPolicy | ResolvedPolicy
