"""The late stream goes to a Spark sink like any stream: ``src.late().to_spark()`` and
``.write()`` hold exactly the late rows, with their original times, policy and row."""

from __future__ import annotations

import datetime as dt

from operators.ingress import AdvanceTime
from topology import Stream

ROWS = [{"t": 10, "e": 20}, {"t": 2, "e": 3}, {"t": 4, "e": 15}, {"t": 12, "e": 14}]
#   CTI 10 after the first row; [2, 3) dropped; [4, 15) adjusted to [10, 15)


def _late():
    src = Stream.from_rows(ROWS, start="t", end="e", shape="interval",
                           advance=AdvanceTime(every=1, policy="adjust"), name="meters")
    return src.late().select(lambda p: {"policy": p["policy"], "source": p["source"],
                                        "t": p["payload"]["t"], "e": p["payload"]["e"]})


def _us(n):
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=n)


def _rows(df):
    return sorted((r["policy"], r["source"], r["t"], r["e"], r["start"], r["end"])
                  for r in df.collect())


EXPECTED = [("adjusted", "meters", 4, 15), ("dropped", "meters", 2, 3)]


def test_the_late_stream_to_spark_and_write(spark, tmp_path):
    got = _rows(_late().to_spark(spark, runtime="inline"))
    assert [g[:4] for g in got] == EXPECTED
    # start and end: the rows' original times (ticks are microseconds since the epoch)
    assert [(g[4], g[5]) for g in got] == [(_us(g[2]), _us(g[3])) for g in got]
    _late().write(str(tmp_path / "late"), spark=spark, runtime="inline")
    assert [g[:4] for g in _rows(spark.read.parquet(str(tmp_path / "late")))] == EXPECTED
