"""Chart patterns in a stock feed, per symbol, exact on late ticks: a V-bottom and a
head-and-shoulders found by ``detect`` over ticks that Spark streams in arrival order.

    python examples/chart_patterns.py

A seeded generator makes 30 minutes of ticks for three symbols (one tick every 10 s: a random
walk of a cent or two, with a V-bottom and a head-and-shoulders drawn in) and writes them as
parquet files in the order they arrive: a few ticks come in minutes late, in a later file.
``Stream.from_spark`` reads the files as a streaming DataFrame, one file per micro-batch, so
cedar sees the ticks in that arrival order. Each pattern is a regular expression over kinds of
ticks whose predicates read the match so far (``m["B"][-1]``: the last tick bound to ``B``).
A match shows as soon as its ticks are there; when a later or late tick changes it, cedar
retracts it and sends the corrected one (or none), so the final matches are those of the ticks
in time order (docs/patterns.md#detect). The script prints them with their times, then how
ACME's were shown and corrected: its V-bottom appears when its late low comes in, and a fall
and rise that looks like a V is retracted when the late tick of a dip in the rise comes in.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import sys
import tempfile

from topology import AdvanceTime, Insert, Retract, Stream, to_cht

OPEN = dt.datetime(2026, 11, 27, 14, 30, tzinfo=dt.UTC)  # 09:30 in New York
TICK_S = 10  # seconds between two ticks of a symbol
MINUTE = 60_000_000  # in the engine's ticks (µs)
SYMBOLS = ("ACME", "GLOBEX", "INITECH")


# -- the feed -----------------------------------------------------------------------------------
def prices(symbol: str, rng: random.Random, n: int) -> list[int]:
    """``n`` prices in cents: a random walk, with the shapes of ``SHAPES[symbol]`` drawn in."""
    px, out = 10_000, []
    for _ in range(n):
        px += rng.choice((-2, -1, 0, 0, 1, 2))
        out.append(px)
    for at, steps in SHAPES[symbol]:
        level = out[at - 1]
        for i, step in enumerate(steps):
            level += step
            out[at + i] = level
        shift = level - out[at + len(steps)] + rng.choice((-1, 1))
        out[at + len(steps):] = [p + shift for p in out[at + len(steps):]]
    return out


DOWN, UP = [-40] * 5, [40] * 5
V_BOTTOM = DOWN + UP
# a rise, back down, a higher peak, back down, a lower shoulder, and the fall through the neck
HEAD_AND_SHOULDERS = [30] * 3 + [-30] * 3 + [40] * 5 + [-40] * 5 + [20] * 3 + [-30] * 4
#: symbol -> (tick number, the moves drawn from there)
# a fall and a rise that falls back half-way: no V-bottom, though it looks like one until
# the tick of the dip (the 8th) comes in
FALSE_V = DOWN + [40, 40, -30, 70, 40]
SHAPES = {"ACME": [(30, V_BOTTOM), (100, FALSE_V)], "GLOBEX": [(60, HEAD_AND_SHOULDERS)],
          "INITECH": [(20, HEAD_AND_SHOULDERS), (120, V_BOTTOM)]}
#: ticks that surely come late (besides some at random): the low of ACME's V-bottom, the dip
#: of its false one
LATE = {("ACME", 34), ("ACME", 107)}


def ticks(minutes: int = 30, seed: int = 1987) -> list[dict]:
    """The feed, in the order the ticks arrive: each tick ``arrives`` a moment after its time,
    a few (on a bad line) two to three minutes after."""
    rng = random.Random(seed)
    n = minutes * 60 // TICK_S
    rows = []
    for symbol in SYMBOLS:
        for i, px in enumerate(prices(symbol, rng, n)):
            at = OPEN + dt.timedelta(seconds=i * TICK_S + SYMBOLS.index(symbol))
            late = rng.random() < 0.03 or (symbol, i) in LATE
            lag = dt.timedelta(seconds=rng.randint(120, 180) if late else rng.randint(0, 3))
            rows.append({"ts": at, "symbol": symbol, "px": px / 100, "arrives": at + lag})
    return sorted(rows, key=lambda r: r["arrives"])


def write_arrivals(rows: list[dict], folder: str, every_min: int = 5) -> int:
    """The ticks as parquet files, one per ``every_min`` minutes of arrival, oldest first:
    the order a streaming file source reads them in. Returns how many were written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files: dict[int, list[dict]] = {}
    for r in rows:
        files.setdefault(int((r["arrives"] - OPEN).total_seconds()) // (60 * every_min),
                         []).append(r)
    for k, part in sorted(files.items()):
        path = os.path.join(folder, f"ticks-{k:03}.parquet")
        pq.write_table(pa.Table.from_pylist(
            [{"ts": r["ts"], "symbol": r["symbol"], "px": r["px"]} for r in part]), path)
        os.utime(path, (1_800_000_000 + k, 1_800_000_000 + k))  # the file source: oldest first
    return len(files)


# -- the patterns -------------------------------------------------------------------------------
def falls(sym: str, before: str):
    """The tick is below the last one bound to ``sym`` (or, for its first, to ``before``)."""
    return lambda p, m: p["px"] < (m[sym] or m[before])[-1]["px"]


def rises(sym: str, before: str):
    return lambda p, m: p["px"] > (m[sym] or m[before])[-1]["px"]


def v_bottom(m: dict) -> dict:
    top, low, back = m["A"][0]["px"], min(p["px"] for p in m["B"]), m["C"][-1]["px"]
    return {"pattern": "V-bottom", "symbol": m["A"][0]["symbol"],
            "detail": f"{top:.2f} down to {low:.2f}, back up to {back:.2f}",
            "depth": min(top, back) - low}  # as deep on the way back up as on the way down


def head_and_shoulders(m: dict) -> dict:
    left, head, right = m["LEFT"][-1]["px"], m["HEAD"][-1]["px"], m["RIGHT"][-1]["px"]
    return {"pattern": "head-and-shoulders", "symbol": m["LEFT"][0]["symbol"],
            "detail": f"left shoulder {left:.2f}, head {head:.2f}, right {right:.2f}",
            "depth": head - max(left, right)}


def query(ticks: Stream) -> Stream:
    # A V-bottom: a tick, three or more falling ticks, three or more rising ones
    bottoms = ticks.detect("A B{3,} C{3,}", {"B": falls("B", "A"), "C": rises("C", "B")},
                           within="5 min", key="symbol", measures=v_bottom)
    # a head-and-shoulders: from a tick, a rise (the left shoulder) and a dip, a higher rise
    # (the head) and a fall, a lower rise (the right shoulder) and the fall from it
    shoulders = ticks.detect(
        "START LEFT{2,} DIP{2,} HEAD{2,} FALL{2,} RIGHT{2,} BREAK{2,}",
        {"LEFT": rises("LEFT", "START"), "DIP": falls("DIP", "LEFT"),
         "HEAD": rises("HEAD", "DIP"),
         "FALL": lambda p, m: falls("FALL", "HEAD")(p, m) and
                              m["HEAD"][-1]["px"] > m["LEFT"][-1]["px"],
         "RIGHT": lambda p, m: rises("RIGHT", "FALL")(p, m) and
                               p["px"] < m["HEAD"][-1]["px"],
         "BREAK": falls("BREAK", "RIGHT")},
        within="8 min", key="symbol", measures=head_and_shoulders)
    # a cent or two of noise is no chart pattern: keep the shapes of a dollar or more
    return bottoms.union(shoulders).where(lambda m: m["depth"] >= 1.0)


def at(ticks: int) -> str:
    """A time of the output (ticks are microseconds since the epoch, UTC), as a person reads it."""
    return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(microseconds=ticks)).strftime("%H:%M:%S")


def main() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers: this Python
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("chart-patterns")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    rows = ticks()
    late = sum(r["arrives"] - r["ts"] > dt.timedelta(minutes=1) for r in rows)
    with tempfile.TemporaryDirectory() as folder:
        files = write_arrivals(rows, folder)
        feed = (spark.readStream.schema("ts timestamp, symbol string, px double")
                .option("maxFilesPerTrigger", 1).parquet(folder))
        # a CTI every minute of ticks, four minutes behind the newest: a tick up to four
        # minutes late still counts (a later one would be dropped, and reported as late)
        source = Stream.from_spark(feed, start="ts", checkpoint=None,
                                   advance=AdvanceTime(interval=MINUTE, delay=4 * MINUTE))
        out = query(source).collect(runtime="inline")  # drop runtime=: on Ray
    spark.stop()

    first, last = min(r["ts"] for r in rows), max(r["ts"] for r in rows)
    print(f"{len(rows)} ticks of {', '.join(SYMBOLS)} on {first:%Y-%m-%d} from {first:%H:%M:%S} "
          f"to {last:%H:%M:%S} UTC,\nread as {files} files in the order they arrived: {late} "
          f"ticks came 2 to 3 minutes late\n")
    print("The matches (UTC, first tick to last):")
    for start, end, p in sorted(to_cht(out), key=lambda r: (r[0], r[2]["symbol"])):
        print(f"  {at(start)} - {at(end - 1)}  {p['symbol']:<8} {p['pattern']:<19} "
              f"{p['detail']}")
    print("\nACME's matches as cedar showed and corrected them, as the ticks came in:")
    for m in out:
        if isinstance(m, (Insert, Retract)) and m.payload["symbol"] == "ACME":
            what = "shown    " if isinstance(m, Insert) else "retracted"
            print(f"  {what} {at(m.start)} - {at(m.end - 1)}  {m.payload['pattern']:<19} "
                  f"{m.payload['detail']}")
    low, dip = (next(r for r in rows if r["symbol"] == symbol and r["ts"] == OPEN
                     + dt.timedelta(seconds=i * TICK_S + SYMBOLS.index(symbol)))
                for symbol, i in sorted(LATE))
    print(f"ACME's low of {low['ts']:%H:%M:%S} ({low['px']:.2f}) came at "
          f"{low['arrives']:%H:%M:%S}: until then there was no V, then a whole one.")
    print(f"Its dip of {dip['ts']:%H:%M:%S} ({dip['px']:.2f}) came at {dip['arrives']:%H:%M:%S}"
          f": the rise fell back there, so that was no V, and it was retracted.")


if __name__ == "__main__":
    main()
