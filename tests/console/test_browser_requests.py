"""The request log in a real browser (Playwright, headless Chromium): latest arrival first, filtered
by key, route, status and request id, paged, and one request's page with every figure the ledger
holds and its trace id."""

from __future__ import annotations

from datetime import datetime

import anthropic
import httpx
import openai
from playwright.sync_api import expect

from tests.console.helpers import ARTIFACTS

MODEL = "deepseek-v4-flash-0731"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_the_log_filters_pages_and_shows_one_requests_figures(
    start_sim, start_gateway, admin_key, signed_in_page
) -> None:
    gateway = start_gateway(start_sim().url)
    api = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin_key}"})
    alpha, beta = (api.post("/admin/keys", json={"name": name}).json()["key"] for name in ("alpha", "beta"))
    chat = openai.OpenAI(base_url=gateway.url + "/v1", api_key=alpha, max_retries=0)
    for _ in range(51):  # one more than a page
        chat.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    messages = anthropic.Anthropic(base_url=gateway.url, api_key=beta, max_retries=0)
    messages.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    traced = openai.OpenAI(base_url=gateway.url + "/v1", api_key=beta, max_retries=0)
    streamed = traced.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "count to ten"}],
        max_tokens=32,
        stream=True,
        extra_headers={"x-request-id": "order-7731", "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"},
    )
    assert [chunk.id for chunk in streamed]
    refused = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {beta}"},
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert refused.status_code == 404

    page = signed_in_page(gateway.url)
    page.goto(gateway.url + "/console/requests")
    rows = page.locator("table.requests tbody tr")
    expect(rows).to_have_count(50)
    arrived = [
        datetime.fromisoformat(t)
        for t in rows.locator("time").evaluate_all("els => els.map(e => e.dateTime)")
    ]
    assert arrived == sorted(arrived, reverse=True)  # latest arrival first
    page.get_by_role("link", name="Older →").click()
    expect(page.locator("nav.pages")).to_contain_text("Page 2")
    expect(rows).to_have_count(54 - 50)

    page.goto(gateway.url + "/console/requests")
    page.select_option("select[name=key]", "beta")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(3)
    page.select_option("select[name=route]", "/v1/messages")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    page.select_option("select[name=route]", "")
    page.fill("input[name=status]", "4xx")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("404")
    page.fill("input[name=status]", "")
    page.select_option("select[name=range]", "hour")
    page.fill("input[name=q]", "order-77")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    page.screenshot(path=ARTIFACTS / "requests.png", full_page=True)

    rows.first.get_by_role("link").click()
    expect(page.locator("[data-trace]")).to_have_text(TRACE_ID)
    facts = page.locator("dl.facts").first
    expect(facts).to_contain_text("order-7731")
    expect(facts).to_contain_text("beta")
    expect(page.locator("dl.facts").nth(2)).to_contain_text("tok/s")  # decode speed
    page.screenshot(path=ARTIFACTS / "request.png", full_page=True)

    page.goto(gateway.url + "/console/requests?status=abc")
    expect(page.locator("p.error")).to_contain_text("status must be a code")
    expect(page.locator("input[name=status]")).to_have_value("abc")
    listed = api.get("/admin/requests", params={"key": "beta", "search": "order-77"}).json()
    assert [row["client_request_id"] for row in listed["data"]] == ["order-7731"] and not listed["has_more"]
    request_id = listed["data"][0]["request_id"]  # the client saw it as its answer's id, chatcmpl-<id>
    by_answer = api.get("/admin/requests", params={"search": f"chatcmpl-{request_id}"}).json()["data"]
    assert [row["request_id"] for row in by_answer] == [request_id]
    assert api.get("/admin/requests", params={"status": "abc"}).status_code == 400
