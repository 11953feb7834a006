"""``cedar demo`` tells the truth and leaves something to look at (issue 41, item 11): its
late readings never make windows before the data starts, its summary counts rows once, the
root cause and the window pictures trace the anomaly the main picture shows, and ``--keep``
leaves its queries running on a live feed where late readings are late and times read as
times."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from topology.app.demo import EPOCH_TICKS, LATE_BY_TICKS, DemoData, generate, print_summary


def test_late_readings_never_fall_before_the_data_starts():
    # a reading taken 20 minutes before it arrived, chosen among the first 20 minutes' ones,
    # made 5-minute windows of 23:4x on the day before the data (17 readings did)
    data = generate()
    times = [r["ts"] for r in data.readings if r["ts"] is not None]
    assert min(times) >= EPOCH_TICKS
    assert data.late == len(data.readings) // 400
    # ... and they are there: that many readings arrive 20 minutes behind those before them
    # (the skewed meter's, 10 minutes behind by its clock, are counted in test_demo_per_key)
    latest, behind = EPOCH_TICKS, 0
    for t in (r["ts"] for r in data.readings if r["ts"] is not None
              and r["meter"] != data.skewed):
        behind += t < latest - LATE_BY_TICKS // 2
        latest = max(latest, t)
    assert behind == data.late


def _summary(late: int) -> list[dict]:
    reading = {"late": late, "dead_letters": 7}
    return [{"output": n, "rows": 100 + i, "path": f"out/{n}", **(
        reading if n != "faults" else {"late": 0, "dead_letters": 0})}
        for i, n in enumerate(["meter_averages", "anomalies", "regional_load", "peaks",
                               "faults"])]


def test_the_summary_counts_rows_once_and_says_why_none_is_late(capsys):
    data = DemoData([{"meter": "m000", "ts": None if i < 7 else EPOCH_TICKS + i, "kwh": 1.0}
                     for i in range(14_400)], [{}] * 24, [], late=36)
    from topology.app.demo import Startup

    print_summary(_summary(late=0), data, 2.0,
                  Startup(14.2, 7.1, 3, " (their 13 stages in 3 step hosts)"))
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100, text
    # rows, queries and the time from start to results; no per-query event counts
    assert "14,400 readings" in text and "24 meter-state edges" in text
    assert "5 queries" in text and "2.0 s after the start" in text and "events" not in text
    # the 7 broken readings said once, not once per query
    sevens = re.findall(r"(?<![\d,.])7(?![\d,.])", text)
    assert len(sevens) == 2, text  # "7 without a time", "(7 reported by each ...)"
    assert "dead letters" not in text.split("query")[-1]  # no per-query column of them
    # why the late column would read 0
    assert "36 taken 20 min before they arrived" in text and "cedar demo --keep" in text
    print_summary(_summary(late=36), data, 2.0)
    assert "36 late: dropped and recorded" in capsys.readouterr().out


def test_the_root_cause_and_the_window_pictures_trace_the_main_pictures_anomaly(tmp_path):
    pytest.importorskip("matplotlib")
    from topology import Stream, to_cht
    from topology.app.demo import SpikeDetector, explain
    from topology.app.demo_data import readings_advance
    from topology.app.demo_pictures import first_anomaly, meter_picture

    data = generate()
    minute = 60_000_000
    rows = sorted((r for r in data.readings if r["ts"] is not None), key=lambda r: r["ts"])
    anomalies = to_cht(Stream.from_rows(rows, start="ts", advance=readings_advance()).group_apply(
        lambda r: r["meter"], lambda g: g.hopping_window(5 * minute, minute)
        .apply(SpikeDetector())).collect("inline"))
    main_meter = meter_picture(data.readings, [], anomalies, str(tmp_path / "main.svg"))
    meter, ts = first_anomaly(anomalies)
    assert main_meter == meter == "m031"  # (the root cause traced m000's blip)
    written = explain(data, str(tmp_path), anomalies)
    assert f"{meter} 5-minute windows" in written
    cause = Path(written["anomaly root cause (text)"]).read_text(encoding="utf-8")
    marked = [line for line in cause.splitlines() if "   <== " in line]
    assert len(marked) == 1 and "'ts': 2026-01-01T00:00:20.697914Z," in marked[0]
    assert not re.search(r"'ts': \d{13}", cause)  # the readings' times as times, not ticks
    assert marked[0].lstrip().startswith("readings  insert")
    kwh = next(r["kwh"] for r in rows if r["ts"] == ts)
    assert f"{kwh:.2f} kWh at 2026-01-01T00:00:20" in marked[0]
    assert cause.startswith(f"The anomaly the picture meter-readings.svg marks: meter {meter}")
    for label, path in written.items():
        if path.endswith(".svg"):
            svg = Path(path).read_text(encoding="utf-8")
            assert 'id="anomaly-reading-0"' in svg and 'id="anomaly-reading-label"' in svg, label
            assert "the anomaly: " in svg and "00:00:20" in svg


@pytest.mark.ray
def test_keep_leaves_the_queries_running_live_with_times_and_late_readings(ray_session,
                                                                             capsys):
    import ray

    from topology.app.cli import main
    from topology.app.demo_live import keep_live, keep_running, print_kept
    from topology.running.step_hosts import StepHosts

    with StepHosts(count=2, capacity=16, name="keep-test") as hosts:
        kept = keep_live(meters=8, speed=1200, hosts=hosts)  # 20 minutes of readings a second
        waiter = threading.Thread(target=keep_running, args=(kept, 0.2), daemon=True)
        try:
            assert sorted(kept) == ["demo-anomalies", "demo-meter_averages", "demo-peaks",
                                    "demo-regional_load"]
            print_kept(kept, 1200, 8)
            said = capsys.readouterr().out
            address = ray.get_runtime_context().gcs_address
            for name in kept:
                assert name in said
            assert f"cedar ui --address {address}" in said and "http://127.0.0.1:8766/" in said
            assert f"cedar stop NAME --address {address}" in said
            assert max(len(line) for line in said.splitlines()) <= 100
            # late readings are late on a live feed (the batch table sorts them in)
            deadline = time.monotonic() + 90
            while not all(q.late() and q.dead_letters() for q in kept.values()) \
                    and time.monotonic() < deadline:
                time.sleep(0.5)
            counts = {n: (len(q.late()), len(q.dead_letters()), q.state())
                      for n, q in kept.items()}
            assert all(late and dead for late, dead, _ in counts.values()), counts
            # times, not ticks
            assert main(["inspect", "demo-anomalies", "--address", address]) == 0
            shown = capsys.readouterr().out
            assert re.search(r"2026-01-01T\d\d:\d\d:\d\dZ", shown) and "times in UTC" in shown
            assert not re.search(r"\b17672\d{11}\b\s", shown.split("snapshot")[0])
            waiter.start()
            for name in kept:
                assert main(["stop", name, "--address", address]) == 0
            waiter.join(timeout=30)
            assert not waiter.is_alive()  # the demo ends once its queries are stopped
        finally:
            for q in kept.values():
                q.stop()


def test_the_demo_hides_only_the_refused_calls_of_steps_it_stopped(monkeypatch):
    # `cedar stop NAME` while the demo feeds NAME: each push in flight met a freed slot, and
    # Ray printed a traceback for each of dozens of them on the demo's terminal
    from ray._private import worker
    from ray.exceptions import RayActorError

    from topology.app.demo_live import without_stopped_step_errors

    seen: list = []
    monkeypatch.setattr(worker, "_unhandled_error_handler", seen.append)
    restore = without_stopped_step_errors()
    slot_gone = RuntimeError("ray::StepHost.push() ... actors.step_host.SlotGone: slot 3 of "
                             "this step host was freed: its step was stopped")
    other = ValueError("a step raised")
    for e in (slot_gone, RayActorError(), other):
        worker._unhandled_error_handler(e)
    assert seen == [other]
    restore()
    worker._unhandled_error_handler(slot_gone)
    assert seen == [other, slot_gone]
