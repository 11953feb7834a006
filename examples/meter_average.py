"""Average consumption per meter every 5 minutes, on Ray: every operator is one actor.

    python examples/meter_average.py

Generated smart-meter readings (one per meter every 30 s, in microsecond ticks) are ingested
as point events with a CTI every 100 readings; bad readings (kWh <= 0) are filtered out; each
meter gets its own tumbling-window average, its keys spread over two actors.
"""

from __future__ import annotations

import random

from topology import AdvanceTime, Avg, Stream, to_cht

SECOND = 1_000_000  # ticks
MINUTE = 60 * SECOND


def readings(meters: int = 5, minutes: int = 30, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [{"meter": m, "ts": t * 30 * SECOND, "kwh": round(rng.uniform(-0.1, 2.0), 3)}
            for t in range(minutes * 2) for m in range(meters)]


def query(rows: list[dict]) -> Stream:
    return (Stream.from_rows(rows, start="ts", advance=AdvanceTime(every=100))
            .where(lambda r: r["kwh"] > 0)
            .group_apply(lambda r: r["meter"],
                         lambda g: g.tumbling_window(5 * MINUTE).aggregate(Avg("kwh")),
                         partitions=2))


if __name__ == "__main__":
    q = query(readings())
    print(q.explain())
    out = q.collect()  # starts a local Ray instance when none is connected
    for start, end, (meter, avg) in to_cht(out)[:10]:
        print(f"meter {meter}  [{start // MINUTE:>3} min, {end // MINUTE:>3} min)  "
              f"avg {avg:.3f} kWh")
