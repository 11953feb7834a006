"""Timeline pictures: the rendered SVG's elements are where the events say they must be.

The x scale is recovered from the SVG itself (two CTI lines at known times), then every
event bar's x-extent is checked against its lifetime, the open event against the right edge,
the retracted part against the retraction.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from operators.aggregates import Count
from operators.events import MAX_TIME, Cti, Insert, Retract
from topology import Stream

pytest.importorskip("matplotlib")

from topology.seeing.timeline import timeline

#   a [0 ────────── 10)        b  │ 12            c [20 ──────────→ ∞
#   d [2 ──────────────── 16) retracted to 8: [8, 16) struck through
#   CTIs at 5 and 18
EVENTS = [Insert("a", 0, 10, "A"), Insert("d", 2, 16, "D"), Cti(5), Insert("b", 12, 13, "B"),
          Retract("d", 2, 16, 8, "D"), Cti(18), Insert("c", 20, MAX_TIME, "C")]
SVG = "{http://www.w3.org/2000/svg}"


def _groups(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {g.get("id"): g for g in root.iter(f"{SVG}g") if g.get("id")}


def _xs(group: ET.Element) -> list[float]:
    xs: list[float] = []
    for el in group.iter():
        if el.tag == f"{SVG}path" and el.get("d") and not el.get("id"):
            nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", el.get("d", ""))]
            xs.extend(nums[0::2])
        if el.tag == f"{SVG}use":
            xs.append(float(el.get("x", "nan")))
    return xs


@pytest.fixture
def svg(tmp_path):
    path = str(tmp_path / "trace")
    Stream.from_events(EVENTS).where(lambda p: True).collect(runtime="inline", trace=path)
    out = tmp_path / "where.svg"
    timeline(path, "where", out=str(out))
    return out.read_text()


def test_bars_span_their_lifetimes(svg):
    g = _groups(svg)
    bars = sorted(k for k in g if k.startswith("event-in-"))
    assert len(bars) == 4  # one per input event
    assert len([k for k in g if k.startswith("event-out-")]) == 4
    ctis = [k for k in g if k.startswith("cti-in-")]
    assert len(ctis) == 2  # at 5 and 18 (the final CTI lies past the picture's edge)
    x5, x18 = _xs(g["cti-in-0"])[0], _xs(g["cti-in-1"])[0]
    assert all(x == x5 for x in _xs(g["cti-in-0"]))  # vertical

    def tick(x: float) -> float:
        return 5 + (x - x5) * (18 - 5) / (x18 - x5)

    def extent(gid: str) -> tuple[float, float]:
        xs = _xs(g[gid])
        return round(tick(min(xs)), 6), round(tick(max(xs)), 6)

    # lanes in arrival order: a, d, b, c
    assert extent("event-in-0") == (0, 10)
    assert extent("event-in-1") == (2, 8)  # what is left of d after the retraction
    assert extent("retracted-in-1") == (8, 16)
    assert extent("strike-in-1") == (8, 16)
    assert tick(_xs(g["point-in-2"])[0]) == pytest.approx(12)
    assert "retracted-in-0" not in g and "open-in-0" not in g
    # the open event c runs to the panel's right edge, where its arrow is
    right = max(_xs(g["axes-in"]))
    assert tick(min(_xs(g["event-in-3"]))) == pytest.approx(20)
    assert max(_xs(g["event-in-3"])) == pytest.approx(right)
    assert _xs(g["open-in-3"])[0] == pytest.approx(right)
    labels = {k: "".join(g[k].itertext()) for k in g if k.startswith("label-in-")}
    assert len(labels) == 4


def test_windows_are_brackets_over_the_input(tmp_path):
    path = str(tmp_path / "trace")
    evs = [Insert(i, t, t + 1, i) for i, t in enumerate([0, 4, 7, 13])] + [Cti(20)]
    Stream.from_events(evs).tumbling_window(5).aggregate(Count()).collect(
        runtime="inline", trace=path)
    out = tmp_path / "w.svg"
    timeline(path, "tumbling", out=str(out))
    g = _groups(out.read_text())
    windows = sorted(k for k in g if k.startswith("window-"))
    assert len(windows) == 3  # [0, 5) [5, 10) [10, 15): the non-empty ones
    assert len([k for k in g if k.startswith("point-in-")]) == 4
    x0 = _xs(g["point-in-0"])[0]
    x4 = _xs(g["point-in-1"])[0]

    def tick(x: float) -> float:
        return (x - x0) * 4 / (x4 - x0)

    spans = sorted((round(tick(min(_xs(g[w])))), round(tick(max(_xs(g[w]))))) for w in windows)
    assert spans == [(0, 5), (5, 10), (10, 15)]


def test_count_and_session_windows_are_brackets_of_their_windows(tmp_path):
    #   points at 0, 4, 7, 8: count_window(2) windows [0, 5) [4, 8) [7, 9) (outputs at 4, 7,
    #   8); session_window(2): [0, 2) [4, 6) [7, 10) -- the same windows the debugger uses
    evs = [Insert(i, t, t + 1, i) for i, t in enumerate([0, 4, 7, 8])] + [Cti(20)]
    for name, q, expected in (
            ("count", lambda s: s.count_window(2), [(0, 5), (4, 8), (7, 9)]),
            ("session", lambda s: s.session_window(2, output="point_end"),
             [(0, 2), (4, 6), (7, 10)])):
        path = str(tmp_path / name)
        q(Stream.from_events(evs)).aggregate(Count()).collect(runtime="inline", trace=path)
        out = tmp_path / f"{name}.svg"
        timeline(path, name, out=str(out))
        g = _groups(out.read_text())
        x0, x4 = _xs(g["point-in-0"])[0], _xs(g["point-in-1"])[0]

        def tick(x: float) -> float:
            return (x - x0) * 4 / (x4 - x0)  # noqa: B023 -- used in this iteration only

        spans = sorted((round(tick(min(_xs(g[w])))), round(tick(max(_xs(g[w])))))
                       for w in g if w.startswith("window-"))
        assert spans == expected, name


def _axis_labels(svg: str) -> list[str]:
    """The texts of the bottom panel's x tick labels, as the SVG draws them (matplotlib
    writes each text's string as a comment before its glyphs)."""
    bottom = svg.split('id="axes_2"', 1)[1]
    return re.findall(r'<g id="xtick_\d+">.*?<!-- (.*?) -->', bottom, re.S)


def test_the_time_axis_reads_as_times_and_payloads_by_a_chosen_field(tmp_path):
    import datetime

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    rows = [{"meter": "m000", "kwh": i, "ts": t0 + datetime.timedelta(seconds=10 * i)}
            for i in range(12)]
    path = str(tmp_path / "trace")
    Stream.from_rows(rows, start="ts").tumbling_window(30_000_000).aggregate(Count()).collect(
        runtime="inline", trace=path)
    out = tmp_path / "t.svg"
    timeline(path, "tumbling", out=str(out), label="kwh")
    svg = out.read_text()
    labels = _axis_labels(svg)
    assert len(labels) >= 3
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in labels), labels
    assert {"00:00:30", "00:01:00"} <= set(labels)
    assert "time (UTC, 2026-01-01)" in svg and "1e" not in "".join(labels)
    assert re.search(r"<!-- kwh=3 -->", svg)
    # shortened readably without a field: name=value, no braces or quotes
    timeline(path, "tumbling", out=str(out))
    assert re.search(r"<!-- meter=m000 kwh=3 … -->", out.read_text())
    # ticks stay integer ticks, without offset notation
    ticks = str(tmp_path / "ticks")
    Stream.from_rows([{"ts": 1_767_225_600_000_000 + i, "v": i} for i in range(5)],
                     start="ts").collect(runtime="inline", trace=ticks)
    timeline(ticks, "from_rows", out=str(out))
    plain = _axis_labels(out.read_text())
    assert plain and all(re.fullmatch(r"\d{16}", t) for t in plain), plain
    assert "time (ticks)" in out.read_text()


def test_a_join_draws_each_of_its_inputs(tmp_path):
    #   trades  0 1 2 ... 59        (points; more than the picture's 40 rows)
    #   rates   r [0 ───────────→ ∞  (one edge, arriving after every trade)
    #   input 0 and input 1 each in a panel of their own: the reference edge is drawn,
    #   however many trades came before it
    trades = Stream.from_rows([{"k": 1, "t": t} for t in range(60)], start="t", name="trades")
    rates = Stream.from_rows([{"k": 1, "t": 0, "rate": 1.1}], start="t", shape="edge", id="k",
                             name="rates")
    path = str(tmp_path / "trace")
    trades.join(rates, on=("k", "k")).collect(runtime="inline", trace=path)
    out = tmp_path / "join.svg"
    fig = timeline(path, "join", out=str(out), lanes=False)
    assert len(fig.axes) == 3
    g = _groups(out.read_text())
    assert {"axes-in0", "axes-in1", "axes-out"} <= set(g)
    assert len([k for k in g if k.startswith("event-in0-")]) == 40  # the limit
    assert [k for k in g if k.startswith("event-in1-")] == ["event-in1-0"]
    assert "open-in1-0" in g  # the reference edge runs to ∞
    labels = [t.get_text() for ax in fig.axes for t in [ax.yaxis.label]]
    assert labels == ["input 0\ntrades", "input 1\nrates", "output"]
