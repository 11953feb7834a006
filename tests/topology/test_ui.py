"""``cedar ui`` end to end in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright opens the page of a deployed query, sees its topology and numbers, watches the
numbers move as events flow, and runs no script that a payload carries."""

from __future__ import annotations

import json
import queue
import urllib.request

import pytest
from playwright.sync_api import sync_playwright

from topology import Stream
from topology.ui import serve

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
EVIL = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def _rows(feed: queue.Queue):
    while (row := feed.get()) is not None:
        yield row


@pytest.fixture()
def page():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def _cell(page, step: str, field: str) -> str:
    return page.locator(f'section[data-query="ui-check"] tr[data-step="{step}"] '
                        f'td[data-field="{field}"]').inner_text()


def test_the_page_shows_a_live_query_and_runs_no_payload(ray_session, page):
    feed: queue.Queue = queue.Queue()
    q = (Stream.from_rows(_rows(feed), start="t").where(lambda r: r["t"] >= 0)
         .select(lambda r: {"t": r["t"], "note": r["note"]}).deploy("ui-check", flush_ms=20))
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        for t in range(50):
            feed.put({"t": t, "note": EVIL})
        page.goto(url)
        # the topology: one box per step, edges between them
        page.wait_for_selector('section[data-query="ui-check"] svg g[data-step="sink"]',
                               timeout=60_000)
        steps = page.locator('section[data-query="ui-check"] svg g[data-step]')
        assert sorted(steps.evaluate_all("gs => gs.map(g => g.dataset.step)")) == \
            sorted(q.steps)
        assert page.locator('section[data-query="ui-check"] svg line[data-edge]').count() == \
            len(q.steps) - 1
        page.wait_for_function(
            """() => { const c = document.querySelector(
                 'section[data-query="ui-check"] tr[data-step="sink"] td[data-field="events_in"]');
               return c && Number(c.textContent) >= 50; }""", timeout=60_000)
        before = int(_cell(page, "from_rows#0", "events_in"))
        for t in range(50, 250):
            feed.put({"t": t, "note": EVIL})
        # the numbers move as events flow (event-driven wait, generous deadline)
        page.wait_for_function(
            f"""() => Number(document.querySelector(
                 'section[data-query="ui-check"] tr[data-step="from_rows#0"] '
                 + 'td[data-field="events_in"]').textContent) > {before}""", timeout=60_000)
        assert int(_cell(page, "sink", "events_in")) >= 50
        # the payload is shown as text, and none of its script ran
        page.wait_for_selector('section[data-query="ui-check"] td[data-role="payload"]',
                               timeout=60_000)
        shown = page.locator('section[data-query="ui-check"] td[data-role="payload"]').first
        assert "<script>window.__pwned=2</script>" in shown.inner_text()
        assert page.evaluate("() => window.__pwned") is None
        assert page.locator("section img, section script").count() == 0
        # the same numbers are served as JSON
        data = json.load(urllib.request.urlopen(url + "api/queries"))
        assert data["queries"]["ui-check"]["steps"]["sink"]["events_in"] >= 50
    finally:
        feed.put(None)
        server.shutdown()
        q.stop()


def test_the_server_binds_to_localhost_by_default():
    server = serve(port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
