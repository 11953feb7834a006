"""Dynamic query composition on a live Ray cluster.

    python examples/live_composition.py

A publisher query ingests a stream of readings that keeps arriving; while it runs, a second
query is composed onto its output (``Stream.published``): it first receives every reading
still alive at the publisher's CTI, then the live stream. Both are inspected while data flows,
the publisher is stopped, and the composed query keeps answering.
"""

from __future__ import annotations

import threading
import time

from topology import AdvanceTime, Insert, Stream, attach


def readings(stop: threading.Event):
    """A reading every 5 ms, each valid for 50 ticks, until ``stop`` is set."""
    t = 0
    while not stop.is_set():
        yield {"t": t, "until": t + 50, "kwh": (t % 7) / 2}
        t += 10
        time.sleep(0.005)


if __name__ == "__main__":
    stop = threading.Event()
    publisher = (Stream.from_rows(readings(stop), start="t", end="until", shape="interval",
                                  advance=AdvanceTime(every=10))
                 .where(lambda r: r["kwh"] > 0)
                 .deploy("readings"))
    time.sleep(1.0)
    alerts = (Stream.published("readings")
              .where(lambda r: r["kwh"] >= 3)
              .select(lambda r: f"high: {r['kwh']} kWh at {r['t']}")
              .deploy("alerts"))
    time.sleep(1.0)
    for step, s in attach("readings").stats().items():
        print(f"readings {step:<16} in {s['events_in']:>6}  out {s['events_out']:>6}  "
              f"cti {s['cti']}")
    print("alerts now alive:", len(alerts.snapshot()), "events")
    upcoming = []
    for msg in alerts.subscribe(snapshot=False):  # the live stream, as it arrives
        if isinstance(msg, Insert):
            upcoming.append(msg.payload)
        if len(upcoming) == 3:
            break
    print("next alerts:", upcoming)
    stop.set()
    publisher.stop()
    print("alerts still answers after the publisher stopped:",
          alerts.stats()["sink"]["events_in"], "events in")
    alerts.stop()
