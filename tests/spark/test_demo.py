"""``cedar demo``, the main job, end to end on the session's Ray and Spark (small size)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from topology.cli import main


@pytest.mark.ray
@pytest.mark.spark
def test_demo_runs_end_to_end(ray_session, spark, tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--meters", "4", "--minutes", "12", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "events/s" in text
    for name in ("meter_averages", "anomalies", "regional_load", "peaks", "faults"):
        assert name in text
    # start-up apart from the run, no library chatter, and where to go next
    assert "start-up before that" in text and "actors" in text
    assert not [line for line in text.splitlines() if "WARNING" in line or "WARN " in line]
    assert "what to try next" in text and "cedar why NAME" in text
    assert (out / "meter-readings.svg").exists() and (out / "spark.log").exists()
    averages = pq.read_table(out / "meter_averages").to_pylist()
    assert averages and {"start", "end", "key", "value"} <= set(averages[0])
    assert all(0 < r["value"] < 10 for r in averages)
