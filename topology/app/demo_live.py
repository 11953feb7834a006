"""The live feed of ``cedar demo --keep``: after its run, the demo deploys its four reading
queries again over an endless feed of the meters' readings as they arrive
(:class:`LiveReadings`, :func:`live_queries`), says what to type to watch them
(:func:`print_kept`: ``cedar ui``, ``status``, ``inspect``, ``why``) and keeps them running
until each is stopped or Ctrl-C (:func:`keep_running`).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from operators.ingress import AdvanceTime
from operators.ticks import format_duration
from topology.app.demo_data import (
    DELAY_TICKS,
    EPOCH_TICKS,
    LATE_BY_TICKS,
    READING_EVERY_S,
    TICKS_PER_S,
    generate,
    reading_queries,
)

if TYPE_CHECKING:
    from topology import Stream

#: How much faster than the meters the live feed of ``cedar demo --keep`` runs: a minute of
#: readings a second.
LIVE_SPEED = 60.0


class LiveReadings:
    """An endless feed of the meters' readings as they arrive, ``speed`` times faster than
    the meters take them (:data:`LIVE_SPEED`: a minute of readings every second), for
    ``Stream.from_arrow``: each iteration starts the same feed afresh (the same readings for
    the same ``seed``), as Arrow record batches of :data:`SLOT_TICKS` of readings, each
    released when the wall clock reaches it.

    Like :func:`generate`'s readings: every :data:`READING_EVERY_S` a reading of each meter,
    overtaking each other by up to half a minute, a few spikes, one in 400 taken
    :data:`LATE_BY_TICKS` before it arrives (late: the sources drop and record it), one in
    2,000 without a time (a dead letter). ``ts`` is a UTC timestamp column, so the queries
    show their times as times (``cedar ui``, ``status``, ``inspect``, ``why``).

    >>> feed = iter(LiveReadings(meters=2, speed=1e9))
    >>> batch = next(feed)
    >>> batch.num_rows, batch.schema.field("ts").type
    (6, TimestampType(timestamp[us, tz=UTC]))
    """

    #: The readings' time in one batch (30 s: three readings of each meter).
    SLOT_TICKS = 30 * TICKS_PER_S

    def __init__(self, meters: int = 40, speed: float = LIVE_SPEED, seed: int = 7,
                 start: int = EPOCH_TICKS) -> None:
        import pyarrow as pa

        if speed <= 0:
            raise ValueError(f"LiveReadings(speed={speed!r}): give a positive speed (readings "
                             f"time per wall-clock time, e.g. 60 for a minute a second)")
        self.meters, self.speed, self.seed, self.start = meters, speed, seed, start
        self.schema = pa.schema([("meter", pa.string()),
                                 ("ts", pa.timestamp("us", tz="UTC")), ("kwh", pa.float64())])

    def __iter__(self) -> Iterator[Any]:
        import pyarrow as pa

        rng = random.Random(self.seed)
        names = [f"m{m:03d}" for m in range(self.meters)]
        base = {m: 0.2 + 0.8 * rng.random() for m in names}
        phase = {m: rng.randrange(READING_EVERY_S * TICKS_PER_S) for m in names}
        began = time.monotonic()
        slot = 0
        while True:
            lo = self.start + slot * self.SLOT_TICKS
            taken: list[tuple[str, int, float]] = []
            for m in names:
                t = lo + phase[m]
                while t < lo + self.SLOT_TICKS:
                    kwh = base[m] * (1 + 0.1 * rng.gauss(0, 1))
                    if rng.random() < 0.004:
                        kwh *= 6  # a spike for the anomaly detector
                    taken.append((m, t, round(max(kwh, 0.0), 4)))
                    t += READING_EVERY_S * TICKS_PER_S
            taken.sort(key=lambda r: r[1] + rng.randrange(30 * TICKS_PER_S))
            rows: list[tuple[str, int | None, float]] = []
            for m, t, kwh in taken:
                odds = rng.random()
                if odds < 1 / 400 and t - LATE_BY_TICKS >= self.start:
                    rows.append((m, t - LATE_BY_TICKS, kwh))  # arrives 20 min late
                elif odds > 1 - 1 / 2000:
                    rows.append((m, None, kwh))  # a broken reading: no time
                else:
                    rows.append((m, t, kwh))
            due = began + (slot + 1) * self.SLOT_TICKS / TICKS_PER_S / self.speed
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            yield pa.record_batch([pa.array([r[0] for r in rows], pa.string()),
                                   pa.array([r[1] for r in rows], pa.timestamp("us", tz="UTC")),
                                   pa.array([r[2] for r in rows], pa.float64())],
                                  schema=self.schema)
            slot += 1


def live_queries(meters: int = 40, speed: float = LIVE_SPEED, seed: int = 7
                 ) -> dict[str, Stream]:
    """The demo's four reading queries over a live feed (:class:`LiveReadings`, one per
    query, the same readings in each): what ``cedar demo --keep`` leaves running. Their
    sources read the feed as it arrives, so a reading 20 minutes behind is late there."""
    from topology import Stream

    def readings() -> Stream:
        return Stream.from_arrow(LiveReadings(meters, speed, seed), start="ts",
                                 advance=AdvanceTime(every=max(1, 6 * meters),
                                                     delay=DELAY_TICKS, policy="drop"),
                                 name="readings")

    return reading_queries(readings, generate(meters, 1, seed).meters)


def keep_live(meters: int, speed: float = LIVE_SPEED, fuse: bool | str = "chains",
              hosts: Any = None) -> dict[str, Any]:
    """Deploy :func:`live_queries` as ``demo-NAME`` (in ``hosts``, the step hosts, when given)
    and return the running queries by name. This process feeds them (their feed is a
    generator), so they run while it does."""
    kept: dict[str, Any] = {}
    try:
        for name, q in live_queries(meters, speed).items():
            kept[f"demo-{name}"] = q.deploy(f"demo-{name}", fuse=fuse, history=True,
                                            detached=False, hosts=hosts)
    except BaseException:
        for live in kept.values():
            live.stop()
        raise
    return kept


def print_kept(kept: dict[str, Any], speed: float, meters: int) -> None:
    """Say what ``cedar demo --keep`` left running and what to type to watch and stop it:
    the commands name this Ray instance's address (``--address auto`` may find another one)
    and, when the instance checks tokens, ``RAY_AUTH_MODE=token``."""
    import ray

    address = ray.get_runtime_context().gcs_address
    auth = "RAY_AUTH_MODE=token " if os.environ.get("RAY_AUTH_MODE", "").lower() == \
        "token" else ""
    cedar = f"{auth}cedar"
    per_s = format_duration(int(speed * TICKS_PER_S))
    print(f"\n  kept running on a live feed of {meters} meters ({per_s} of readings a second; "
          f"late and broken\n  readings as they arrive), until stopped:")
    print("    " + "  ".join(kept))
    print(f"\n  watch them from another terminal (this Ray instance is at {address}"
          + (" and checks tokens" if auth else "") + "):")
    print(f"    {cedar} ui --address {address}")
    print("        then open http://127.0.0.1:8766/")
    print(f"    {cedar} status --address {address}")
    print(f"    {cedar} inspect demo-anomalies --address {address}")
    print(f"    {cedar} why demo-meter_averages --address {address}")
    print("  stop them, each (this command ends when all are stopped), or Ctrl-C here:")
    print(f"    {cedar} stop NAME --address {address}", flush=True)


def keep_running(kept: dict[str, Any], poll_s: float = 1.0) -> None:
    """Wait until none of the ``kept`` queries is deployed any more (``cedar stop NAME``
    stopped each), or Ctrl-C, which stops those left."""
    from topology.running.registry import list_queries

    restore = without_stopped_step_errors()
    try:
        while set(kept) & set(list_queries()):
            time.sleep(poll_s)
        print("  the demo's queries are stopped")
    except KeyboardInterrupt:
        print("\n  stopping the demo's queries ...")
    finally:
        for live in kept.values():
            with contextlib.suppress(Exception):  # stopped already
                live.stop()
        restore()


def without_stopped_step_errors() -> Callable[[], None]:
    """While the kept queries run, Ray's notes of calls this process made to a step that a
    stop took away (``cedar stop NAME`` from another terminal while this process feeds the
    query: its pushes meet a freed slot or a killed actor) are not printed: Ray would print
    a traceback for each of dozens of them. Any other error prints as before. Returns what
    restores Ray's own handler."""
    from ray._private import worker

    show = worker._unhandled_error_handler

    def handler(e: Exception) -> None:
        from ray.exceptions import RayActorError

        if isinstance(e, RayActorError) or "SlotGone" in str(e):
            return  # a step the stop took away
        show(e)

    worker._unhandled_error_handler = handler

    def restore() -> None:
        worker._unhandled_error_handler = show

    return restore
