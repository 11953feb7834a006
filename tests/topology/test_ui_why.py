"""The web view's ``why`` panel in a real browser (headless Chromium driven by Playwright):
clicking a step shows why its output is not final — the idle input of a join that holds it
back, the steps in between, the idle timeout that would move it, the late events out of it —
as text, escaped, from ``/api/why``."""

from __future__ import annotations

import json
import queue
import urllib.error
import urllib.request

import pytest

from tests.topology.live_kit import EVIL
from tests.topology.live_kit import rows as _rows
from tests.topology.live_kit import wait_for as _wait_for
from topology import AdvanceTime, Stream
from topology.ui import serve


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


def test_the_why_panel_asks_again_only_once_it_has_its_answer(page):
    # a why that takes long (a busy step, a slow cluster) must not pile up: the panel asks
    # every 2 s, but not while its last question is unanswered. No server: the page and its
    # /api/why are routed here, and the answer is held back
    from topology.ui import WHY_PANEL

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
