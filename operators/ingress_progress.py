"""How an :class:`~operators.ingress.Ingress` says that time has advanced, and what it records
of the rows that came too late: the CTIs of its :class:`~operators.advance_time.AdvanceTime`
(count- and time-based after each accepted event, the idle timer of :meth:`poll`, the final
CTI of :meth:`end`) and the late-event accounting (``late`` and ``stats``) that the row path
and the column path share.

:class:`IngressProgress` is the base an ingress is built of; it names the configuration and
state the ingress holds, which its parts (:mod:`operators.ingress_rows`,
:mod:`operators.ingress_columns`) read and write on the ingress itself, so that no part costs a
call or an attribute more per row.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from .advance_time import AdvanceTime
from .errors import DeadLetter, LateEvent
from .events import MAX_TIME, MIN_TIME, Cti, Message
from .processor import Stateful

__all__ = ["IngressProgress"]


class IngressProgress(Stateful):
    """The CTIs and the late accounting of an ingress (see the module docstring)."""

    # the configuration (Ingress.__init__)
    name: str
    shape: str
    advance: AdvanceTime
    _start_spec: str | Callable[[Any], Any]
    _end_spec: str | Callable[[Any], Any] | None
    _get_start: Callable[[Any], Any]
    _get_end: Callable[[Any], Any] | None
    _get_id: Callable[[Any], Any] | None
    _need_dict: bool
    # the state (Ingress._reset; what a checkpoint stores)
    cti: int
    late: list[LateEvent]
    dead_letters: list[DeadLetter]
    stats: dict[str, int]
    _latest: int
    _top: int
    _horizon: int
    _count: int
    _mark: int | None
    _next_id: int
    _open: dict[Hashable, tuple[int, Any]]
    _used: set[Hashable]
    _dropped_edges: set[Hashable]
    _last_wall: float | None
    _ended: bool
    _low: int  # per-key progress: the low watermark (operators.ingress_keys)

    def _late_start(self, start: int, end: int, cti: int, row: Any,
                    key: Hashable = None) -> LateEvent:
        """The record of a row dropped because its event starts behind the CTI (counted):
        the CTI of its ``key`` when that one is ahead of the stream's (per-key progress)."""
        why = ("a point cannot be moved, so it is dropped" if self.shape == "point"
               else f"its end {end} is not after the CTI either"
               if self.advance.policy == "adjust" else "policy 'drop'")
        self.stats["dropped"] += 1
        return LateEvent(self.name, "dropped",
                         f"start {start} is behind the CTI {cti}{self._of_key(key, cti)}; "
                         f"{why} (a larger AdvanceTime delay tolerates more disorder)", row, None)

    def _of_key(self, key: Hashable, cti: int) -> str:
        """`` of key 'm1'`` where the CTI ``cti`` an event was behind is its key's."""
        if self.advance.per_key is None:
            return ""
        return f" of key {key!r}" if cti > max(self.cti, self._low) else " (the low watermark)"

    def _dropped(self, row: Any, reason: str) -> None:
        """``row`` is dropped as late, for ``reason`` (counted, recorded in ``late``)."""
        self.stats["dropped"] += 1
        self.late.append(LateEvent(self.name, "dropped", reason, row, None))

    def _accepted(self, msg: Message, row: Any, out: list[Message],
                  adjusted: str | None) -> None:
        """``msg``, made of ``row``, goes out: processed, or ``adjusted`` (why; recorded in
        ``late`` with the message sent)."""
        out.append(msg)
        if adjusted is None:
            self.stats["processed"] += 1
        else:
            self.stats["adjusted"] += 1
            self.late.append(LateEvent(self.name, "adjusted", adjusted, row, msg))

    def poll(self, now: float) -> list[Message]:
        """The idle timer: when ``advance.idle_timeout`` is set, no rows arrived for at least
        that many seconds (of the caller's clock ``now``) and some event is not yet covered by
        a CTI, emit ``Cti(latest event start + 1)``, which flushes every event sent so far.
        Repeated polls while the source stays quiet emit nothing more.

        >>> from operators.ingress import AdvanceTime, Ingress
        >>> src = Ingress(start="t", advance=AdvanceTime(every=1, idle_timeout=0.2))
        >>> src.push([{"t": 7}], now=10.0)
        [Insert(id=0, start=7, end=8, payload={'t': 7}), Cti(time=7)]
        >>> src.poll(10.1), src.poll(10.25), src.poll(11.0)
        ([], [Cti(time=8)], [])
        """
        timeout = self.advance.idle_timeout
        if timeout is None or self._ended or self._top + 1 <= self.cti:
            return []
        if self._last_wall is None:  # rows arrived without a clock: start timing now
            self._last_wall = now
            return []
        if now - self._last_wall < timeout:
            return []
        return self._emit([], self._top + 1)

    def next_poll(self, now: float) -> float | None:
        """When :meth:`poll` may next emit, asked at ``now``: when the idle timeout of the
        last rows runs out; None while every event is covered by a CTI (nothing to flush
        before more rows come) or without an idle timeout.

        >>> from operators.ingress import AdvanceTime, Ingress
        >>> src = Ingress(start="t", advance=AdvanceTime(every=1, idle_timeout=0.2))
        >>> src.next_poll(9.0) is None        # no event yet
        True
        >>> _ = src.push([{"t": 7}], now=10.0)
        >>> src.next_poll(10.0), src.poll(10.25), src.next_poll(10.25)
        (10.2, [Cti(time=8)], None)
        """
        timeout = self.advance.idle_timeout
        if timeout is None or self._ended or self._top + 1 <= self.cti:
            return None
        if self._last_wall is None:  # rows arrived without a clock: poll starts timing
            return now
        return self._last_wall + timeout

    def end(self) -> list[Message]:
        """End of input: ``Cti(max over events of (end if finite else start + 1))``, past
        every finite endpoint, if that moves time forward. Later pushes raise; a second
        ``end()`` returns nothing.

        >>> from operators.ingress import Ingress
        >>> src = Ingress(start="s", end="e", shape="interval")
        >>> src.push([{"s": 1, "e": 9}, {"s": 4, "e": 6}])[-1]
        Insert(id=1, start=4, end=6, payload={'s': 4, 'e': 6})
        >>> src.end()
        [Cti(time=9)]
        """
        if self._ended:
            return []
        self._ended = True
        return self._emit([], self._horizon)

    def _generate(self, out: list[Message]) -> None:
        """After an accepted event: the count- and time-based CTIs of AdvanceTime."""
        adv = self.advance
        fire = False
        if adv.every is not None:
            self._count += 1
            if self._count >= adv.every:
                self._count = 0
                fire = True
        if adv.interval is not None:
            if self._mark is None:
                self._mark = self._latest
            elif self._latest - self._mark >= adv.interval:
                self._mark = self._latest
                fire = True
        if fire:
            t = self._latest - adv.delay
            self._emit(out, min(max(t, MIN_TIME), MAX_TIME))

    def _emit(self, out: list[Message], time: int) -> list[Message]:
        if time > self.cti:
            self.cti = time
            self.stats["ctis"] += 1
            out.append(Cti(time))
        return out

