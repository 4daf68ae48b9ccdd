"""The console's browser tests: Playwright driving headless Chromium (Debian's ``chromium``, from
``make test-deps``; Playwright downloads no browser). Screenshots go to ``tests/.artifacts/console/``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.console.helpers import ARTIFACTS, chromium


@pytest.fixture
def admin_key(make_key) -> str:
    """Made before the browser starts: Playwright's sync API runs an event loop of its own."""
    return make_key("root", scopes=["admin"])


@pytest.fixture
def browser_page(admin_key) -> Iterator[Page]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        yield page
        browser.close()


@pytest.fixture
def signed_in_page(browser_page: Page, admin_key: str) -> Callable[[str], Page]:
    """``signed_in_page(gateway_url)``: the browser signed in to that gateway's console with the admin key."""

    def sign_in(url: str) -> Page:
        browser_page.goto(url + "/console")
        expect(browser_page).to_have_url(url + "/console/login")
        browser_page.fill("#secret", admin_key)
        browser_page.click("button[type=submit]")
        expect(browser_page.locator("h1")).to_have_text("Overview")
        return browser_page

    return sign_in
