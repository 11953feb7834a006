"""Per-key progress from Spark: a streaming DataFrame (micro-batch by micro-batch) and a batch
one go through a source with ``AdvanceTime(per_key=...)`` into a ``group_apply`` by the same
key; a meter whose clock is 10 s behind loses nothing, where one CTI drops its readings."""

from __future__ import annotations

import os

import pytest

from operators.aggregates import Count
from operators.cht import to_cht
from operators.events import KeyCtis
from operators.ingress import AdvanceTime
from tests.spark.test_spark_streaming import SCHEMA, write_file
from topology import Stream

pytestmark = pytest.mark.spark
PER_KEY = AdvanceTime(every=1, per_key="meter", low_watermark="1 min")
ONE = AdvanceTime(every=1)


def _counts(src):
    out = src.group_apply("meter", lambda g: g.tumbling_window("5 s").aggregate(Count())).collect(
        runtime="inline")
    assert not any(type(m) is KeyCtis for m in out) and not out.dead_letters
    return out, sum(n for _, _, (_, n) in to_cht(out))


@pytest.mark.slow  # ~6 s (the default tier keeps its budget)
def test_a_streaming_meter_behind_loses_nothing_with_per_key(spark, tmp_path):
    source = str(tmp_path / "in")
    os.makedirs(source)
    # meters alternate m0, m1; m1's clock is 10 s behind m0's
    rows = write_file(source, "a.parquet", [10, 0, 11, 1, 12, 2], 0)
    rows += write_file(source, "b.parquet", [13, 3, 14, 4], 6)
    for advance, late in ((ONE, 5), (PER_KEY, 0)):
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
        out, total = _counts(Stream.from_spark(df, start="ts", advance=advance,
                                                checkpoint=None))
        assert (len(out.late), total) == (late, len(rows) - late)
        if late:
            assert {r.item["meter"] for r in out.late} == {"m1"}


def test_a_batch_dataframe_with_per_key(spark):
    import datetime as dt

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    data = [(t0 + dt.timedelta(seconds=s), m, 1.0) for s, m in
            [(10, "m0"), (0, "m1"), (11, "m0"), (1, "m1"), (30, "m0")]]
    df = spark.createDataFrame(data, SCHEMA)
    out, total = _counts(Stream.from_spark(df, start="ts", advance=PER_KEY))
    assert (len(out.late), total) == (0, 5)
