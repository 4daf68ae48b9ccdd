"""Signing in to the console over HTTP, as a browser does (its cookie jar), for the tests."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import httpx


@contextlib.contextmanager
def signed_in(gateway, secret: str) -> Iterator[httpx.Client]:
    """A client holding the session cookie of ``secret``'s sign-in (redirects not followed)."""
    with httpx.Client(base_url=gateway.url) as browser:
        answer = browser.post("/console/login", data={"secret": secret})
        assert answer.status_code == 303, answer.text
        yield browser


def csrf_of(page: str) -> str:
    """The CSRF token of a console page's forms."""
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "no CSRF field on the page"
    return match.group(1)
