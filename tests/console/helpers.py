"""Signing in to the console over HTTP, as a browser does (its cookie jar); the browser tests' Chromium."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx

#: Where the browser tests keep their screenshots.
ARTIFACTS = Path(__file__).resolve().parents[1] / ".artifacts" / "console"


def chromium() -> str:
    """Debian's Chromium, which Playwright drives (it downloads no browser of its own)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is not installed: run `make test-deps` (apt-get install chromium)"
    return path


@contextlib.contextmanager
def signed_in(gateway, secret: str) -> Iterator[httpx.Client]:
    """A client holding the session cookie of ``secret``'s sign-in (redirects not followed)."""
    with httpx.Client(base_url=gateway.url) as browser:
        answer = sign_in(browser, secret)
        assert answer.status_code == 303, answer.text
        yield browser


def sign_in(browser: httpx.Client, secret: str, **headers: str) -> httpx.Response:
    """Post ``secret`` to the sign-in form as a browser does: the form's page first (its CSRF cookie
    and field), then the form."""
    form = browser.get("/console/login", headers=headers)
    assert form.status_code == 200, form.text
    return browser.post(
        "/console/login", data={"secret": secret, "login_csrf": login_csrf_of(form.text)}, headers=headers
    )


def login_csrf_of(page: str) -> str:
    """The sign-in form's CSRF token."""
    match = re.search(r'name="login_csrf" value="([^"]+)"', page)
    assert match, "no sign-in CSRF field on the page"
    return match.group(1)


def csrf_of(page: str) -> str:
    """The CSRF token of a console page's forms."""
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)
