"""A deployed query over a Spark stream stopped with a savepoint goes on where it stopped
(issue 39, item 2: "Sources that can resume (Spark streaming with its checkpoint ...)
continue exactly where the savepoint stopped").

    files:      f0 f1 ... f(k) | cut | f(k+1) ... f(n-1)   (one micro-batch each)
    1st run:    deploy ─ stop(savepoint=P): every micro-batch fed before the cut committed
    2nd run:    deploy(restore=P): the operators' state from P, the stream from its
                checkpoint, right after the cut
    output:     1st ∪ 2nd == one uninterrupted run (none lost, none twice)

The cut falls inside a micro-batch's feeding at most between two: the savepoint commits the
last micro-batch the feeder yielded (it was fed before the cut) and stops the Spark query, so
the next run neither skips nor repeats one. A checkpoint that read on after the savepoint
cannot go back: restoring that savepoint again is refused, saying so.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from operators.events import Insert
from operators.ingress import AdvanceTime
from tests.deploy.test_savepoint import assert_continued
from tests.spark.test_spark_streaming import SCHEMA, write_file
from topology import Stream, Sum

pytestmark = [pytest.mark.spark, pytest.mark.slow]
FILES = 12
PER_FILE = 5


def query(spark, source: str, checkpoint: str | None, trigger: dict | None = None) -> Stream:
    """stream ─ tumbling(10 s) sum of kwh per meter, emitted final ─ sink"""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
    return Stream.from_spark(df, start="ts", advance=AdvanceTime(every=PER_FILE),
                             checkpoint=checkpoint, trigger=trigger).group_apply(
        lambda r: r["meter"],
        lambda g: g.tumbling_window(10 * 1_000_000, emit="final").aggregate(Sum("kwh")))


def inserted(messages) -> Counter:
    return Counter((m.start, m.end, repr(m.payload)) for m in messages if type(m) is Insert)


def write_files(source: str, files: range) -> None:
    os.makedirs(source, exist_ok=True)
    for f in files:
        write_file(source, f"f{f:02}.parquet", [f * PER_FILE + i for i in range(PER_FILE)],
                   f * PER_FILE)


def wait_events(live, src: str, at: int) -> None:
    deadline = time.monotonic() + 120
    while live.stats()[src]["events_in"] < at:
        assert time.monotonic() < deadline, f"the stream never reached {at} events"
        time.sleep(0.05)


def test_a_spark_stream_stopped_with_a_savepoint_goes_on_where_it_stopped(
        spark, ray_session, tmp_path):
    source, point = str(tmp_path / "in"), str(tmp_path / "savepoint")
    stream_ckpt, ckpt = str(tmp_path / "stream"), str(tmp_path / "ckpt")
    write_files(source, range(FILES))
    expected = inserted(query(spark, source, None).collect(runtime="inline"))

    first = query(spark, source, stream_ckpt)
    [src] = first.plan().sources
    live = first.deploy("spark-sp", checkpoint_dir=ckpt)
    try:
        wait_events(live, src, FILES * PER_FILE // 3)
        record = live.stop(savepoint=point)
    except BaseException:
        live.stop()
        raise
    before = live.output()
    fed = record["positions"][src]
    assert fed["checkpoint"] == stream_ckpt and 0 < fed["last_batch_id"] < FILES - 1, fed

    again = query(spark, source, stream_ckpt).deploy("spark-sp", checkpoint_dir=ckpt,
                                                     restore=point)
    try:
        assert again.wait(120)
        after = again.output()
        took = again.stats()[src]["source"]  # counted from the first run's start
    finally:
        again.stop()
    assert_continued(before, after, expected)
    # each row reached the query once (a micro-batch read again: its ids dead-lettered)
    assert took["received"] - took["ctis"] == FILES * PER_FILE and took["dead_lettered"] == 0

    # the stream's checkpoint read on to its end since: the savepoint cannot go back there
    with pytest.raises(ValueError, match=rf"source '{src}' cannot resume .* has read "
                                         r"on to micro-batch 11 since the cut after "
                                         rf"micro-batch {fed['last_batch_id']} .*Restore the "
                                         r"savepoint taken last"):
        query(spark, source, stream_ckpt).deploy("spark-sp", checkpoint_dir=ckpt,
                                                 restore=point)


def test_a_quiet_spark_stream_is_cut_while_it_waits_for_data(spark, ray_session, tmp_path):
    """A stream that read all there is waits for more (a ``processingTime`` trigger); a
    savepoint does not wait for data to come: the cut is made while it waits, and the
    restored run reads only the files written since."""
    source, point = str(tmp_path / "in"), str(tmp_path / "savepoint")
    stream_ckpt, ckpt = str(tmp_path / "stream"), str(tmp_path / "ckpt")
    write_files(source, range(2))
    waiting = query(spark, source, stream_ckpt, {"processingTime": "0.2 seconds"})
    [src] = waiting.plan().sources
    live = waiting.deploy("spark-quiet", checkpoint_dir=ckpt)
    try:
        wait_events(live, src, 2 * PER_FILE)
        time.sleep(1.0)  # no more data: the stream waits
        began = time.monotonic()
        record = live.stop(savepoint=point, timeout_s=30)
        took_s = time.monotonic() - began
    except BaseException:
        live.stop()
        raise
    before = live.output()
    assert record["positions"][src]["last_batch_id"] == 1 and took_s < 25, (record, took_s)
    write_files(source, range(2, 4))
    again = query(spark, source, stream_ckpt).deploy("spark-quiet", checkpoint_dir=ckpt,
                                                     restore=point)
    try:
        assert again.wait(120)
        after, took = again.output(), again.stats()[src]["source"]
    finally:
        again.stop()
    expected = inserted(query(spark, source, None).collect(runtime="inline"))
    assert inserted(before) + inserted(after) == expected
    assert took["received"] - took["ctis"] == 4 * PER_FILE and took["dead_lettered"] == 0
