"""The demo's meter picture: one meter's readings as a line, its window averages as steps,
the anomalies marked, on a time axis that reads as times. Read back from the SVG's ids."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("matplotlib")

from topology.app.demo import EPOCH_TICKS, TICKS_PER_S
from topology.app.demo_pictures import meter_picture

MINUTE = 60 * TICKS_PER_S
SVG = "{http://www.w3.org/2000/svg}"


def _groups(path):
    root = ET.parse(path).getroot()
    ids = [g.get("id") for g in root.iter(f"{SVG}g") if g.get("id")]
    assert len(ids) == len(set(ids)), f"an id drawn twice: {sorted(ids)}"
    return root, {g.get("id"): g for g in root.iter(f"{SVG}g") if g.get("id")}


def _marks(group):
    """The markers drawn in a group: matplotlib writes a marker shape once (in defs) and
    a ``use`` per point, or, for a single point, the shape's path itself."""
    uses = list(group.iter(f"{SVG}use"))
    if uses:
        return len(uses)
    defs = {id(p) for d in group.iter(f"{SVG}defs") for p in d.iter(f"{SVG}path")}
    return sum(1 for p in group.iter(f"{SVG}path") if id(p) not in defs)


def _texts(root):
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_one_meter_drawn_as_a_person_reads_it(tmp_path):
    #   m001: a reading every 10 s for 20 minutes at 0.5 kWh, one spike of 4 kWh at 00:12:30
    #   averages:  [00:00, 00:05) 0.5  [00:05, 00:10) 0.5  [00:10, 00:15) 0.6  [00:15, 00:20) 0.5
    #   anomaly:   the spike, judged in the hopping window [00:10, 00:15)
    #   m002 (another meter): never drawn
    spike = EPOCH_TICKS + 12 * MINUTE + 30 * TICKS_PER_S
    readings = [{"meter": m, "ts": EPOCH_TICKS + i * 10 * TICKS_PER_S,
                 "kwh": 4.0 if (m == "m001" and EPOCH_TICKS + i * 10 * TICKS_PER_S == spike)
                 else 0.5} for i in range(120) for m in ("m001", "m002")]
    readings.append({"meter": "m001", "ts": None, "kwh": 9.9})  # a broken reading: skipped
    averages = [(EPOCH_TICKS + k * 5 * MINUTE, EPOCH_TICKS + (k + 1) * 5 * MINUTE,
                 (m, 0.6 if k == 2 and m == "m001" else 0.5))
                for k in range(4) for m in ("m001", "m002")]
    anomalies = [(EPOCH_TICKS + 10 * MINUTE, EPOCH_TICKS + 15 * MINUTE,
                  ("m001", {"ts": spike, "kwh": 4.0, "mean": 0.6})),
                 (EPOCH_TICKS + 11 * MINUTE, EPOCH_TICKS + 16 * MINUTE,
                  ("m001", {"ts": spike, "kwh": 4.0, "mean": 0.58}))]  # same spike, next window
    path = tmp_path / "meter.svg"
    assert meter_picture(readings, averages, anomalies, str(path)) == "m001"
    root, groups = _groups(path)
    assert {"readings", "window-averages", "anomalies", "anomaly-window",
            "anomaly-label-0"} <= set(groups)
    # the line: one marker per reading of m001 with a time (120), none of m002
    assert _marks(groups["readings"]) == 120
    # the anomaly: marked once (two windows judged the same reading), labelled with its time
    assert _marks(groups["anomalies"]) == 1
    texts = _texts(root)
    assert "00:12:30  4.00 kWh\n(window mean 0.60)" in "\n".join(texts)
    # the time axis reads as times of day, never ticks or offsets
    assert {"00:00", "00:10", "00:20"} <= set(texts)
    assert "time (UTC)" in texts and any("meter m001, 2026-01-01 (UTC)" in t for t in texts)
    assert not any(re.search(r"\d{9,}|1e\d|\+1\.7", t) for t in texts)


def test_the_window_averages_are_steps_over_their_windows(tmp_path):
    #   two 5-minute windows: the step line holds each average flat from its start to its end
    readings = [{"meter": "m", "ts": EPOCH_TICKS + i * 10 * TICKS_PER_S, "kwh": 1.0}
                for i in range(60)]
    averages = [(EPOCH_TICKS, EPOCH_TICKS + 5 * MINUTE, ("m", 1.0)),
                (EPOCH_TICKS + 5 * MINUTE, EPOCH_TICKS + 10 * MINUTE, ("m", 2.0))]
    path = tmp_path / "steps.svg"
    assert meter_picture(readings, averages, [], str(path), meter="m") == "m"
    _, groups = _groups(path)
    d = next(groups["window-averages"].iter(f"{SVG}path")).get("d")
    points = [tuple(map(float, p)) for p in re.findall(r"([-\d.]+) ([-\d.]+)", d)]
    # two flat segments (equal y within each), the second higher (SVG's y grows downwards)
    assert len(points) == 4
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = points
    assert y0 == y1 and y2 == y3 and y2 < y0 and x0 < x1 <= x2 < x3
    assert "anomalies" not in groups  # no anomaly, none marked


def test_no_anomaly_no_picture(tmp_path):
    readings = [{"meter": "m", "ts": EPOCH_TICKS, "kwh": 1.0}]
    assert meter_picture(readings, [], [], str(tmp_path / "none.svg")) is None
    assert not (tmp_path / "none.svg").exists()


def test_the_demo_draws_its_own_outputs(tmp_path):
    # the demo's queries, inline over its data: the picture of the first anomalous meter
    from topology import Stream, to_cht
    from topology.app.demo import generate

    data = generate(meters=4, minutes=30)  # queries() reads a DataFrame: built inline here
    from operators.aggregates import Avg
    from operators.ingress import AdvanceTime
    from topology.app.demo import SpikeDetector

    advance = AdvanceTime(every=2_000, delay=MINUTE, policy="drop")
    rows = [r for r in data.readings if r["ts"] is not None]
    src = Stream.from_rows(rows, start="ts", advance=advance)
    averages = to_cht(src.group_apply(
        lambda r: r["meter"], lambda g: g.tumbling_window(5 * MINUTE).aggregate(Avg("kwh")))
        .collect("inline"))
    anomalies = to_cht(src.group_apply(
        lambda r: r["meter"], lambda g: g.hopping_window(5 * MINUTE, MINUTE)
        .apply(SpikeDetector())).collect("inline"))
    assert anomalies
    path = tmp_path / "demo.svg"
    meter = meter_picture(data.readings, averages, anomalies, str(path))
    first = min(anomalies, key=lambda r: r[2][1]["ts"])
    assert meter == first[2][0]
    _, groups = _groups(path)
    shown = [r for r in rows if r["meter"] == meter]
    assert _marks(groups["readings"]) == len(shown)
