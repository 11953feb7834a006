"""The ``page`` fixture: a fresh page of headless Chromium (Debian's), driven by Playwright.

Chromium starts once per test session (a start costs ~1 s and ~150 MB); each test gets a page
of its own, in a fresh browser context (its own cookies and storage), closed after it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.topology.live_kit import ARGS, CHROMIUM


@pytest.fixture(scope="session")
def _chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def page(_chromium: Any) -> Iterator[Any]:
    context = _chromium.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()
