"""``cedar demo`` uses per-key progress (issue 38, item 5): one meter's clock is 10 minutes
behind; fed as they arrived, one CTI for all the meters loses its readings (each counted,
here from the data itself), one CTI per meter loses none of them and the others' windows are
final as soon as with one CTI; the report says it with times and durations, and the picture
marks the meter."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from topology.app.demo_data import (
    DELAY_TICKS,
    EPOCH_TICKS,
    LATE_BY_TICKS,
    SKEW_TICKS,
    SKEWED_METER,
    TICKS_PER_S,
    generate,
    readings_advance,
)
from topology.app.demo_skew import print_skew, skew_runs

MINUTE = 60 * TICKS_PER_S


@pytest.fixture(scope="module")
def data():
    return generate()


@pytest.fixture(scope="module")
def runs(data):
    return skew_runs(data)


def _one_cti_late(readings, every, delay):
    """The readings one CTI drops, by meter, read literally: after every ``every`` accepted
    readings the CTI moves to the latest start − ``delay``; a reading starting behind it is
    late (and moves nothing)."""
    late: Counter[str] = Counter()
    cti, latest, count = None, None, 0
    for r in readings:
        if r["ts"] is None:
            continue  # a dead letter, not late
        if cti is not None and r["ts"] < cti:
            late[r["meter"]] += 1
            continue
        latest = r["ts"] if latest is None else max(latest, r["ts"])
        count += 1
        if count == every:
            count = 0
            cti = latest - delay if cti is None else max(cti, latest - delay)
    return late


def test_one_meters_clock_is_behind_by_ten_minutes(data):
    #   arrival:  ... m000 00:20:01  m007 00:10:03  m001 00:20:04 ...   (m007 stamps 10 min
    #   earlier than the readings it arrives among; it starts at 00:00 by its own clock)
    assert data.skewed == SKEWED_METER == "m007"
    mine = [i for i, r in enumerate(data.readings) if r["meter"] == "m007"]
    assert len(mine) == 300  # 00:00 to 00:50 by its clock, every 10 s
    assert all(data.readings[i]["ts"] is not None for i in mine)
    behind = []
    for i in mine:
        others = [r["ts"] for r in data.readings[max(0, i - 40):i + 40]
                  if r["meter"] != "m007" and r["ts"] is not None
                  and abs(r["ts"] - data.readings[i]["ts"] - SKEW_TICKS) < 5 * MINUTE]
        behind.append(sorted(others)[len(others) // 2] - data.readings[i]["ts"])
    assert all(abs(b - SKEW_TICKS) < MINUTE for b in behind), max(behind)
    # by its own clock its readings are in order, up to the others' light disorder
    stamps = [data.readings[i]["ts"] for i in mine]
    assert min(stamps) >= EPOCH_TICKS
    assert all(b > a - DELAY_TICKS for a, b in itertools.pairwise(stamps))
    assert generate(meters=4).skewed is None  # no m007 among four meters


def test_one_cti_loses_every_reading_of_the_meter_behind(data, runs):
    one = runs[0]
    assert one.advance == readings_advance()
    expected = _one_cti_late(data.readings, 2_000, DELAY_TICKS)
    assert one.late == expected
    assert one.late_skewed == expected["m007"] == one.skewed_readings == 300
    assert one.lost == tuple(sorted(r["ts"] for r in data.readings if r["meter"] == "m007"))
    # the other meters lose only the readings taken 20 minutes before they arrived
    assert one.late_others == data.late
    assert one.skewed_windows == 0 and one.expected_windows == 10


def test_per_key_progress_loses_none_and_the_others_are_final_as_soon(data, runs):
    one, patient, per_key = runs
    assert per_key.advance.per_key == "meter"
    assert per_key.advance.low_watermark == 15 * MINUTE
    assert per_key.late_skewed == 0 and per_key.lost == ()
    assert per_key.skewed_windows == per_key.expected_windows == 10  # each of its windows, once
    assert per_key.late_others == data.late  # (each 20 minutes behind its own meter)
    # one CTI 15 minutes behind keeps them too, but every meter's windows wait for it
    assert patient.late_skewed == 0
    assert patient.average_wait > one.average_wait + 10 * MINUTE
    # one per meter: the others' windows are final as soon as with one CTI (every meter's
    # CTI on the same pace, 2,000 readings of all the meters), each window once
    assert abs(per_key.average_wait - one.average_wait) < MINUTE
    others = {r["meter"] for r in data.readings} - {"m007"}
    assert len(per_key.waits) == len(one.waits) == 12 * len(others)
    assert max(per_key.waits) < 10 * MINUTE


def test_the_report_says_it_with_times_and_durations(runs, capsys):
    print_skew(runs)
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert "meter m007's clock is 10 min behind" in text and "300 readings" in text
    lines = {line.split("  ")[2].strip(): line for line in text.splitlines()
             if line.startswith("    one")}
    one = lines["one, 1 min behind the latest"].split()
    assert one[6:8] == ["300", f"{runs[0].late_others}"] and "0 of 10" in " ".join(one)
    per_key = lines["one per meter, low watermark 15 min"]
    assert re.search(r"\s0\s+35\s+10 of 10\s+\d+ min( \d+ s)?$", per_key), per_key
    assert f"taken {LATE_BY_TICKS // MINUTE} min before" in text
    assert 'per_key="meter"' in text
    assert not re.search(r"\d{7,}", text)  # durations in units, never ticks
    print_skew([])
    assert capsys.readouterr().out == ""


def test_the_picture_marks_the_meter_behind_and_its_lost_readings(data, runs, tmp_path):
    pytest.importorskip("matplotlib")
    from topology.app.demo import meter_pictures
    from topology.app.demo_pictures import ClockBehind, meter_picture

    svg = "{http://www.w3.org/2000/svg}"
    behind = ClockBehind("m007", SKEW_TICKS, runs[0].lost)
    path = tmp_path / "m007.svg"
    assert meter_picture(data.readings, [], [], str(path), meter="m007",
                         clock_behind=behind) == "m007"
    root = ET.parse(path).getroot()
    groups = {g.get("id"): g for g in root.iter(f"{svg}g") if g.get("id")}
    assert {"readings", "late-readings", "clock-behind"} <= set(groups)
    assert len(list(groups["late-readings"].iter(f"{svg}use"))) == 300  # each one marked
    texts = "\n".join("".join(t.itertext()) for t in root.iter(f"{svg}text"))
    assert "clock 10 min behind the others': 300 of its 300 readings late with one CTI" in texts
    assert "(its clock 10 min behind the others')" in texts
    assert not re.search(r"\d{9,}", texts)
    # another meter drawn with the same mark: not marked
    other = tmp_path / "m001.svg"
    meter_picture(data.readings, [], [], str(other), meter="m001", clock_behind=behind)
    assert 'id="clock-behind"' not in other.read_text(encoding="utf-8")
    # the demo draws it beside the main picture
    drawn = meter_pictures(data, {"meter_averages": [], "anomalies": []}, str(tmp_path), runs)
    assert drawn == {"m007: clock 10 min behind, late with one CTI":
                     str(tmp_path / "meter-clock-behind.svg")}
