"""``why`` names the device (issue 38, item 4): a source with per-key progress shows its low
watermark, its slowest keys (how far behind the fastest, when their last rows came) and the
keys with the most late rows; ``why(key=...)`` of one key's window says that key's CTI is
what holds it, or that it is final at its own CTI; inline and on Ray; times as times."""

from __future__ import annotations

import datetime as dt

import pytest

from operators.aggregates import Count
from operators.ingress import AdvanceTime
from topology import Stream

T0 = dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.UTC)
WINDOW = ("2026-01-01T10:05:00Z", "2026-01-01T10:10:00Z")


def _meters():
    """m0, m1 every 10 s from 10:00 to 10:09:50; m042 7 min behind, from 10:00:00 on its
    clock; and two rows of m9 behind the low watermark."""
    rows = []
    for i in range(60):
        t = T0 + dt.timedelta(seconds=10 * i)
        rows += [{"m": "m0", "t": t}, {"m": "m1", "t": t}]
        if i >= 42:
            rows.append({"m": "m042", "t": t - dt.timedelta(minutes=7)})
    rows += [{"m": "m9", "t": T0}, {"m": "m9", "t": T0}]
    return rows


def _query(rows):
    adv = AdvanceTime(every=1, delay="5 s", per_key="m", low_watermark="8 min")
    return Stream.from_rows(rows, start="t", advance=adv).group_apply(
        "m", lambda g: g.tumbling_window("5 min", emit="final").aggregate(Count()))


@pytest.mark.parametrize("runtime", ["inline", pytest.param("ray", marks=pytest.mark.slow)])
def test_why_names_the_device_behind(runtime, request):
    if runtime == "ray":
        request.getfixturevalue("ray_session")
    out = _query(_meters()).collect(runtime=runtime)
    slow = out.why(WINDOW, key="m042")
    # (on Ray collect() chains the source and the group_apply: why names that stage)
    assert slow.status == "not yet produced" and slow.culprit == (
        "from_rows#0" if runtime == "inline" else "from_rows#0+group_apply#1")
    assert slow.reason.startswith("key 'm042' has CTI 2026-01-01T10:02:45Z, 7 min behind the "
                                  "fastest key's")
    # on Ray the source keeps a clock: when the key's last rows came
    assert ("its last event came " in slow.reason) == (runtime == "ray")
    text = str(slow)
    assert "of key 'm042'" in text.splitlines()[0]
    assert "slowest key 'm042' has CTI 2026-01-01T10:02:45Z" in text
    assert "most late key 'm9': none of its rows was on time (2 late rows)" in text
    fast = out.why(WINDOW, key="m0")
    # m0's CTI 10:09:45 has not passed the window's end either: speculative, rows of m0 only
    assert fast.status == "speculative" and [p for _, _, p in fast.rows] == ["('m0', 30)"]
    done = out.why(("2026-01-01T10:00:00Z", "2026-01-01T10:05:00Z"), key="m1")
    assert done.final and "key 'm1''s CTI" not in done.reason
    d = slow.to_dict()
    assert d["key"] == "'m042'" and d["keys"][0]["slowest"][0]["key"] == "'m042'"
    assert d["keys"][0]["slowest"][0]["cti_shown"] == "2026-01-01T10:02:45Z"


def test_a_window_is_final_at_its_keys_own_cti():
    # mid-run (what a deployed query reports): m0's CTI is past 10:10, the stream's is not
    from operators.ingress import Ingress
    from operators.ticks import to_ticks
    from topology.planning.key_progress import PER_KEY_NOTE
    from topology.running.progress import Progress, SourceFacts, StepProgress
    from topology.seeing.why import explain

    src = Ingress(start="t", advance=AdvanceTime(every=1, delay="5 s", per_key="m",
                                                 low_watermark="8 min"))
    src.push([r for r in _meters() if r["m"] != "m9"]
             + [{"m": "m0", "t": T0 + dt.timedelta(minutes=11)}])
    low = max(src.cti, src._low)
    steps = {"src": StepProgress("src", "from_rows", cti=low,
                                 source=SourceFacts(keys=src.slowest_keys(5, asked="m0"))),
             "g": StepProgress("g", f"group_apply(m) {PER_KEY_NOTE}", cti=to_ticks(T0))}
    progress = Progress(steps, {"g": ((0, "src"),)}, "g", clock="timestamps")
    e = explain(progress, WINDOW, key="m0")
    assert e.final and e.cti < e.hi
    assert "key 'm0''s CTI 2026-01-01T10:10:55Z has passed it" in str(e)
    steps["src"] = StepProgress("src", "from_rows", cti=low, source=SourceFacts(
        keys=src.slowest_keys(5, asked="m042")))
    e = explain(progress, WINDOW, key="m042")
    assert not e.final and e.reason.startswith("key 'm042' has CTI 2026-01-01T10:02:45Z")


def test_why_of_a_key_needs_a_per_key_source():
    out = Stream.from_rows([{"t": 1, "m": "a"}], start="t").collect(runtime="inline")
    with pytest.raises(ValueError, match=r"why\(key='a'\): no source sink reads has per-key"):
        out.why(1, key="a")


def test_the_why_panel_lists_the_slowest_keys_as_text(page):
    # the web view's why panel, its /api/why answered with why's JSON of a per-key run
    from tests.topology.live_kit import open_why_panel

    answer = _query(_meters()).collect(runtime="inline").why(WINDOW, key="m042").to_dict()
    open_why_panel(page, answer)
    slowest = page.locator('#why [data-role="why-slowest"] li')
    slowest.first.wait_for(timeout=10_000)
    assert slowest.first.inner_text().startswith(
        "slowest key 'm042' has CTI 2026-01-01T10:02:45Z, 7 min behind the fastest key's")
    late = page.locator('#why [data-role="why-most-late"] li').all_inner_texts()
    assert late == ["most late key 'm9': none of its rows was on time (2 late rows)"]
    assert "held back by from_rows#0: key 'm042' has CTI" in page.locator(
        '#why [data-role="why-culprit"]').inner_text()
