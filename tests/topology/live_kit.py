"""What the tests of live, deployed queries share: rows fed through a queue, waiting for a
condition, a ``where`` that holds its batch, a second driver's script, and the headless
Chromium the web view's tests drive (the ``page`` fixture, in ``conftest.py``)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
#: a payload that runs script if any page shows it unescaped
EVIL = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def rows(feed: queue.Queue) -> Iterator[Any]:
    """The rows put on ``feed`` until a None."""
    while (row := feed.get()) is not None:
        yield row


def wait_for(cond: Callable[[], Any], timeout_s: float = 60.0,
             what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stall_at(t: int, marker: str, entered: str) -> Callable[[dict[str, Any]], bool]:
    """A where() predicate that holds its batch while ``marker`` exists, from event ``t`` on
    (it touches ``entered`` when it starts holding)."""
    def predicate(row: dict[str, Any]) -> bool:
        if row["t"] == t:
            open(entered, "w").close()
            while os.path.exists(marker):
                time.sleep(0.05)
        return True
    return predicate


def second_driver(script: str, tmp_path: Any, *args: str) -> Any:
    """Run ``script`` in another Python process connected to this test session's Ray (its
    address is the script's first argument, ``args`` the next ones) and return the JSON of
    its last printed line."""
    import ray

    path = tmp_path / "driver.py"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    address = ray.get_runtime_context().gcs_address
    done = subprocess.run([sys.executable, str(path), address, *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def open_why_panel(page: Any, answer: dict[str, Any]) -> None:
    """The web view's why panel in ``page``, its ``/api/why`` answered with ``answer`` (why's
    JSON), opened by a click on the step ``sink``."""
    from topology.seeing.ui import WHY_PANEL

    html = ('<html><body><section data-query="q"><table><tr data-step="sink">'
            '<td class="step">sink</td></tr></table></section>'
            + WHY_PANEL.replace(' nonce="NONCE"', "") + "</body></html>")
    page.route("http://cedar.test/", lambda route: route.fulfill(
        status=200, content_type="text/html", body=html))
    page.route("http://cedar.test/api/why*", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(answer)))
    page.goto("http://cedar.test/")
    page.click('tr[data-step="sink"] td.step')
