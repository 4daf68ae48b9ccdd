"""The API docs work offline: ``/docs`` (Swagger UI) and ``/redoc`` load every script, stylesheet and
icon from the gateway itself, with no credentials, as the docs pages always could be read."""

from __future__ import annotations

import re

import httpx
import pytest

#: What a page loads: ``src``/``href`` attributes, and Swagger UI's ``url:`` of the schema.
_LOADED = re.compile(r"""(?:src|href)="([^"]+)"|url: ?'([^']+)'""")


@pytest.mark.parametrize(("page", "assets"), [("/docs", 3), ("/redoc", 2)])
def test_a_docs_page_loads_all_it_needs_from_the_gateway(start_sim, start_gateway, page, assets) -> None:
    gateway = start_gateway(start_sim().url)
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        html = client.get(page)
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert not re.search(r"https?://", html.text), "the page names another host"
        loaded = [a or b for a, b in _LOADED.findall(html.text)]
        assert len([url for url in loaded if url != "/openapi.json"]) == assets, loaded
        for url in loaded:
            assert url.startswith("/"), url
            response = client.get(url)
            assert response.status_code == 200 and response.content, url
        assert_openai_404(client.get("/docs/assets/missing.js"))


def assert_openai_404(response: httpx.Response) -> None:
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
