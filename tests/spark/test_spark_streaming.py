"""The streaming Spark source: micro-batches from a parquet directory into one Ingress.

The messages delivered across micro-batches, restarts and replays must be exactly the
messages ``operators.ingress.ingest`` makes of all rows in one go: same ids, same CTIs, same
late handling, nothing twice.
"""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from operators.cht import to_cht
from operators.events import Cti, Insert
from operators.ingress import AdvanceTime, ingest, to_ticks
from topology.spark.sink import FinalRowsSink
from topology.spark.source import SparkStreamFeeder

T0 = dt.datetime(2024, 3, 1, tzinfo=dt.UTC)
S = 1_000_000
SCHEMA = "ts timestamp, meter string, kwh double"


def write_file(directory: str, name: str, seconds: list[int], first: int) -> list[dict]:
    """One parquet file of readings; returns its rows as the Ingress will see them. The file
    source reads files oldest first, so each file is dated one second after the last one."""
    rows = [{"ts": to_ticks(T0) + s * S, "meter": f"m{(first + i) % 2}", "kwh": float(first + i)}
            for i, s in enumerate(seconds)]
    table = pa.table({
        "ts": pa.array([T0 + dt.timedelta(seconds=s) for s in seconds],
                       pa.timestamp("us", tz="UTC")),
        "meter": [r["meter"] for r in rows], "kwh": [r["kwh"] for r in rows]})
    tmp = os.path.join(directory, f".{name}")
    pq.write_table(table, tmp)
    stamp = 1_700_000_000 + len(os.listdir(directory))
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, os.path.join(directory, name))  # the file source must not see half a file
    return rows


@pytest.mark.spark
def test_micro_batches_replays_and_restart_make_one_stream(spark, tmp_path) -> None:
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    os.makedirs(source)
    advance = AdvanceTime(every=2)
    # micro-batch:  0: file a          1: file b           2: file c (after the restart)
    # ts:           0s 3s      1s      2s   5s 4s          6s 9s
    # CTIs:            Cti(3s) late    late    Cti(5s)        Cti(9s)    end: Cti(9s + 1)
    rows = write_file(source, "a.parquet", [0, 3, 1], 0)
    rows += write_file(source, "b.parquet", [2, 5, 4], 3)
    got: list = []

    def stream() -> object:
        return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                .parquet(source))

    feeder = SparkStreamFeeder(stream(), start="ts", advance=advance, on_messages=got.extend,
                               checkpoint_location=checkpoint)
    feeder.start(trigger={"availableNow": True})
    feeder.await_termination()
    assert feeder.batches == 2 and feeder.last_batch_id == 1  # one micro-batch per file
    first_run = list(got)
    assert first_run == ingest(rows, start="ts", advance=advance, name="spark")[:-1]
    assert any(type(m) is Cti for m in first_run)

    # foreachBatch is at-least-once: a replayed batch id is skipped (no Spark job runs)
    feeder.process_batch(None, 1)  # type: ignore[arg-type]
    assert feeder.replayed == 1 and got == first_run

    # "crash" before Spark committed batch 1: Spark replays it on restart; a new feeder on
    # the same checkpoint resumes the Ingress and skips the replay, then reads file c.
    for name in ("1", ".1.crc"):
        path = os.path.join(checkpoint, "commits", name)
        if os.path.exists(path):
            os.remove(path)
    rows += write_file(source, "c.parquet", [6, 9], 6)
    resumed = SparkStreamFeeder(stream(), start="ts", advance=advance, on_messages=got.extend,
                                checkpoint_location=checkpoint)
    assert resumed.last_batch_id == 1 and resumed.ingress.stats["received"] == 6
    resumed.start(trigger={"availableNow": True})
    resumed.await_termination()
    assert resumed.replayed == 1 and resumed.batches == 1
    resumed.end()

    # the whole thing is the stream from_rows would make of all rows at once
    expected = ingest(rows, start="ts", advance=advance, name="spark")
    assert got == expected
    assert [m.id for m in got if type(m) is Insert] == list(range(6))
    assert resumed.ingress.stats["dropped"] == len(resumed.ingress.late) == 2

    # and a streaming sink downstream writes its rows exactly once
    sink = FinalRowsSink(None, str(tmp_path / "out"))
    sink.on_messages(got)
    sink.end()
    out = spark.read.parquet(str(tmp_path / "out")).toArrow()
    assert sorted(out.column("kwh").to_pylist()) == sorted(p["kwh"] for _, _, p in to_cht(got))


@pytest.mark.spark
def test_feeder_refuses_a_batch_dataframe(spark) -> None:
    with pytest.raises(ValueError, match="streaming DataFrame"):
        SparkStreamFeeder(spark.range(3), start="id")
