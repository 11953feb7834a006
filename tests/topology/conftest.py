"""The ``page`` fixture: a page of headless Chromium (Debian's), driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.topology.live_kit import ARGS, CHROMIUM


@pytest.fixture()
def page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()
