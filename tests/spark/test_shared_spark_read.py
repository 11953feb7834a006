"""Queries built on one from_spark stream and running at the same time make Spark read and
sort the table once (topology/building/shared_read.py); each still gets the whole table in order."""

from __future__ import annotations

import pytest

from topology import Stream


def _spark_jobs(spark, group):
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.spark
def test_two_readers_of_one_from_spark_stream_share_one_spark_read(spark):
    rows = [{"k": i % 3, "ts": (i * 7919) % 1000} for i in range(1000)]
    df = spark.createDataFrame(rows).repartition(3)
    sc = spark.sparkContext

    def read(stream, readers):
        feed = stream._node.rows  # what the driver feeds the source actor from
        its = [iter(feed) for _ in range(readers)]
        got = [[] for _ in its]
        live = list(range(len(its)))
        while live:  # one batch of each in turn, as collect() feeds its sources
            for i in list(live):
                try:
                    got[i].append(next(its[i]))
                except StopIteration:
                    live.remove(i)
        return [[int(t) for b in g for t in b["ts"]] for g in got]  # column batches

    sc.setJobGroup("one-reader", "one reader")
    (alone,) = read(Stream.from_spark(df, start="ts", name="source"), 1)
    sc.setJobGroup("two-readers", "two readers at once")
    both = read(Stream.from_spark(df, start="ts", name="source"), 2)
    sc.setLocalProperty("spark.jobGroup.id", None)
    assert alone == sorted(r["ts"] for r in rows)
    assert both == [alone, alone]
    assert _spark_jobs(spark, "two-readers") == _spark_jobs(spark, "one-reader") > 0
