"""``to_spark()`` and ``write()`` hide nothing either (issue #28, item 4): the DataFrame carries
its run's report as ``run_report``, ``write()`` returns it, and both warn on dead letters. Over
a streaming ``from_spark`` the report counts the rows of that run, and the run is committed only
once the DataFrame is made or the files are written (item 2): a write that fails commits
nothing and the next one writes those rows.
"""

from __future__ import annotations

import os
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from operators.events import Insert
from operators.ingress import AdvanceTime
from tests.reliability import assert_accounted
from tests.spark.test_spark_streaming import SCHEMA, write_file
from topology import Stream
from topology.running.inline import DeadLetterWarning, RunReport

pytestmark = pytest.mark.spark

#  None and "late" are dead letters; t=2 is late behind the CTI of t=9
ROWS = [{"t": 9, "v": 1}, {"t": None, "v": 2}, {"t": 2, "v": 3}, {"t": "late", "v": 4},
        {"t": 12, "v": 5}]


def _query() -> Stream:
    return Stream.from_rows(ROWS, start="t", advance=AdvanceTime(every=1)).select(
        lambda r: r["v"])


def _warned(said: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in said if issubclass(w.category, DeadLetterWarning)]


@pytest.mark.parametrize("runtime", ["inline", pytest.param("ray", marks=pytest.mark.ray)])
def test_to_spark_carries_its_runs_report_and_warns(spark, runtime, request) -> None:
    if runtime == "ray":
        request.getfixturevalue("ray_session")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        df = _query().to_spark(spark, runtime=runtime)
    assert sorted(r["value"] for r in df.collect()) == [1, 5]
    report = df.run_report
    assert isinstance(report, RunReport)
    assert sorted(d.item["v"] for d in report.dead_letters) == [2, 4]
    assert [x.item["v"] for x in report.late] == [3]
    [src] = report.accounting.values()
    assert_accounted(src)
    assert (src["received"], src["processed"], src["dropped"]) == (5, 2, 1)
    [text] = _warned(said)
    assert text.startswith("to_spark(): 2 inputs went to the dead letters")
    assert "to_spark(...).run_report.dead_letters" in text


def test_write_returns_its_runs_report_and_warns(spark, tmp_path) -> None:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        report = _query().write(str(tmp_path / "out"), spark=spark, runtime="inline")
    assert sorted(pq.read_table(tmp_path / "out").column("value").to_pylist()) == [1, 5]
    assert sorted(d.item["v"] for d in report.dead_letters) == [2, 4]
    assert report.equation() == ("from_rows#0: received 5 = processed 2 + dropped 1 + "
                                 "adjusted 0 + dead-lettered 2")
    [text] = _warned(said)
    assert text.startswith("write(): 2 inputs went to the dead letters")
    assert "write(...).dead_letters" in text


def _stream(spark, source: str):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)


def _with_null_time(folder, name: str, kwh: list[float], seconds: list[int | None]) -> None:
    table = pa.table({
        "ts": pa.array([None if s is None else 1_700_000_000_000_000 + s * 1_000_000
                        for s in seconds], pa.timestamp("us", tz="UTC")),
        "meter": ["m0"] * len(kwh), "kwh": kwh})
    tmp = os.path.join(folder, f".{name}")
    pq.write_table(table, tmp)
    stamp = 1_700_000_000 + len(os.listdir(folder))
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, os.path.join(folder, name))


def test_a_streaming_runs_report_counts_that_run_only(spark, tmp_path) -> None:
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    os.makedirs(source)
    _with_null_time(source, "a.parquet", [1.0, 2.0, 3.0], [0, None, 2])

    def run():
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            out = Stream.from_spark(_stream(spark, source), start="ts",
                                    checkpoint=checkpoint).collect(runtime="inline")
        return out, _warned(said)

    first, said = run()
    assert [d.item["kwh"] for d in first.dead_letters] == [2.0]
    assert first.accounting["spark"]["received"] == 3
    assert_accounted(first.accounting["spark"])
    assert len(said) == 1 and "in spark: the start time is missing (column 'ts')" in said[0]
    _with_null_time(source, "b.parquet", [4.0, 5.0], [None, 5])
    second, said = run()
    assert [m.payload["kwh"] for m in second if type(m) is Insert] == [5.0]
    assert [d.item["kwh"] for d in second.dead_letters] == [4.0]  # not the first run's
    assert {k: second.accounting["spark"][k] for k in ("received", "processed",
                                                       "dead_lettered")} == {
        "received": 2, "processed": 1, "dead_lettered": 1}
    assert len(said) == 1
    third, said = run()
    assert third == [] or all(type(m) is not Insert for m in third)
    assert third.dead_letters == [] and said == []


def test_a_failed_write_commits_nothing_and_the_next_one_writes_its_rows(spark,
                                                                          tmp_path) -> None:
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "checkpoint")
    os.makedirs(source)
    write_file(source, "a.parquet", [0, 1, 2], 0)
    write_file(source, "b.parquet", [3, 4], 3)
    out = tmp_path / "out"
    out.mkdir()  # mode="error": the write fails, after the query has taken every micro-batch

    def query() -> Stream:
        return Stream.from_spark(_stream(spark, source), start="ts",
                                 checkpoint=checkpoint).select(lambda r: r["kwh"])

    with pytest.raises(Exception, match="already exists"):
        query().write(str(out), spark=spark, runtime="inline")
    report = query().write(str(out), mode="overwrite", spark=spark, runtime="inline")
    assert sorted(pq.read_table(out).column("value").to_pylist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert report.accounting["spark"]["received"] == 5
    # committed now: a third run has nothing new to write
    assert query().to_spark(spark, runtime="inline").count() == 0
