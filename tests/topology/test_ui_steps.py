"""``cedar ui`` per step, in a real browser (headless Chromium driven by Playwright): each
step's sparkline of rates, backpressure as the colour of the graph's edges (batches in flight
against the limit), late and dead-letter counts linked to a page of their rows, and each step
linked to its timeline picture; every text of those pages escaped."""

from __future__ import annotations

import datetime
import http.client
import json
import os
import queue
import re
import time
import urllib.parse
from collections import deque

from operators.errors import DeadLetter, LateEvent
from operators.events import Insert
from operators.ingress import AdvanceTime
from tests.conftest import REPO
from tests.topology.live_kit import EVIL
from tests.topology.live_kit import rows as _rows
from tests.topology.live_kit import stall_at as _stall_at
from tests.topology.live_kit import wait_for as _wait_for
from topology import Stream
from topology.building.times import show_reason
from topology.seeing.ui import HISTORY_POINTS, HISTORY_S, Monitor, records_page, serve
from topology.seeing.ui_data import original_time

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HOT = "#d22"


def _get(url: str, host: str | None = None) -> tuple[int, bytes]:
    """A real HTTP GET of ``url`` (its path and query), with ``host`` as its Host header."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.putrequest("GET", f"{parts.path}?{parts.query}" if parts.query else parts.path,
                        skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _headers(url: str) -> dict[str, str]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        resp = conn.getresponse()
        resp.read()
        return dict(resp.getheaders())
    finally:
        conn.close()


def _queries(url: str) -> dict:
    return json.loads(_get(url + "api/queries")[1])["queries"]


def _polyline_ys(page, selector: str) -> list[float]:
    points = page.locator(selector).get_attribute("points") or ""
    return [float(p.split(",")[1]) for p in points.split()]


def test_sparklines_and_the_links_to_late_rows_dead_letters_and_pictures(
        ray_session, page, tmp_path):
    feed: queue.Queue = queue.Queue()
    live = Stream.from_rows(_rows(feed), start="ts", advance=AdvanceTime(every=1))
    q = (live.union(Stream.from_rows([{"ts": T0, "note": ""}], start="ts"))
         .where(lambda r: True)
         .deploy("ui-links", trace=str(tmp_path / "trace"), flush_ms=10, history=True))
    source = next(s for s in q.steps if s.startswith("from_rows") and "union" not in s)
    where = next(s for s in q.steps if s.startswith("where"))
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        for i in range(30):  # over a few seconds: the sampler sees the rates move
            feed.put({"ts": T0 + datetime.timedelta(seconds=i), "note": EVIL})
            time.sleep(0.1)
        feed.put({"ts": T0 + datetime.timedelta(seconds=3), "note": EVIL})  # late: dropped
        feed.put({"ts": "not a time", "note": EVIL})  # a dead letter
        _wait_for(lambda: (_queries(url).get("ui-links", {}).get("steps", {})
                           .get(source, {}).get("dead_letters") or 0) == 1,
                  what="the late row and the dead letter")
        data = _queries(url)["ui-links"]
        rates = data["steps"][source]["rates"]
        assert len(rates) >= 2 and max(r[1] for r in rates) > 0, rates
        assert all(0 <= r[0] <= HISTORY_S for r in rates)
        page.goto(url)
        # a sparkline per step, the source's with a rise in events in
        spark = (f'section[data-query="ui-links"] tr[data-step="{source}"] '
                 f'svg[data-role="sparkline"]')
        page.wait_for_function(
            f"""() => {{ const s = document.querySelector('{spark}');
                       return s && Number(s.dataset.points) >= 2; }}""", timeout=60_000)
        assert page.locator('section[data-query="ui-links"] svg[data-role="sparkline"]'
                            ).count() == len(q.steps)
        ys = _polyline_ys(page, spark + ' polyline[data-rate="in"]')
        assert len(ys) >= 2 and min(ys) < max(ys), ys  # not a flat line
        assert "events/s over the last" in page.locator(spark + " title").text_content()
        # the late count links to its rows: original time, reason in times, payload as text
        late = page.locator(f'section[data-query="ui-links"] tr[data-step="{source}"] '
                            f'td[data-field="late"] a')
        assert late.inner_text() == "1"
        assert late.get_attribute("href") == \
            f"/records?query=ui-links&step={source.replace('#', '%23')}&kind=late"
        late.click()
        page.wait_for_selector('tr[data-role="record"]', timeout=30_000)
        assert page.locator("h1").inner_text().startswith("1 late events at step")
        assert page.locator('td[data-role="original"]').inner_text() == \
            "2026-01-01T00:00:03Z"
        reason = page.locator('td[data-role="reason"]').inner_text()
        assert reason.startswith("start 2026-01-01T00:00:03Z is behind the CTI 2026-"), reason
        assert "<script>window.__pwned=2</script>" in \
            page.locator('td[data-role="item"]').inner_text()
        assert page.evaluate("() => window.__pwned") is None
        assert page.locator("body img, body script").count() == 0
        # the dead letters likewise
        page.goto(url)
        page.locator(f'section[data-query="ui-links"] tr[data-step="{source}"] '
                     f'td[data-field="dead_letters"] a').click()
        page.wait_for_selector('tr[data-role="record"]', timeout=30_000)
        assert "bad start time" in page.locator('td[data-role="reason"]').inner_text()
        assert page.evaluate("() => window.__pwned") is None
        # each step links to its timeline picture, drawn from the trace recorded so far
        page.goto(url)
        picture = page.locator(f'section[data-query="ui-links"] tr[data-step="{where}"] '
                               f'td[data-field="timeline"] a')
        picture.wait_for(timeout=60_000)
        assert page.locator('section[data-query="ui-links"] [data-role="no-trace"]'
                            ).count() == 0
        picture.click()
        page.wait_for_selector("#axes-in", state="attached", timeout=120_000)
        assert page.locator('[id^="event-in-"]').count() >= 1
        assert page.locator('[id^="event-out-"]').count() >= 1
    finally:
        feed.put(None)
        server.shutdown()
        q.stop()


def test_an_edge_in_flight_to_its_limit_shows_hot_and_cools_when_taken(
        ray_session, page, tmp_path):
    marker, entered = str(tmp_path / "hold"), str(tmp_path / "holding")
    open(marker, "w").close()
    feed: queue.Queue = queue.Queue()
    q = (Stream.from_rows(_rows(feed), start="t").where(_stall_at(5, marker, entered))
         .select(lambda r: {"t": r["t"]}).deploy("ui-pressure", flush_ms=10, max_in_flight=2))
    source = next(s for s in q.steps if s.startswith("from_rows"))
    where = next(s for s in q.steps if s.startswith("where"))
    held = f"{source}>{where}"
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    edge = f'section[data-query="ui-pressure"] line[data-edge="{held}"]'
    try:
        for t in range(6):
            feed.put({"t": t})
        _wait_for(lambda: os.path.exists(entered), what="the step to hold its batch")
        for t in range(6, 12):  # one batch each, more than the limit: the source waits
            feed.put({"t": t})
            time.sleep(0.1)
        _wait_for(lambda: _queries(url)["ui-pressure"]["in_flight"][held] == [2, 2],
                  what="2 of 2 batches in flight to the held step")
        page.goto(url)
        page.wait_for_selector(edge + '[data-pressure="full"]', state="attached",
                               timeout=60_000)
        line = page.locator(edge)
        assert line.get_attribute("stroke") == HOT
        assert (line.get_attribute("data-in-flight"), line.get_attribute("data-limit")) == \
            ("2", "2")
        assert "2 of 2 batches in flight (full" in line.locator("title").text_content()
        others = page.locator(f'section[data-query="ui-pressure"] line[data-edge]:not('
                              f'[data-edge="{held}"])')
        assert set(others.evaluate_all("ls => ls.map(l => l.dataset.pressure)")) == {"none"}
        # deployed without a trace: no picture links, and the page says how to get one
        assert set(page.locator('section[data-query="ui-pressure"] td[data-field="timeline"]'
                                ).all_inner_texts()) == {"no trace"}
        note = page.locator('section[data-query="ui-pressure"] [data-role="no-trace"]')
        assert "trace=" in note.inner_text() and "cedar timeline" in note.inner_text()
        code, body = _get(url + f"timeline?query=ui-pressure&step={source.replace('#', '%23')}")
        assert code == 404 and b"deployed without a trace" in body and b"trace='DIR'" in body
        # the batches taken, the edge cools down
        os.remove(marker)
        page.wait_for_selector(edge + '[data-pressure="none"]', state="attached",
                               timeout=60_000)
        assert page.locator(edge).get_attribute("stroke") != HOT
    finally:
        if os.path.exists(marker):
            os.remove(marker)
        feed.put(None)
        server.shutdown()
        q.stop()


def test_a_step_page_of_an_unknown_query_or_step_says_so(ray_session):
    q = Stream.from_events([Insert("a", 0, 5, 1)]).deploy("ui-pages")
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        code, body = _get(url + "records?query=nope&step=sink&kind=late")
        assert code == 404 and b"no query 'nope' is running" in body
        code, body = _get(url + "records?query=ui-pages&step=%3Cscript%3E&kind=late")
        assert code == 404 and b"has no step '<script>'" in body  # as plain text:
        assert _headers(url + "records?query=x&step=y")["X-Content-Type-Options"] == "nosniff"
        assert _get(url + "records?query=ui-pages&step=sink&kind=rows")[0] == 404
        code, body = _get(url + "records?query=ui-pages&step=sink&kind=dead_letters")
        assert code == 200 and b"0 dead letters at step &#x27;sink&#x27;" in body
        for path in ("records?query=ui-pages&step=sink", "timeline?query=ui-pages&step=sink"):
            assert _get(url + path, host="attacker.example")[0] == 403
    finally:
        server.shutdown()
        q.stop()


# -- without Ray: the pages' text, the ring's bound ---------------------------------------------

def test_the_records_page_escapes_every_text_and_reads_ticks_as_times():
    reason = "start 1767225603000000 is behind the CTI 1767225629000000; policy 'drop'"
    late = LateEvent("src<b>", "dropped", reason, {"note": EVIL}, None)
    dead = DeadLetter("<script>x</script>", "bad <i>row</i>", Insert(1, 42, 43, EVIL))
    assert original_time(late, reason) == 1767225603000000
    assert original_time(dead, dead.reason) == 42
    assert show_reason(reason, "timestamps", None) == \
        ("start 2026-01-01T00:00:03Z is behind the CTI 2026-01-01T00:00:29Z; policy 'drop'")
    assert show_reason(reason, "ticks", None) == reason
    page_html = records_page({"query": "q<script>", "step": "<s>", "kind": "dead_letters",
                              "count": 3, "records": [
                                  {"where": dead.where, "action": "dead letter",
                                   "reason": dead.reason, "original": "42",
                                   "item": repr(dead.item)}]})
    assert "<script>" not in page_html and "<i>" not in page_html and "<img" not in page_html
    assert "&lt;script&gt;x&lt;/script&gt;" in page_html
    assert "(the newest 1 shown)" in page_html


def test_the_page_is_package_data_and_holds_its_why_panel():
    # the page ships in the wheel: pyproject names it as package data of ui.py's package, and
    # ui.py reads it from there (importlib.resources), not from the checkout
    import os
    import tomllib
    from importlib import resources

    import topology.seeing.ui as ui

    package = ui.__name__.rpartition(".")[0]
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    assert "ui_page.html" in data[package]
    assert resources.files(package).joinpath("ui_page.html").read_text("utf-8") == ui.PAGE
    assert ui.WHY_PANEL.startswith('<section id="why"') and ui.WHY_PANEL in ui.PAGE
    assert ui.PAGE.count('<script nonce="NONCE">') == 2  # its own scripts, and no other


def test_the_rate_history_is_bounded_in_time_and_in_points():
    m = Monitor()
    now = time.time()
    ring = m._history[("q", "s")] = deque(maxlen=HISTORY_POINTS)
    for k in range(HISTORY_POINTS + 50):
        ring.append((now - 2 * HISTORY_S + k * 0.1, float(k), 0.0))
    ring.append((now - 1.0, 7.0, 3.0))
    assert len(ring) == HISTORY_POINTS
    rates = m._rates("q", "s", now)
    assert rates[-1] == [1.0, 7.0, 3.0]
    assert all(age <= HISTORY_S for age, _, _ in rates)
    assert len(rates) < HISTORY_POINTS  # the samples older than HISTORY_S are gone
    assert re.fullmatch(r"\d+", str(len(m._rates("q", "other", now))))


def test_a_step_is_held_when_its_inputs_diverge_and_its_state_grows_with_its_cti_still():
    #   samples, 1 s apart:  state 10 → 20 → 30, CTI 5 throughout, inputs 5 and 9000 apart
    #   → held. The CTI moving, the state shrinking, or too few samples → not held
    from topology.seeing.ui import HELD_S

    def held(states, ctis, apart=8995):
        m = Monitor()
        now = time.time()
        ring = m._growth[("q", "join")] = deque()
        for k, (size, cti) in enumerate(zip(states, ctis)):
            ring.append((now - len(states) + k + 1, size, cti))
        return m._held("q", "join", (5, "rates"), (5 + apart, "trades"), "ticks", now)

    text = held([10, 20, 30], [5, 5, 5])
    assert text is not None and text.startswith("held: its inputs' CTIs are 8995 apart")
    assert "(rates at 5, trades at 9000)" in text and "from 10 to 30" in text
    assert "waits for rates" in text
    assert held([10, 20, 30], [5, 6, 7]) is None  # its CTI moves: it is only behind
    assert held([30, 20, 10], [5, 5, 5]) is None  # its state shrinks
    assert held([10, 30], [5, 5]) is None  # too few samples to tell
    assert held([10, 40, 30], [5, 5, 5]) is None  # it grew, but no longer grows
    # samples older than HELD_S are forgotten
    m = Monitor()
    now = time.time()
    m._growth[("q", "join")] = deque([(now - HELD_S - 5, 1, 5), (now - HELD_S - 4, 2, 5),
                                       (now - 1, 3, 5)])
    assert m._held("q", "join", (5, "rates"), (9, "trades"), "ticks", now) is None
    assert len(m._growth[("q", "join")]) == 1


def test_a_sparkline_has_its_scale_and_a_held_step_is_coloured(page):
    # the page's own script renders a sample as /api/queries serves it (no server: the page
    # and its API are routed here)
    from topology.seeing.ui import PAGE

    sample = {"time": time.time(), "history_s": HISTORY_S, "queries": {"q": {
        "edges": {"a": ["join"], "b": ["join"]}, "in_flight": {}, "rows": [],
        "rows_note": None, "clock": "ticks",
        "steps": {s: {"operator": s, "status": "running", "answering": True, "busy": False,
                      "error": None, "traced": False, "rates": rates, "held": held,
                      "shown": {}}
                  for s, rates, held in [
                      ("a", [[30, 1200.0, 1100.0], [10, 2500.0, 2400.0]], None),
                      ("b", [[30, 0.0, 0.0], [10, 0.0, 0.0]], None),
                      ("join", [], "held: its inputs' CTIs are 9 apart")]}}}}
    page.route("http://cedar.test/", lambda route: route.fulfill(
        status=200, content_type="text/html", body=PAGE.replace(' nonce="NONCE"', "")))
    page.route("http://cedar.test/api/queries", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(sample)))
    page.goto("http://cedar.test/")
    page.wait_for_selector('tr[data-step="a"] svg[data-role="sparkline"]', timeout=30_000)

    def scale(step):
        spark = f'tr[data-step="{step}"] svg[data-role="sparkline"]'
        return (page.locator(spark + ' [data-role="spark-max"]').text_content(),
                page.locator(spark + ' [data-role="spark-min"]').text_content())

    assert scale("a") == ("2.5k ev/s", "0 ev/s")
    assert scale("b") == ("1 ev/s", "0 ev/s")  # an idle step's scale does not collapse
    row = page.locator('tr[data-step="join"]')
    assert row.get_attribute("class") == "held" and row.get_attribute("data-held") == "1"
    assert page.locator('svg g[data-step="join"]').get_attribute("data-held") == "1"
    assert page.locator('svg g[data-step="join"] rect').get_attribute("stroke") == HOT
    assert page.locator('p[data-role="held"]').inner_text() == \
        "join held: its inputs' CTIs are 9 apart"
    assert page.locator('tr[data-held]').count() == 1
