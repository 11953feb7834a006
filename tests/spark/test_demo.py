"""``cedar demo``, the main job, end to end on the session's Ray and Spark (small size)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from topology.app.cli import main


def generate_readings(meters: int, minutes: int) -> list:
    from topology.app.demo import generate

    return generate(meters=meters, minutes=minutes).readings


@pytest.mark.ray
@pytest.mark.spark
def test_demo_runs_end_to_end(ray_session, spark, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--meters", "4", "--minutes", "12", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "readings/s" in text and "5 queries started together" in text
    # the progress counts the table's rows once, not once per query that reads it
    readings = len(generate_readings(4, 12))
    assert f"{readings:,}/{readings:,} readings" in captured.err
    for name in ("meter_averages", "anomalies", "regional_load", "peaks", "faults"):
        assert name in text
    # start-up apart from the run, no library chatter, and where to go next
    assert "start-up before that" in text and "actors" in text
    assert not [line for line in text.splitlines() if "WARNING" in line or "WARN " in line]
    assert "what to try next" in text and "cedar why NAME" in text
    assert (out / "meter-readings.svg").exists() and (out / "spark.log").exists()
    # the queries run fused (a chain of single-input steps in one actor): fewer actors
    # than one per step
    import re

    from topology.app.demo import generate, queries

    data = generate(meters=4, minutes=12)
    df = spark.read.parquet(str(out / "input" / "readings.parquet"))
    steps = sum(len(q.plan(False).stages) for q in queries(df, data).values())
    actors = int(re.search(r"starting the queries' (\d+) actors", text).group(1))
    assert actors < steps, (actors, steps)
    averages = pq.read_table(out / "meter_averages").to_pylist()
    assert averages and {"start", "end", "key", "value"} <= set(averages[0])
    assert all(0 < r["value"] < 10 for r in averages)
    # a reading's ts, read as a time, is written back as one (not 16-digit ticks)
    anomalies = pq.read_table(out / "anomalies")
    assert anomalies.num_rows and str(anomalies.schema.field("ts").type).startswith("timestamp")


def _spark_sources(node):
    found = [node.rows] if getattr(node, "feed", None) == "driver" else []
    for child in node.inputs:
        found += _spark_sources(child)
    for sub in (getattr(node, "sub", None),):
        if sub is not None:
            found += _spark_sources(sub)
    return found


@pytest.mark.spark
def test_the_reading_queries_share_one_read_of_the_table(spark):
    from topology.app.demo import generate, queries

    data = generate(meters=2, minutes=2)
    df = spark.createDataFrame([r for r in data.readings if r["ts"] is not None])
    reads = {name: _spark_sources(q._node) for name, q in queries(df, data).items()}
    assert reads["faults"] == []
    sources = [r for name, found in reads.items() if name != "faults" for r in found]
    assert len(sources) == 4
    # one from_spark source for all four: started together, Spark reads and sorts once
    assert all(s is sources[0] for s in sources)


@pytest.mark.spark
def test_the_demo_table_is_read_without_a_spark_job(spark, tmp_path):
    # the readings, written by Spark as the demo writes them, are read in time order by
    # pyarrow (their row groups merged): the demo's processing window runs no Spark job
    import pyarrow as pa

    from topology.app.demo import generate, write_readings
    from topology.spark import source as spark_source

    data = generate(meters=3, minutes=10)
    df = write_readings(spark, data, str(tmp_path / "readings.parquet"))
    sc = spark.sparkContext
    sc.setJobGroup("cedar-demo-read", "the demo's read")
    watch: dict = {}
    got = pa.Table.from_batches(list(spark_source.ordered_record_batches(df, "ts",
                                                                         watch=watch)))
    jobs = list(sc.statusTracker().getJobIdsForGroup("cedar-demo-read"))
    sc.setJobGroup("other", "")
    assert watch["path"] == "direct" and jobs == []
    times = [r["ts"] for r in data.readings]
    nulls = times.count(None)
    ticks = got["ts"].cast(pa.int64()).to_pylist()  # (a UTC timestamp column: µs)
    assert ticks == [None] * nulls + sorted(t for t in times if t is not None)
