"""Per-key progress of an :class:`~operators.ingress.Ingress` (``AdvanceTime(per_key=...)``,
docs/ctis.md): each key (a device) has its own CTI, its own latest start − ``delay`` on its own
``every`` / ``interval``, and the stream's CTI is the low watermark (the largest start seen −
``low_watermark``, or the lowest of the keys' CTIs without one).

An event is late when it starts behind its key's CTI or behind the stream's CTI. The keys whose
CTI moved during a push go out once, at its end, as one
:class:`~operators.events.KeyCtis` listing them (bounded by the events of the push, never a
message per key), after the events they cover; the stream's CTI goes out as a ``Cti`` where it
moves, as with one CTI.

    >>> from operators.ingress import AdvanceTime, Ingress
    >>> src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="m", low_watermark=600))
    >>> out = src.push([{"m": "fast", "t": 1000}, {"m": "slow", "t": 450},
    ...                 {"m": "fast", "t": 1010}, {"m": "slow", "t": 460}])
    >>> [type(m).__name__ for m in out]
    ['Insert', 'Cti', 'Insert', 'Insert', 'Cti', 'Insert', 'KeyCtis']
    >>> out[1], out[4], out[-1]
    (Cti(time=400), Cti(time=410), KeyCtis(times=(('fast', 1010), ('slow', 460))))
    >>> src.push([{"m": "slow", "t": 455}, {"m": "fast", "t": 1005}]), len(src.late)
    ([], 2)
    >>> src.late[0].reason  # doctest: +ELLIPSIS
    "start 455 is behind the CTI 460 of key 'slow'; a point cannot be moved, ..."
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from typing import Any

from .events import MAX_TIME, MIN_TIME, KeyCtis, Message
from .ingress_progress import IngressProgress
from .udm import field_getter

__all__ = ["IngressKeys"]

# a key's progress: [its latest start, accepted events since its last count-based CTI, its
# latest start at its last interval-based CTI (None: none yet), its CTI, the caller's wall
# clock when its last event came (None: not given)]
K_LATEST, K_COUNT, K_MARK, K_CTI, K_WALL = range(5)


class IngressKeys(IngressProgress):
    """The per-key CTIs of an ingress (see the module docstring)."""

    _key_of: Callable[[Any], Any] | None
    # the state (what a checkpoint stores, beside IngressProgress's)
    _keys: dict[Hashable, list[Any]]
    _lows: list[tuple[int, int, Hashable]]  # (CTI, n, key): the lowest CTI first
    _pushed: int  # entries ever pushed on _lows (its n: keys are never compared)
    _moved: dict[Hashable, int]  # keys whose CTI moved since the last KeyCtis
    _low: int  # the low watermark (the largest start seen − low_watermark, or the keys' lowest)
    _late_keys: dict[Hashable, int]  # late rows (dropped or adjusted) by key
    _wall: float | None  # the wall clock of the push under way (not state)

    def _init_keys(self) -> None:
        key = self.advance.per_key
        self._key_of = None if key is None else field_getter(key)
        self._keys = {}
        self._lows = []
        self._pushed = 0
        self._moved = {}
        self._low = MIN_TIME
        self._late_keys = {}
        self._wall = None

    def _key_cti(self, key: Hashable) -> int:
        """The CTI an event of ``key`` must not start behind: its key's or the stream's (the
        low watermark as it is now, which goes out as a CTI when a key's CTI does)."""
        progress = self._keys.get(key)
        cti = self.cti if self.cti > self._low else self._low
        return cti if progress is None or progress[K_CTI] < cti else progress[K_CTI]

    def _generate_key(self, key: Hashable, start: int, out: list[Message]) -> None:
        """After an accepted event of ``key`` that started at ``start`` (as read from the
        row): that key's count- and time-based CTIs, and the stream's low watermark."""
        adv = self.advance
        progress = self._keys.get(key)
        if progress is None:
            # a new key starts at the stream's CTI, and holds the lowest of the keys there
            cti = self.cti if self.cti > self._low else self._low
            progress = self._keys[key] = [start, 0, None, cti, self._wall]
            self._push_low(key, cti)
        else:
            progress[K_WALL] = self._wall
            if start > progress[K_LATEST]:
                progress[K_LATEST] = start
        fire = False
        if adv.every is not None:
            progress[K_COUNT] += 1
            if progress[K_COUNT] >= adv.every:
                progress[K_COUNT] = 0
                fire = True
        if adv.interval is not None:
            latest, mark = progress[K_LATEST], progress[K_MARK]
            if mark is None:
                progress[K_MARK] = latest
            elif latest - mark >= adv.interval:
                progress[K_MARK] = latest
                fire = True
        if fire:
            t = min(max(progress[K_LATEST] - adv.delay, MIN_TIME), MAX_TIME)
            if t > progress[K_CTI]:
                progress[K_CTI] = t
                self._moved[key] = t
                self._push_low(key, t)
        lag = adv.low_watermark
        low = self._latest - lag if lag is not None else self._lowest()
        if low > self._low:
            self._low = min(max(low, MIN_TIME), MAX_TIME)
        if fire and self._low > self.cti:  # the stream's CTI goes out on the keys' schedule
            self._emit(out, self._low)

    def _push_low(self, key: Hashable, t: int) -> None:
        """Record that ``key``'s CTI is now ``t``, for :meth:`_lowest` (without a low
        watermark only)."""
        if self.advance.low_watermark is not None:
            return
        lows = self._lows
        self._pushed += 1
        heapq.heappush(lows, (t, self._pushed, key))
        if len(lows) > 2 * len(self._keys) + 64:  # stale entries: keep the heap bounded
            self._lows = [(p[K_CTI], self._pushed + i, k)
                          for i, (k, p) in enumerate(self._keys.items(), 1)]
            self._pushed += len(self._lows)
            heapq.heapify(self._lows)

    def _lowest(self) -> int:
        """The lowest CTI of the keys seen (the stream's CTI without a low watermark)."""
        lows, keys = self._lows, self._keys
        while lows and keys[lows[0][2]][K_CTI] != lows[0][0]:
            heapq.heappop(lows)  # a key's older CTI
        return lows[0][0] if lows else MIN_TIME

    #: Whether :meth:`_key_ctis` sends the keys' CTIs (the planner turns it off where no step
    #: uses them: :mod:`topology.planning.key_progress`); they steer lateness either way.
    send_key_ctis = True

    def _key_ctis(self, out: list[Message]) -> None:
        """At the end of a push: one KeyCtis of the keys whose CTI moved past the stream's."""
        if self._moved and not self.send_key_ctis:
            self._moved = {}
        elif self._moved:
            cti = self.cti
            times = [(k, t) for k, t in self._moved.items() if t > cti]
            self._moved = {}
            if times:
                out.append(KeyCtis(times))  # type: ignore[arg-type]  # beside the messages

    def slowest_keys(self, n: int = 10) -> dict[str, Any]:
        """What ``why`` and the web view show of per-key progress: the stream's CTI (the low
        watermark), the keys' highest CTI, and the ``n`` keys whose CTI is lowest, each with
        its CTI, its latest start, the wall clock when its last event came (the clock the
        runtime gives ``push``; None without one) and its late rows; then the ``n`` keys with
        the most late rows. Read on request: O(keys).

        >>> from operators.ingress import AdvanceTime, Ingress
        >>> src = Ingress(start="t", advance=AdvanceTime(every=1, per_key="m", low_watermark=60))
        >>> _ = src.push([{"m": "a", "t": 50}, {"m": "b", "t": 10}, {"m": "a", "t": 40}], now=7.0)
        >>> view = src.slowest_keys(1)
        >>> view["cti"], view["top"], view["slowest"]
        (-10, 50, [{'key': 'b', 'cti': 10, 'latest': 10, 'arrived': 7.0, 'late': 0}])
        >>> view["most_late"]
        [{'key': 'a', 'cti': 50, 'latest': 50, 'arrived': 7.0, 'late': 1}]
        """
        keys, late = self._keys, self._late_keys

        def row(k: Hashable) -> dict[str, Any]:  # (a key with every row late has none)
            p = keys.get(k) or [None, 0, None, None, None]
            return {"key": k, "cti": p[K_CTI], "latest": p[K_LATEST], "arrived": p[K_WALL],
                    "late": late.get(k, 0)}

        slowest = heapq.nsmallest(n, keys, key=lambda k: keys[k][K_CTI])
        worst = heapq.nlargest(n, late, key=late.__getitem__)
        return {"cti": max(self.cti, self._low),
                "top": max((p[K_CTI] for p in keys.values()), default=MIN_TIME),
                "keys": len(keys), "slowest": [row(k) for k in slowest],
                "most_late": [row(k) for k in worst]}
