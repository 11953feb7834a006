"""AdvanceTime: when a source promises that time has moved on (emits a CTI), what happens to an
event that arrives behind such a promise, and how a quiet source still flushes its last events
(docs/ctis.md). :class:`~operators.ingress.Ingress` runs by it; ``import_ctis``
(:mod:`operators.import_ctis`) takes its late-event ``policy`` vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .events import TICKS_PER_SECOND
from .ticks import DURATION_HELP, to_duration

__all__ = ["DEFAULT_ADVANCE", "POLICIES", "SHAPES", "AdvanceTime"]

#: The event shapes a source can produce.
SHAPES = ("point", "interval", "edge")
#: What happens to an event that arrives behind the latest CTI.
POLICIES = ("drop", "adjust")


def _is_int(value: object) -> bool:
    return type(value) is int


@dataclass(frozen=True)
class AdvanceTime:
    """When a source emits CTIs and what happens to events behind them (docs/ctis.md).

    * ``every=N``: after every N accepted events, ``Cti(latest start − delay)``;
    * ``interval=T``: whenever the latest start has moved at least T ticks since the last CTI
      generated this way (or, for the first one, since the first event),
      ``Cti(latest start − delay)``;
    * ``delay=D`` ticks: how far behind the latest start the CTI stays, i.e. how much disorder
      the source tolerates; ``D = -1`` puts the CTI one tick *past* the latest start, which
      flushes that event but turns every later event with the same start into a late one
      (the trap of the CTI article);
    * ``policy``: ``"drop"`` drops an event that starts behind the latest CTI; ``"adjust"``
      moves its start up to the CTI when its end is still after it (points cannot be moved,
      they are dropped);
    * ``idle_timeout`` (seconds of the caller's wall clock): when no rows arrived for that
      long, :meth:`Ingress.poll` emits a CTI one tick past the latest event;
    * ``per_key`` (a column name or a function of the row): per-key progress, each key (a
      device) keeps its own CTI, its own latest start − ``delay`` on its own ``every`` /
      ``interval``, so a device whose clock is behind loses no events to the others. An
      event is late when it is behind its key's CTI or behind the stream's CTI, the *low
      watermark*: the largest start seen − ``low_watermark`` (a duration), or, without one,
      the lowest CTI of the keys seen (a silent key then holds back everything that is not
      keyed by it; a low watermark bounds that). ``group_apply`` by the same key finalizes
      each key's output at that key's CTI (:class:`~operators.events.KeyCtis`).

    ``interval`` and ``delay`` are spans of event time and ``idle_timeout`` one of wall-clock
    time: each may be written as a ``timedelta`` or a string such as ``"5 min"``
    (:func:`operators.ticks.to_duration`); a plain number stays what it was, ticks for
    ``interval`` and ``delay``, seconds for ``idle_timeout``.

    "Latest start" is the largest start (as read from the row) of the events accepted so far
    (processed or adjusted; dropped and dead-lettered rows do not move time). A CTI is only
    emitted when it moves time forward. With neither ``every`` nor ``interval`` the source
    emits only idle CTIs and the final CTI of :meth:`Ingress.end`.

    >>> AdvanceTime(every=1, delay=-1)
    AdvanceTime(every=1, interval=None, delay=-1, policy='drop', idle_timeout=None)
    >>> AdvanceTime(interval="1 min", delay="5 s", idle_timeout="250 ms")
    AdvanceTime(every=None, interval=60000000, delay=5000000, policy='drop', idle_timeout=0.25)
    >>> AdvanceTime(every=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: AdvanceTime(every=0): every must be an int >= 1 (a CTI after every N events) ...
    """

    every: int | None = None
    interval: int | None = None
    delay: int = 0
    policy: str = "drop"
    idle_timeout: float | None = None
    per_key: str | Callable[[Any], Hashable] | None = None
    low_watermark: int | None = None

    def __repr__(self) -> str:  # the per-key fields only when set (reprs of before stay)
        extra = "".join(f", {f}={getattr(self, f)!r}" for f in ("per_key", "low_watermark")
                        if getattr(self, f) is not None)
        return (f"AdvanceTime(every={self.every!r}, interval={self.interval!r}, "
                f"delay={self.delay!r}, policy={self.policy!r}, "
                f"idle_timeout={self.idle_timeout!r}{extra})")

    def __post_init__(self) -> None:
        for arg in ("interval", "delay", "low_watermark"):  # a timedelta or "5 min" as ticks
            value = getattr(self, arg)
            if value is not None and not _is_int(value) and not isinstance(value, float):
                object.__setattr__(self, arg, to_duration(value, "AdvanceTime", arg))
        t = self.idle_timeout
        if isinstance(t, (str, timedelta)) or type(t).__name__ == "timedelta64":
            ticks = to_duration(t, "AdvanceTime", "idle_timeout", positive=True)
            object.__setattr__(self, "idle_timeout", ticks / TICKS_PER_SECOND)
        if self.every is not None and not (_is_int(self.every) and self.every >= 1):
            raise ValueError(
                f"AdvanceTime(every={self.every!r}): every must be an int >= 1 (a CTI after "
                f"every N events) or None for no count-based CTIs"
            )
        if self.interval is not None and not (_is_int(self.interval) and self.interval >= 1):
            raise ValueError(
                f"AdvanceTime(interval={self.interval!r}): interval must be an int >= 1 "
                f"(ticks of event time between CTIs) or a positive duration, or None for no "
                f"time-based CTIs; {DURATION_HELP}"
            )
        if not _is_int(self.delay):
            raise TypeError(
                f"AdvanceTime(delay={self.delay!r}): delay must be an int number of ticks or "
                f"a duration; {DURATION_HELP}"
            )
        if self.policy not in POLICIES:
            raise ValueError(
                f"AdvanceTime(policy={self.policy!r}): policy must be 'drop' (late events "
                f"are dropped) or 'adjust' (late intervals start at the CTI)"
            )
        t = self.idle_timeout
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not math.isfinite(t) or t <= 0):
            raise ValueError(
                f"AdvanceTime(idle_timeout={t!r}): idle_timeout must be a positive number of "
                f"seconds (of the wall clock), a timedelta or a string such as '30 s', or None "
                f"for no idle CTIs"
            )
        self._check_per_key()

    def _check_per_key(self) -> None:
        key, lag = self.per_key, self.low_watermark
        if key is not None and not (isinstance(key, str) or callable(key)):
            raise TypeError(
                f"AdvanceTime(per_key={key!r}): per_key must be a column name or a function "
                f"row -> key (the device each row comes from), or None for one CTI"
            )
        if lag is not None:
            if key is None:
                raise ValueError(
                    f"AdvanceTime(low_watermark={lag!r}) needs per_key=: the low watermark "
                    f"bounds how far the keys' own CTIs may trail the latest start; with one "
                    f"CTI for the stream, delay= says that"
                )
            if not _is_int(lag) or lag < 0:
                raise ValueError(
                    f"AdvanceTime(low_watermark={lag!r}): low_watermark must be a duration >= "
                    f"0 (how far behind the largest start seen the stream's CTI stays), or "
                    f"None for the lowest of the keys' CTIs; {DURATION_HELP}"
                )


#: A source's AdvanceTime when none is given: only idle CTIs and the final one, drop late events.
DEFAULT_ADVANCE = AdvanceTime()
