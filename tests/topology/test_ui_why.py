"""The web view's ``why`` panel in a real browser (headless Chromium driven by Playwright):
clicking a step shows why its output is not final — the idle input of a join that holds it
back, the steps in between, the idle timeout that would move it, the late events out of it —
as text, escaped, from ``/api/why``."""

from __future__ import annotations

import json
import queue
import re
import urllib.error
import urllib.request

import pytest

from tests.topology.live_kit import EVIL
from tests.topology.live_kit import rows as _rows
from tests.topology.live_kit import wait_for as _wait_for
from topology import AdvanceTime, Stream
from topology.seeing.ui import serve


def test_the_why_panel_names_the_idle_input_of_a_join(ray_session, page):
    #   left   [t, t+1) for t = 0..99, CTI every row; then [10, 100) arrives late: dropped
    #   right  0 20 40 | 60   (CTI every 3 rows: 40; 60 waits)   → the join's CTI is 40
    lf, rf = queue.Queue(), queue.Queue()
    left = Stream.from_rows(_rows(lf), start="t", end="u", shape="interval",
                            advance=AdvanceTime(every=1), name="left")
    right = Stream.from_rows(_rows(rf), start="t", advance=AdvanceTime(every=3), name="right")
    q = left.join(right, on=("k", "k")).deploy("ui-why", flush_ms=20)
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        for t in range(100):
            lf.put({"k": 1, "t": t, "u": t + 1, "note": "ok"})
        lf.put({"k": 1, "t": 10, "u": 100, "note": EVIL})
        for t in (0, 20, 40, 60):
            rf.put({"k": 1, "t": t})
        _wait_for(lambda: q.stats()["left"]["late"] == 1 and
                  q.stats()["right"]["events_in"] == 4, what="both inputs taken")
        page.goto(url)
        row = 'section[data-query="ui-why"] tr[data-step="sink"]'
        page.wait_for_selector(row, timeout=60_000)
        page.click(f'{row} td.step')
        culprit = page.locator('#why [data-role="why-culprit"]')
        page.wait_for_function(
            """() => document.querySelector('#why [data-role="why-culprit"]')
                       .textContent.startsWith('held back by right')""", timeout=60_000)
        assert "its CTI 40" in culprit.inner_text()
        assert page.locator('#why [data-role="why-title"]').inner_text() == "why: ui-why / sink"
        assert "sink at 40: speculative" in \
            page.locator('#why [data-role="why-status"]').inner_text()
        hops = page.locator('#why [data-role="why-hops"] tr')
        assert hops.evaluate_all("trs => trs.map(t => t.dataset.step)") == \
            ["sink", "join#2", "right"]
        assert "min from right" in hops.nth(1).inner_text()
        assert "idle_timeout=" in page.locator('#why [data-role="why-advice"]').inner_text()
        # the late event, with its original times and its payload as text: nothing runs
        late = page.locator('#why [data-role="why-late"] li').first.inner_text()
        assert late.startswith("left: dropped [10, 100)") and "<script>" in late
        assert page.evaluate("() => window.__pwned") is None
        assert page.locator("#why img, #why script").count() == 0
        # another step: its box in the graph
        page.click('section[data-query="ui-why"] svg g[data-step="left"]')
        page.wait_for_function(
            """() => document.querySelector('#why [data-role="why-title"]').textContent
                       === 'why: ui-why / left'""", timeout=60_000)
        # the same as JSON; a query that is not there is a 404 with a sentence
        data = json.load(urllib.request.urlopen(url + "api/why?query=ui-why&step=sink"))
        assert data["culprit"] == "right" and data["status"] == "speculative"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url + "api/why?query=no-such-query&step=sink")
        assert missing.value.code == 404
        assert "no-such-query" in json.load(missing.value)["error"]
    finally:
        lf.put(None)
        rf.put(None)
        server.shutdown()
        q.stop()


@pytest.mark.slow  # (the default tier keeps its 10 minutes)
def test_the_why_panel_asks_again_only_once_it_has_its_answer(page):
    # a why that takes long (a busy step, a slow cluster) must not pile up: the panel asks
    # every 2 s, but not while its last question is unanswered. No server: the page and its
    # /api/why are routed here, and the answer is held back
    from topology.seeing.ui import WHY_PANEL

    held: list = []
    html = ('<html><body><section data-query="q"><table><tr data-step="sink">'
            '<td class="step">sink</td></tr></table></section>'
            + WHY_PANEL.replace(' nonce="NONCE"', "") + "</body></html>")
    page.route("http://cedar.test/", lambda route: route.fulfill(
        status=200, content_type="text/html", body=html))
    page.route("http://cedar.test/api/why*", lambda route: held.append(route))
    page.goto("http://cedar.test/")
    page.click('tr[data-step="sink"] td.step')
    page.wait_for_timeout(5_000)  # two more turns of the 2 s timer
    assert len(held) == 1
    held[0].fulfill(status=200, content_type="application/json", body=json.dumps(
        {"what": "sink at 5", "status": "not yet produced", "cti_shown": "4", "culprit": None,
         "hops": [], "advice": None, "late": [],
         "busy": [{"step": "where#1", "seconds": 40.0, "shown": "40 s"}]}))
    page.wait_for_function("""() => document.querySelector('#why [data-role="why-busy"]')
                              .textContent.includes('where#1 has been inside one batch')""",
                           timeout=10_000)
    page.wait_for_timeout(2_500)
    assert len(held) == 2  # answered: the timer asks again


@pytest.mark.slow  # ~25 s: a live join, several seconds of samples, the CLI, a picture
def test_a_join_whose_reference_input_is_idle_is_flagged_and_told_to_import_ctis(
        ray_session, page, tmp_path, capsys):
    #   trades  0, 5 min, 10 min, ... (points, CTI every row): hours of trades, still coming
    #   rates   EUR [0 ──────────────────────────────→ ∞   (an edge, CTI 0; then idle)
    #   join    CTI 0 however far trades go; every trade stays in its state (rates' CTI never
    #           passes it): the page flags it, `why` (panel and CLI alike) names import_ctis,
    #           and its picture draws both inputs
    import threading

    from topology.app.cli import main

    minute = 60_000_000
    tf, rf = queue.Queue(), queue.Queue()
    trades = Stream.from_rows(_rows(tf), start="t", advance=AdvanceTime(every=1), name="trades")
    rates = Stream.from_rows(_rows(rf), start="t", shape="edge", id="ccy",
                             advance=AdvanceTime(every=1), name="rates")
    q = trades.join(rates, on=("ccy", "ccy")).deploy(
        "ui-ref", flush_ms=20, trace=str(tmp_path / "trace"))
    join = next(s for s in q.steps if s.startswith("join"))
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    stop = threading.Event()

    def feed() -> None:
        k = 0
        while not stop.wait(0.1):
            tf.put({"ccy": "EUR", "t": k * 5 * minute, "qty": k})
            k += 1

    feeder = threading.Thread(target=feed, daemon=True)
    try:
        rf.put({"ccy": "EUR", "t": 0, "rate": 1.1})
        _wait_for(lambda: q.stats()["rates"]["cti"] == 0, what="rates' CTI")
        feeder.start()
        page.goto(url)
        held = f'section[data-query="ui-ref"] tr[data-step="{join}"][data-held]'
        page.wait_for_selector(held, timeout=60_000)
        row = page.locator(held)
        assert row.get_attribute("class") == "held"
        assert "inputs' CTIs are" in row.get_attribute("title") and \
            "its state grew" in row.get_attribute("title")
        apart = row.locator('td[data-field="inputs_apart"]').inner_text()
        assert int(apart) > 60 * minute  # trades are more than an hour ahead of rates
        # its lag is behind the input that leads, not "0" behind the idle one
        assert int(row.locator('td[data-field="cti_lag"]').inner_text()) >= int(apart)
        assert page.locator(f'section[data-query="ui-ref"] svg g[data-step="{join}"]'
                            ).get_attribute("data-held") == "1"
        note = page.locator('section[data-query="ui-ref"] p[data-role="held"]')
        assert note.inner_text().startswith(f"{join} held:") and "waits for rates" in \
            note.inner_text()
        # a step with one input is never flagged
        assert page.locator('section[data-query="ui-ref"] tr[data-held]').count() == 1
        # every sparkline has its scale: its top and its bottom, in events per second
        spark = 'section[data-query="ui-ref"] tr[data-step="trades"] svg[data-role="sparkline"]'
        top = page.locator(spark + ' [data-role="spark-max"]').text_content()
        assert re.fullmatch(r"[\d.]+[kM]? ev/s", top), top
        assert page.locator(spark + ' [data-role="spark-min"]').text_content() == "0 ev/s"
        # why: the panel and the CLI name import_ctis in the same words, never idle_timeout
        note.click()
        advice = page.locator('#why [data-role="why-advice"]')
        page.wait_for_function(
            """() => document.querySelector('#why [data-role="why-advice"]')
                       .textContent.includes('import_ctis')""", timeout=60_000)
        shown = advice.inner_text()
        assert 'rates.import_ctis(trades, policy="adjust")' in shown
        assert "idle_timeout" not in shown
        assert main(["why", "ui-ref", "--step", join]) == 0
        text = capsys.readouterr().out
        said = next(line for line in text.splitlines() if line.startswith("lagging input:"))
        # (the times in the two answers may differ by the trades taken in between)
        assert re.sub(r"CTI \d+", "CTI _", said).split(" ahead")[-1] == \
            re.sub(r"CTI \d+", "CTI _", shown).split(" ahead")[-1]
        assert said.startswith(f"lagging input: {join} advances with its slowest input: rates")
        assert "idle_timeout" not in text
        # its picture draws both inputs: the trades and the reference edge
        page.goto(url + f"timeline?query=ui-ref&step={join.replace('#', '%23')}")
        page.wait_for_selector("#axes-in1", state="attached", timeout=120_000)
        assert page.locator('[id^="event-in0-"]').count() >= 1
        assert page.locator('[id^="event-in1-"]').count() == 1
        assert page.locator("#open-in1-0").count() == 1
    finally:
        stop.set()
        tf.put(None)
        rf.put(None)
        server.shutdown()
        q.stop()
