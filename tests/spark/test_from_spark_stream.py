"""``Stream.from_spark`` over a streaming DataFrame: one source, exactly once across runs.

Each ``collect()`` over the same ``checkpoint=`` continues the stream where the last run over
it stopped (Spark's offsets, the feeder's Ingress state and batch id): the runs together
deliver exactly the events one run over all the input delivers, even when a run fails
half-way.
"""

from __future__ import annotations

import os

import pytest

from operators.cht import to_cht
from operators.events import Insert
from operators.ingress import AdvanceTime, ingest
from tests.spark.test_spark_streaming import SCHEMA, write_file
from topology import Stream
from topology.spark.source import stream_records

pytestmark = pytest.mark.spark
ADVANCE = AdvanceTime(every=2)


def _stream(spark, source: str, schema: str = SCHEMA):
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)


def _inserts(messages: list) -> list:
    return [m for m in messages if type(m) is Insert]


def test_runs_over_one_checkpoint_continue_the_stream(spark, tmp_path) -> None:
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    os.makedirs(source)
    # file a: 0s 3s 1s (1s is late behind Cti(3s)); file b: 2s (late) 5s 4s; then file c
    rows = write_file(source, "a.parquet", [0, 3, 1], 0)
    rows += write_file(source, "b.parquet", [2, 5, 4], 3)

    def run() -> list:
        src = Stream.from_spark(_stream(spark, source), start="ts", advance=ADVANCE,
                                checkpoint=checkpoint)
        return src.select(lambda r: r["kwh"]).collect(runtime="inline")

    first = run()
    rows += write_file(source, "c.parquet", [6, 7, 9], 6)
    second = run()
    assert _inserts(run()) == []  # nothing new: a third run delivers no event

    # the second run delivers exactly the new events, with ids that continue the stream
    assert sorted(p for _, _, p in to_cht(second)) == [6.0, 7.0, 8.0]
    assert [m.id for m in _inserts(first + second)] == list(range(7))
    # together the runs are one run over all files (here with no restart state at all)
    whole = Stream.from_spark(_stream(spark, source), start="ts", advance=ADVANCE,
                              checkpoint=None).select(lambda r: r["kwh"]).collect(
                                  runtime="inline")
    assert sorted(to_cht(first) + to_cht(second)) == sorted(to_cht(whole))
    assert _inserts(first + second) == _inserts(whole)
    expected = [m for m in ingest(rows, start="ts", advance=ADVANCE) if type(m) is Insert]
    assert [m.payload["kwh"] for m in expected] == [m.payload for m in _inserts(whole)]
    records = stream_records(checkpoint)
    assert records["last_batch_id"] == 2 and records["stats"]["received"] == 9
    assert len(records["late"]) == 2

    # schema drift across a restart: refused, naming the column
    drifted = SCHEMA.replace("kwh double", "kwh string")
    with pytest.raises(ValueError, match=r"'kwh' was double, is now string"):
        Stream.from_spark(_stream(spark, source, drifted), start="ts", checkpoint=checkpoint)


def test_a_failed_run_is_delivered_again_whole_with_no_duplicate_and_no_gap(spark,
                                                                             tmp_path) -> None:
    """A run that fails delivers nothing to its caller (``collect()`` raises), so none of
    its micro-batches may count as delivered: Spark committed micro-batch 0 before the query
    failed in micro-batch 1, and the next run still delivers file a (issue #28, item 2)."""
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    os.makedirs(source)
    rows = write_file(source, "a.parquet", [0, 1, 2], 0)
    rows += write_file(source, "b.parquet", [3, 4, 5], 3)
    rows += write_file(source, "c.parquet", [6, 7], 6)
    seen: list[float] = []

    def query(fail_at: float | None) -> Stream:
        def record(r: dict) -> float:
            if r["kwh"] == fail_at:
                raise RuntimeError("the query fails on purpose")
            seen.append(r["kwh"])
            return r["kwh"]

        src = Stream.from_spark(_stream(spark, source), start="ts", advance=ADVANCE,
                                checkpoint=checkpoint)
        return src.select(record)

    with pytest.raises(RuntimeError, match="on purpose"):
        query(fail_at=3.0).collect(runtime="inline")  # fails in micro-batch 1 (file b)
    assert seen == [0.0, 1.0, 2.0]
    # Spark and the feeder went past micro-batch 0; the run is not committed
    assert stream_records(checkpoint)["last_batch_id"] == 0
    assert os.listdir(os.path.join(checkpoint, "cedar_run")) == ["0.pkl"]

    seen.clear()
    out = query(fail_at=None).collect(runtime="inline")
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # file a again, then b and c
    whole = ingest(rows, start="ts", advance=ADVANCE)
    assert _inserts(out) == [m._replace(payload=m.payload["kwh"]) for m in _inserts(whole)]
    assert stream_records(checkpoint)["last_batch_id"] == 2
    assert not os.path.exists(os.path.join(checkpoint, "cedar_run"))  # committed: log gone
    seen.clear()
    assert _inserts(query(fail_at=None).collect(runtime="inline")) == [] and seen == []


def test_a_run_killed_after_its_commit_leaves_no_log_behind(spark, tmp_path,
                                                            monkeypatch) -> None:
    """A run committed, and killed before its micro-batch log was deleted, left the log's
    files behind: never replayed (the state says no run is held) and never deleted, next to
    the next run's log. The next run now starts by deleting every log file that no held run
    replays (issue #41, item 3)."""
    import topology.spark.checkpoint as stream_files

    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    log = os.path.join(checkpoint, "cedar_run")
    os.makedirs(source)
    write_file(source, "a.parquet", [0, 1, 2], 0)

    def run(fail: bool = False) -> list:
        def record(r: dict) -> float:
            if fail and r["kwh"] >= 6:
                raise RuntimeError("the query fails on purpose")
            return r["kwh"]

        src = Stream.from_spark(_stream(spark, source), start="ts", advance=ADVANCE,
                                checkpoint=checkpoint)
        return src.select(record).collect(runtime="inline")

    with monkeypatch.context() as m:  # killed right after the commit: nothing deleted
        m.setattr(stream_files, "delete_dir", lambda location: None)
        first = run()
    assert [i.payload for i in _inserts(first)] == [0.0, 1.0, 2.0]
    assert stream_records(checkpoint)["last_batch_id"] == 0
    write_file(source, "b.parquet", [3, 4, 5], 3)
    write_file(source, "c.parquet", [6, 7, 8], 6)
    with pytest.raises(RuntimeError, match="on purpose"):
        run(fail=True)  # held: micro-batch 1 logged, fails in 2, the run not committed
    assert sorted(os.listdir(log)) == ["1.pkl"]  # not run 1's 0.pkl beside it
    assert [i.payload for i in _inserts(run())] == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]


def test_a_streaming_dataframe_needs_a_checkpoint(spark, tmp_path) -> None:
    df = _stream(spark, str(tmp_path))
    with pytest.raises(ValueError, match=r"needs checkpoint=PATH.*checkpoint=None explicitly"):
        Stream.from_spark(df, start="ts")
    with pytest.raises(ValueError, match="checkpoint= is for streaming DataFrames"):
        Stream.from_spark(spark.range(3), start="id", checkpoint=str(tmp_path / "c"))
    text = spark.readStream.schema("ts string, v int").parquet(str(tmp_path))
    with pytest.raises(TypeError, match=r"start column 'ts' is string"):
        Stream.from_spark(text, start="ts", checkpoint=None)
    with pytest.raises(ValueError, match=r"start='t' is not a column"):
        Stream.from_spark(df, start="t", checkpoint=None)


def test_a_null_time_is_a_dead_letter_naming_the_column(spark, tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    source.mkdir()
    pq.write_table(pa.table({
        "ts": pa.array([1_000_000, None, 3_000_000], pa.timestamp("us", tz="UTC")),
        "meter": ["m0", "m1", "m0"], "kwh": [1.0, 2.0, 3.0]}), source / "a.parquet")
    out = Stream.from_spark(_stream(spark, str(source)), start="ts",
                            checkpoint=checkpoint).collect(runtime="inline")
    assert [m.payload["kwh"] for m in _inserts(out)] == [1.0, 3.0]
    [dead] = stream_records(checkpoint)["dead_letters"]
    assert dead.item["kwh"] == 2.0
    assert "start time is missing (column 'ts')" in dead.reason
