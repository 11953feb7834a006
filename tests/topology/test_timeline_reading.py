"""Timeline pictures made for reading: lanes per key, densities, bands, bounded height.

Every check reads the rendered SVG (its element ids, the coordinates of their paths, the
texts matplotlib writes as comments before their glyphs), as tests/topology/test_timeline.py
does. The keyed pictures come from queries run inline with a trace; the 100,000-event
pictures from a :class:`~topology.seeing.debug.Recording` built from trace rows (what
``Recording.open`` returns), because tracing 100,000 events through a query takes tens of
seconds on a loaded machine.
"""

from __future__ import annotations

import datetime
import re
import xml.etree.ElementTree as ET

import pytest

from operators.aggregates import Avg, Count
from operators.events import Cti, Insert, Retract
from topology import Stream
from topology.seeing.debug import Recording

pytest.importorskip("matplotlib")

from topology.seeing.timeline import MAX_DRAWN, MAX_INCHES, payload_label, timeline

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
US = 1_000_000
METERS = 3
READINGS = 30  # per meter, every 10 s: five 1-minute windows


def _groups(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {g.get("id"): g for g in root.iter() if g.get("id")}  # a <g>, or an <image>


def _points(group: ET.Element) -> list[tuple[float, float]]:
    """The (x, y) of every path vertex under ``group`` (in SVG points, y downwards)."""
    pts: list[tuple[float, float]] = []
    for el in group.iter(f"{SVG}path"):
        nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", el.get("d", ""))]
        pts.extend(zip(nums[0::2], nums[1::2]))
    return pts


def _box(group: ET.Element) -> tuple[float, float, float, float]:
    pts = _points(group)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return min(xs), max(xs), min(ys), max(ys)


def _height_pt(svg: str) -> float:
    return float(re.search(r'<svg[^>]* height="([\d.]+)pt"', svg).group(1))


def _texts(svg: str, prefix: str) -> list[str]:
    """The texts of the elements whose id starts with ``prefix`` (each its first comment)."""
    return [svg[m.end():].split("<!-- ", 1)[1].split(" -->", 1)[0]
            for m in re.finditer(rf'<g id="{prefix}[\w-]*">', svg)]


def _ticks(svg: str, axes: str, axis: str) -> list[str]:
    """The tick labels of ``axis`` (x or y) of the panel ``axes`` (axes_1: input)."""
    part = svg.split(f'id="{axes}"', 1)[1].split('id="axes_', 1)[0]
    return re.findall(rf'<g id="{axis}tick_\d+">.*?<!-- (.*?) -->', part, re.S)


def _readings() -> list[dict]:
    return [{"meter": f"m{m:03d}", "kwh": round(0.1 * (i % 7) + 0.01 * m, 2),
             "ts": T0 + datetime.timedelta(seconds=10 * i)}
            for i in range(READINGS) for m in range(METERS)]


@pytest.fixture(scope="module")
def meters(tmp_path_factory) -> str:
    """A trace of one-minute averages per meter (a group_apply: a keyed step)."""
    path = str(tmp_path_factory.mktemp("meters") / "trace")
    Stream.from_rows(_readings(), start="ts").group_apply(
        lambda r: r["meter"], lambda g: g.tumbling_window(60 * US).aggregate(Avg("kwh")),
        name="meter_averages").collect(runtime="inline", trace=path)
    return path


def _lanes(g: dict[str, ET.Element], panel: str) -> list[tuple[float, float]]:
    """The y range of each lane of ``panel``, in order."""
    out = []
    k = 0
    while f"lane-{panel}-{k}" in g:
        out.append(_box(g[f"lane-{panel}-{k}"])[2:])
        k += 1
    return out


def test_a_keyed_step_draws_one_lane_per_key_with_its_events_in_it(meters, tmp_path):
    out = tmp_path / "m.svg"
    timeline(meters, "meter_averages", out=str(out), label="kwh")
    svg = out.read_text()
    g = _groups(svg)
    lanes = _lanes(g, "in")
    assert len(lanes) == METERS and len(_lanes(g, "out")) == METERS
    assert _ticks(svg, "axes_1", "y") == ["m000", "m001", "m002"]
    assert _ticks(svg, "axes_2", "y") == ["m000", "m001", "m002"]  # in the input's order
    # every reading is drawn, in its meter's lane (readings arrive time by time, meter by meter)
    points = sorted(k for k in g if k.startswith("point-in-"))
    assert len(points) == METERS * READINGS
    for gid in points:
        n = int(gid.rsplit("-", 1)[1])
        lo, hi = lanes[n % METERS]
        _, _, y0, y1 = _box(g[gid])
        assert lo <= y0 <= y1 <= hi, gid
    # a lane per key, not a row per event: the picture stays short
    assert _height_pt(svg) < 400
    # labels by the chosen field, those that would overlap their neighbour left out
    labels = _texts(svg, "label-in-")
    assert 0 < len(labels) < len(points)
    assert all(re.fullmatch(r"kwh=\d(\.\d+)?", t) for t in labels), labels
    # an output (key, average) reads as its average in its key's lane, four digits at most
    outs = _texts(svg, "label-out-")
    assert len(outs) == METERS * 5 and all(re.fullmatch(r"\d(\.\d{1,4})?", t) for t in outs), outs
    # the windows in durations, the axis in times
    assert "tumbling windows of 1 min" in svg
    assert "00:01:00" in _ticks(svg, "axes_2", "x")


def test_windows_are_shaded_bands_over_their_keys_lane(meters, tmp_path):
    out = tmp_path / "m.svg"
    timeline(meters, "meter_averages", out=str(out))
    svg = out.read_text()
    g = _groups(svg)
    lanes = _lanes(g, "in")
    bands = [k for k in g if k.startswith("band-")]
    assert len(bands) == METERS * 5  # five windows per meter
    # the scale of the x axis from two readings: reading n is at 10 s * (n // METERS)
    x0 = _box(g["point-in-0"])[0]
    x1 = _box(g[f"point-in-{METERS * 6}"])[0]  # one minute later

    def minutes(x: float) -> float:
        return round((x - x0) / (x1 - x0), 3)

    spans = {}
    for b in bands:
        xa, xb, ya, yb = _box(g[b])
        lane = next(k for k, (lo, hi) in enumerate(lanes) if lo - 0.01 <= ya and yb <= hi + 0.01)
        spans.setdefault(lane, []).append((minutes(xa), minutes(xb)))
    assert {k: sorted(v) for k, v in spans.items()} == {
        k: [(m, m + 1) for m in range(5)] for k in range(METERS)}
    brackets = [k for k in g if re.fullmatch(r"window-\d+", k)]
    assert len(brackets) == 5  # one per distinct window


def test_lanes_by_a_payload_field_on_an_unkeyed_step(tmp_path):
    path = str(tmp_path / "trace")
    Stream.from_rows(_readings(), start="ts").where(lambda r: True).collect(
        runtime="inline", trace=path)
    out = tmp_path / "w.svg"
    timeline(path, "where", out=str(out), lanes="meter")
    svg = out.read_text()
    g = _groups(svg)
    assert len(_lanes(g, "in")) == METERS and len(_lanes(g, "out")) == METERS
    assert _ticks(svg, "axes_1", "y") == ["m000", "m001", "m002"]
    assert "by meter" in svg
    # in its lane a reading's label leaves the meter out
    assert all("m00" not in t for t in _texts(svg, "label-in-"))
    # without lanes=, 90 events of an unkeyed step are more than limit: a density
    timeline(path, "where", out=str(out))
    g = _groups(out.read_text())
    assert {"density-in", "density-out"} <= g.keys() and not _lanes(g, "in")
    assert not any(k.startswith(("event-", "point-")) for k in g)
    # and lanes=False keeps one row per event, the first limit of them, and says so
    timeline(path, "where", out=str(out), lanes=False, limit=12)
    svg = out.read_text()
    g = _groups(svg)
    assert len([k for k in g if k.startswith("point-in-")]) == 12
    assert "+78 more events (limit=12)" in _texts(svg, "more-in")
    with pytest.raises(ValueError, match="records no key"):
        timeline(path, "where", lanes=True)


def _recording(n: int, keys: int = 0) -> Recording:
    """A trace of one step that passes ``n`` events (each 25 ms, every 1 ms, one in nine
    shortened on the way out; a CTI every 1,000), keyed by ``keys`` keys when given."""
    rows = []
    t0 = int(T0.timestamp()) * US

    def add(d: str, kind: str, i: int, s: int, e: int | None, new_end: int | None = None
            ) -> None:
        key = None if not keys or kind == "cti" else repr(f"k{i % keys}")
        rows.append({"step": "s", "direction": d, "port": 0, "seq": len(rows),
                     "batch": len(rows) // 1000, "wall": 0.0, "kind": kind,
                     "id": None if kind == "cti" else repr(i), "start": s, "end": e,
                     "new_end": new_end, "payload": None,
                     "payload_repr": None if kind == "cti" else repr({"v": i}), "key": key,
                     "note": None})

    for i in range(n):
        s = t0 + i * 1000
        add("in", "insert", i, s, s + 25_000)
        add("out", "insert", i, s, s + 25_000)
        if i % 9 == 4:
            add("out", "retract", i, s, s + 25_000, s + 10_000)
        if i % 1000 == 999:
            add("in", "cti", i, s, None)
            add("out", "cti", i, s, None)
    kind = {"kind": "group_apply", "sub": {"kind": "span"}} if keys else {"kind": "span"}
    return Recording({"steps": {"s": {**kind, "describe": "a step", "inputs": []}},
                      "clock": "timestamps"}, rows)


def test_ten_or_100000_events_give_pictures_of_bounded_similar_height(tmp_path):
    small, big = tmp_path / "10.svg", tmp_path / "100000.svg"
    timeline(_recording(10), "s", out=str(small))
    timeline(_recording(100_000), "s", out=str(big))
    h10, h100k = _height_pt(small.read_text()), _height_pt(big.read_text())
    assert h10 <= MAX_INCHES * 72 and h100k <= MAX_INCHES * 72
    assert 2 / 3 < h10 / h100k < 3 / 2, (h10, h100k)
    g10 = _groups(small.read_text())
    assert len([k for k in g10 if k.startswith("event-in-")]) == 10  # one row each
    svg = big.read_text()
    g = _groups(svg)
    assert {"density-in", "density-out", "density-retracted-out"} <= g.keys()
    assert "density-retracted-in" not in g  # nothing was retracted on the way in
    assert not any(k.startswith(("event-", "point-", "label-")) for k in g)
    assert len(svg) < 300_000  # a few hundred elements, not 100,000
    assert re.search(r"100,000 events, per 2 s", svg)  # a round slot, as a duration
    assert 0 < len([k for k in g if k.startswith("cti-in-")]) <= 40
    xs = _ticks(svg, "axes_2", "x")
    assert xs and all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in xs), xs
    # the density's bars: 2,000 starts per 2 s slot, of which one in nine retracted out
    def tallest(gid: str) -> float:
        _, _, top, base = _box(g[gid])
        return base - top

    assert tallest("density-retracted-out") / tallest("density-out") == pytest.approx(
        1 / 9, abs=0.01)


def test_many_events_of_a_keyed_step_are_density_strips_and_lanes_stop_at_limit(tmp_path):
    out = tmp_path / "k.svg"
    timeline(_recording(MAX_DRAWN + 100, keys=5), "s", out=str(out))
    svg = out.read_text()
    g = _groups(svg)
    assert len(_lanes(g, "in")) == 5 and {"density-in", "density-out"} <= g.keys()
    assert not any(k.startswith(("event-", "point-")) for k in g)
    assert _ticks(svg, "axes_1", "y") == ["k0", "k1", "k2", "k3", "k4"]
    assert re.search(r"500 events: the darker a slot of \d+ ms, the more start in it", svg)
    # 50 keys, 10 rows: ten lanes and a note of the others
    timeline(_recording(200, keys=50), "s", out=str(out), limit=10)
    svg = out.read_text()
    g = _groups(svg)
    assert len(_lanes(g, "in")) == 10 and "lane-in-10" not in g
    assert _texts(svg, "more-in") == ["+40 more keys (limit=10 rows)"]
    assert _height_pt(svg) <= MAX_INCHES * 72


def test_retracted_output_is_struck_through(tmp_path):
    # a tumbling count over a, then b: the row [0, 5) counting a alone is deleted (struck
    # through over all its window) and replaced; b shortened to [4, 8) strikes out [8, 12)
    events = [Insert("a", 1, 5, "a"), Cti(1), Insert("b", 4, 12, "b"), Cti(3),
              Retract("b", 4, 12, 8, "b"), Cti(10), Cti(30)]
    path = str(tmp_path / "trace")
    Stream.from_events(events).tumbling_window(5).aggregate(Count()).collect(
        runtime="inline", trace=path)
    out = tmp_path / "s.svg"
    timeline(path, "tumbling", out=str(out))
    g = _groups(out.read_text())
    xa, xb = _box(g["event-in-0"])[:2]  # a: [1, 5)

    def tick(x: float) -> float:
        return round(1 + (x - xa) * 4 / (xb - xa), 6)

    assert (tick(_box(g["strike-out-0"])[0]), tick(_box(g["strike-out-0"])[1])) == (0, 5)
    assert (tick(_box(g["retracted-out-0"])[0]), tick(_box(g["retracted-out-0"])[1])) == (0, 5)
    assert (tick(_box(g["strike-in-1"])[0]), tick(_box(g["strike-in-1"])[1])) == (8, 12)
    assert "strike-out-1" not in g  # the row that replaced it stands


def test_payload_labels_read_readably():
    assert payload_label("('m000', 0.4513333333333333)") == "m000, 0.4513"
    assert payload_label("('m000', 0.4513333333333333)", key="m000") == "0.4513"
    assert payload_label("{'meter': 'm000', 'kwh': 0.123456}", key="m000") == "kwh=0.1235"
    assert payload_label("{'meter': 'm000', 'kwh': 0.42}", "kwh") == "kwh=0.42"
    assert payload_label("{'n': 1767225600, 'x': 12345.678}") == "n=1767225600 x=12345.7"
    assert payload_label("('m000', 0.5)", "kwh") == "m000, 0.5"  # no such field: the payload
    assert payload_label("'" + "x" * 40 + "'") == "x" * 27 + "…"
    assert payload_label("{'k': 0, 'v': 0}", key="0") == "v=0"  # the key's field only


def test_keyed_sessions_are_bands_in_their_lane_without_brackets_mixing_keys(tmp_path):
    # two keys with sessions at different times: a bracket over all lanes would mix them
    evs = [Insert(i, t, t + 1, {"k": k}) for i, (k, t) in
           enumerate([("a", 0), ("a", 2), ("b", 5), ("b", 6), ("a", 20), ("b", 30)])] + [Cti(50)]
    path = str(tmp_path / "trace")
    Stream.from_events(evs).group_apply(
        lambda p: p["k"], lambda g: g.session_window(4).aggregate(Count())).collect(
        runtime="inline", trace=path)
    out = tmp_path / "s.svg"
    timeline(path, "group_apply", out=str(out))
    g = _groups(out.read_text())
    lanes = _lanes(g, "in")
    assert len(lanes) == 2
    bands = sorted(k for k in g if k.startswith("band-"))
    assert len(bands) == 4  # a: [0, 6) [20, 24); b: [5, 10) [30, 34)
    for b in bands:
        _, _, ya, yb = _box(g[b])
        assert any(lo - 0.01 <= ya and yb <= hi + 0.01 for lo, hi in lanes), b
    assert not [k for k in g if re.fullmatch(r"window-\d+", k)]


def test_payload_fields_that_are_times_of_the_picture_read_as_times(tmp_path):
    # a reading's own "at" field (µs since the epoch, as the demo's meters carry it) and a
    # datetime field read as the times on the axis; a large integer that is no time stays
    rows = [{"meter": "m000", "at": int(T0.timestamp()) * US + i * 10 * US + 603_172,
             "when": T0 + datetime.timedelta(seconds=10 * i), "n": 12_345_678_901}
            for i in range(4)]
    path = str(tmp_path / "trace")
    Stream.from_rows(rows, start="when").where(lambda r: True).collect(
        runtime="inline", trace=path)
    out = tmp_path / "t.svg"
    timeline(path, "where", out=str(out), label="at")
    assert _texts(out.read_text(), "label-in-")[:2] == ["at=00:00:00.603", "at=00:00:10.603"]
    timeline(path, "where", out=str(out), label="when")
    assert _texts(out.read_text(), "label-in-")[1] == "when=00:00:10"
    timeline(path, "where", out=str(out), label="n")
    assert _texts(out.read_text(), "label-in-")[0] == "n=12345678901"


def test_the_timeline_command_draws_lanes_or_rows(tmp_path, capsys):
    from topology.app.cli import main

    path = str(tmp_path / "trace")
    Stream.from_rows(_readings(), start="ts").where(lambda r: True).collect(
        runtime="inline", trace=path)
    out = tmp_path / "c.svg"
    assert main(["timeline", path, "--step", "where", "-o", str(out), "--lanes", "meter"]) == 0
    assert len(_lanes(_groups(out.read_text()), "in")) == METERS
    assert main(["timeline", path, "--step", "where", "-o", str(out), "--rows"]) == 0
    g = _groups(out.read_text())
    assert len([k for k in g if k.startswith("point-in-")]) == 40 and "more-in" in g
    assert main(["timeline", path, "--step", "where", "-o", str(out)]) == 0
    assert "density-in" in _groups(out.read_text())
    capsys.readouterr()
