"""``cedar ui`` end to end in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright opens the page of a deployed query, sees its topology and numbers, watches the
numbers move as events flow, and runs no script that a payload carries."""

from __future__ import annotations

import http.client
import json
import os
import queue
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from tests.conftest import REPO
from tests.topology.live_kit import EVIL
from tests.topology.live_kit import rows as _rows
from tests.topology.live_kit import stall_at as _stall_at
from tests.topology.live_kit import wait_for as _wait_for
from topology import Stream
from topology.running.registry import NAMESPACE, actor_name
from topology.seeing.ui import PAYLOAD_CHARS, ROWS_SHOWN, Monitor, serve


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


# -- the page stays up: a step stuck in one long batch ---------------------------------------

def _get(url: str, host: str | None = None, timeout_s: float = 30.0) -> tuple[int, bytes]:
    """A real HTTP GET of ``url``, with ``host`` as its Host header when given."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.putrequest("GET", parts.path or "/", skip_host=host is not None)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_step_stuck_in_a_batch_shows_as_busy_and_the_page_keeps_updating(
        ray_session, page, tmp_path):
    marker, entered = str(tmp_path / "hold"), str(tmp_path / "holding")
    open(marker, "w").close()
    feed: queue.Queue = queue.Queue()
    q = (Stream.from_rows(_rows(feed), start="t").where(_stall_at(5, marker, entered))
         .select(lambda r: {"t": r["t"]}).deploy("ui-stuck", flush_ms=20))
    stuck = next(s for s in q.steps if s.startswith("where"))
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        for t in range(5):
            feed.put({"t": t})
        _wait_for(lambda: json.loads(_get(url + "api/queries")[1])["queries"].get("ui-stuck", {})
                  .get("steps", {}).get("sink", {}).get("events_in") == 5, what="5 events")
        feed.put({"t": 5})
        _wait_for(lambda: os.path.exists(entered), what="the step to hold its batch")
        for _ in range(3):  # each refresh answers at once: the step, busy, says so
            time.sleep(0.6)  # past the monitor's cache
            began = time.monotonic()
            code, body = _get(url + "api/queries", timeout_s=30)
            took = time.monotonic() - began
            assert code == 200 and took < 10, f"the page took {took:.1f} s"
            steps = json.loads(body)["queries"]["ui-stuck"]["steps"]
            assert steps[stuck]["status"].startswith("busy in one batch for ")
            assert steps[stuck]["busy"] is True
            assert steps[stuck]["events_in"] == 6  # from its last report, and the batch in
            assert steps["sink"]["answering"] and steps["sink"]["status"] == "running"
        # the page names the stuck step, and goes on refreshing
        page.goto(url)
        cell = (f'section[data-query="ui-stuck"] tr[data-step="{stuck}"] '
                f'td[data-field="status"]')
        page.wait_for_function(
            f"""() => {{ const c = document.querySelector('{cell}');
                       return c && c.textContent.startsWith("busy in one batch"); }}""",
            timeout=30_000)
        assert page.locator(f'section[data-query="ui-stuck"] tr[data-step="{stuck}"]'
                            ).get_attribute("class") == "stuck"
        first = page.locator("#updated").inner_text()
        page.wait_for_function(f"""() => document.getElementById("updated").textContent
                                         !== {json.dumps(first)}""", timeout=30_000)
        # once the batch is done, the step answers again
        os.remove(marker)
        _wait_for(lambda: json.loads(_get(url + "api/queries")[1])["queries"]["ui-stuck"]
                  ["steps"][stuck]["status"] == "running", what="the step to answer again")
    finally:
        if os.path.exists(marker):
            os.remove(marker)
        feed.put(None)
        server.shutdown()
        q.stop()


# -- in flight: the batches sent and not yet taken --------------------------------------------

def test_in_flight_counts_only_the_batches_not_yet_taken(ray_session):
    feed: queue.Queue = queue.Queue()
    q = (Stream.from_rows(_rows(feed), start="t").select(lambda r: {"t": r["t"]})
         .deploy("ui-in-flight", flush_ms=10))
    monitor = Monitor()
    try:
        for t in range(20):  # slowly: one batch per event, more batches than max_in_flight
            feed.put({"t": t})
            time.sleep(0.05)
        _wait_for(lambda: monitor.sample(0)["queries"]["ui-in-flight"]["steps"]["sink"]
                  ["events_in"] == 20, what="the 20 events at the sink")
        source = next(s for s in q.steps if s.startswith("from_rows"))
        assert q.stats()[source]["batches_out"] > 8
        # every batch was taken: nothing is in flight any more
        _wait_for(lambda: all(s["in_flight"] == 0 for s in monitor.sample(0)["queries"]
                              ["ui-in-flight"]["steps"].values()),
                  timeout_s=20, what="in_flight to fall to 0")
    finally:
        feed.put(None)
        q.stop()


# -- a refresh moves only what it shows --------------------------------------------------------

def test_a_refresh_moves_only_the_rows_shown_with_shortened_payloads(ray_session):
    big = 5_000_000
    q = (Stream.from_rows([{"t": t} for t in range(12)], start="t")
         .select(lambda r: {"t": r["t"], "blob": "x" * big})
         .deploy("ui-big", history=True))
    try:
        _wait_for(lambda: q.stats()["sink"]["finished"], what="the 12 rows at the sink")
        data = Monitor().sample(0)["queries"]["ui-big"]
        assert [r[0] for r in data["rows"]] == list(range(2, 12))  # the newest ROWS_SHOWN
        assert all(len(r[2]) <= PAYLOAD_CHARS for r in data["rows"])
        assert data["rows"][0][2].startswith("{'t': 2, 'blob': 'xxx")
        assert len(json.dumps(data)) < 20_000  # not 10 payloads of 5 MB
    finally:
        q.stop()


def test_the_sink_sends_its_newest_rows_only(ray_session):
    import ray

    rows = [{"t": t % 997, "k": t} for t in range(20_000)]
    q = Stream.from_rows(rows, start="t").deploy("ui-many", history=True)
    try:
        _wait_for(lambda: q.stats()["sink"]["finished"], what="20,000 rows at the sink")
        sink = ray.get_actor(actor_name("ui-many", "sink"), namespace=NAMESPACE)
        newest = ray.get(sink.newest_rows.remote(ROWS_SHOWN, PAYLOAD_CHARS))
        whole = sorted(q.snapshot(), key=lambda r: (r[0], r[1]))
        assert len(newest) == ROWS_SHOWN
        assert [(s, e) for s, e, _ in newest] == [(s, e) for s, e, _ in whole[-ROWS_SHOWN:]]
        assert {p for _, _, p in newest} <= {repr(p) for s, _, p in whole if s == 996}
    finally:
        q.stop()


# -- the page stays private: only its own host names -------------------------------------------

def test_a_foreign_host_header_is_refused(ray_session):
    server = serve(port=0)
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/"
    try:
        for path in ("", "api/queries"):
            code, body = _get(url + path, host=f"attacker.example:{port}")
            assert code == 403, (path, code)
            text = body.decode()
            assert "attacker.example" in text and "http://127.0.0.1:" in text
            assert "--allow-host" in text
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}",
                     "localhost:9999", "LOCALHOST", "127.0.0.1"):  # (a tunnel: other ports)
            code, body = _get(url + "api/queries", host=host)
            assert code == 200, host
            assert "queries" in json.loads(body)
        code, _ = _get(url, host="127.0.0.1.attacker.example")
        assert code == 403
    finally:
        server.shutdown()


def test_the_bound_address_is_accepted_at_its_port_and_allowed_names_anywhere():
    server = serve("127.0.0.2", port=0, allow_hosts=["head.internal"])
    port = server.server_address[1]
    url = f"http://127.0.0.2:{port}/"
    try:
        assert _get(url, host=f"127.0.0.2:{port}")[0] == 200
        assert _get(url, host="127.0.0.2:1")[0] == 403  # not its port
        assert _get(url, host=f"head.internal:{port}")[0] == 200
        assert _get(url, host=f"other.internal:{port}")[0] == 403
        conn = http.client.HTTPConnection("127.0.0.2", port, timeout=10)  # no Host at all
        try:
            conn.putrequest("GET", "/", skip_host=True)
            conn.endheaders()
            assert conn.getresponse().status == 403
        finally:
            conn.close()
    finally:
        server.shutdown()


# -- cedar ui fails fast, in its own words, when the cluster cannot be reached -----------------

@pytest.mark.parametrize("address, says", [
    ("127.0.0.1:1", "cannot reach the Ray cluster at '127.0.0.1:1'"),
    ("no-port-here", "'no-port-here' is not a Ray cluster's address"),
])
def test_cedar_ui_fails_fast_when_the_cluster_cannot_be_reached(address, says):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "topology.app.cli", "ui", "--address", address,
                           "--port", "0"], capture_output=True, text=True, timeout=60, env=env,
                          cwd=REPO)
    took = time.monotonic() - began
    assert done.returncode == 2, done.stderr
    assert took < 30
    err = done.stderr
    assert err.startswith("cedar ui: ") and says in err
    assert "6379" in err  # where the address is usually found
    assert "Traceback" not in err


# -- time as people read it ------------------------------------------------------------------

def test_times_from_timestamps_show_as_times_and_ticks_stay_ticks(ray_session, page):
    import datetime
    import re

    from operators.events import Cti, Insert
    from operators.ingress import AdvanceTime

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    feed: queue.Queue = queue.Queue()
    live = Stream.from_rows(_rows(feed), start="ts", advance=AdvanceTime(every=1))
    times = live.union(Stream.from_rows([{"ts": t0, "v": -1}], start="ts")).deploy(
        "ui-times", history=True, flush_ms=10)
    ticks = Stream.from_events([Insert("a", 0, 50, 7), Cti(10)]).deploy("ui-ticks",
                                                                      history=True)
    server = serve(port=0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    monitor = Monitor()
    try:
        for i in range(5):
            feed.put({"ts": t0 + datetime.timedelta(seconds=i), "v": i})
        _wait_for(lambda: (monitor.sample(0)["queries"].get("ui-times", {}).get("steps", {})
                           .get("sink", {}).get("cti") or 0) > 0, what="a CTI at the sink")
        data = monitor.sample(0)["queries"]
        shown = data["ui-times"]["steps"]["sink"]["shown"]
        assert data["ui-times"]["clock"] == "timestamps"
        assert re.fullmatch(r"2026-01-01T00:00:0\d(\.\d+)?Z", shown["cti"]), shown
        assert re.fullmatch(r"[\d.]+ (µs|ms|s|min|h|d)", shown["cti_lag"]), shown
        # a point event reads "at T", not "[T, T + 1 µs)"
        assert re.fullmatch(r"at 2026-01-01T00:00:0\dZ", data["ui-times"]["rows"][0][3])
        _wait_for(lambda: monitor.sample(0)["queries"]["ui-ticks"]["rows"], what="ticks rows")
        plain = monitor.sample(0)["queries"]["ui-ticks"]
        assert plain["clock"] == "ticks"
        assert plain["rows"][0][3] == "[0, 50)"
        assert plain["steps"]["sink"]["shown"]["cti_lag"].isdigit()
        # and the page shows them so
        page.goto(url)
        cell = 'section[data-query="ui-times"] tr[data-step="sink"] td[data-field="cti"]'
        page.wait_for_function(f"""() => {{ const c = document.querySelector('{cell}');
            return c && c.textContent.startsWith("2026-01-01T"); }}""", timeout=60_000)
        span = page.locator('section[data-query="ui-times"] td[data-role="span"]').first
        assert span.inner_text().startswith("at 2026-01-01T00:00:0")
        tick_span = page.locator('section[data-query="ui-ticks"] td[data-role="span"]').first
        assert tick_span.inner_text() == "[0, 50)"
    finally:
        feed.put(None)
        server.shutdown()
        times.stop()
        ticks.stop()


def test_a_browser_that_closes_before_its_answer_prints_no_traceback(ray_session, capfd):
    # a tab closed (or a page left) while the server answers: the connection is reset under
    # the server's feet (SO_LINGER 0 sends a RST). It printed "Exception occurred during
    # processing of request" and a BrokenPipeError / ConnectionResetError traceback
    import socket
    import struct

    server = serve(port=0, sample_s=None)
    port = server.server_address[1]
    try:
        for path in ("/api/queries", "/", "/api/why?query=nope&step=sink") * 5:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        time.sleep(1.0)
        # the server lives on and answers the next page
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/queries", timeout=60).read()
        assert "queries" in json.loads(body)
    finally:
        server.shutdown()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipeError" not in err and \
        "ConnectionResetError" not in err, err[-2000:]


def test_payload_fields_holding_times_show_as_times(ray_session):
    # a table whose ts column is a timestamp: the plan's clock is timestamps, and the ts of
    # each payload (ticks once read) shows as the time it is, in the rows and the why report
    import datetime

    import pyarrow as pa

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    table = pa.table({"ts": pa.array([t0 + datetime.timedelta(seconds=i) for i in range(5)],
                                     pa.timestamp("us", "UTC")), "kwh": [0.5] * 5})
    q = Stream.from_arrow(table, start="ts").deploy("ui-payload-times", history=True)
    monitor = Monitor()
    try:
        _wait_for(lambda: len(monitor.sample(0)["queries"].get("ui-payload-times", {})
                              .get("rows", [])) == 5, what="the rows")
        rows = monitor.sample(0)["queries"]["ui-payload-times"]["rows"]
        start, _, payload, span = rows[-1]
        assert span == "at 2026-01-01T00:00:04Z"
        assert "'ts': 2026-01-01T00:00:04Z" in payload and str(start) not in payload, payload
    finally:
        q.stop()


def test_a_generator_of_datetimes_shows_times_once_its_first_row_came(ray_session):
    # nothing declares a generator's clock: its first row tells, and the readers (the web
    # view, why) go by what its source reports from then on
    import datetime

    from operators.ingress import AdvanceTime

    t0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    feed: queue.Queue = queue.Queue()
    q = Stream.from_rows(_rows(feed), start="ts", advance=AdvanceTime(every=1)).deploy(
        "ui-gen-times", history=True, flush_ms=10)
    monitor = Monitor()
    try:
        for i in range(3):
            feed.put({"ts": t0 + datetime.timedelta(seconds=i)})
        _wait_for(lambda: len(monitor.sample(0)["queries"].get("ui-gen-times", {})
                              .get("rows", [])) == 3, what="the rows")
        data = monitor.sample(0)["queries"]["ui-gen-times"]
        assert data["clock"] == "timestamps"
        assert data["steps"]["sink"]["shown"]["cti"].startswith("2026-01-01T00:00:0")
        assert data["rows"][-1][3] == "at 2026-01-01T00:00:02Z"
        assert "2026-01-01T00:00:0" in str(q.why())
    finally:
        feed.put(None)
        q.stop()
