"""The usage page in a real browser (Playwright, headless Chromium): tokens and requests over time,
split by key or model, for a chosen range, drawn by uPlot; the same figures as CSV and JSON."""

from __future__ import annotations

import csv
import io

import httpx
import openai
from playwright.sync_api import expect

from tests.console.helpers import ARTIFACTS

MODEL = "deepseek-v4-flash-0731"


def test_the_charts_show_each_keys_series_for_the_chosen_range_and_export_the_same_figures(
    start_sim, start_gateway, admin_key, signed_in_page
) -> None:
    gateway = start_gateway(start_sim().url)
    api = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin_key}"})
    for name, turns in (("alpha", 3), ("beta", 1)):
        secret = api.post("/admin/keys", json={"name": name}).json()["key"]
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
        for _ in range(turns):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
            )

    page = signed_in_page(gateway.url)
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.goto(gateway.url + "/console/usage")
    page.select_option("select[name=range]", "hour")
    page.get_by_role("button", name="Show").click()
    tokens = page.locator("[data-chart=tokens]")
    expect(tokens).to_have_attribute("data-drawn", "alpha,beta")
    expect(tokens.locator(".u-legend")).to_contain_text("alpha")
    expect(tokens.locator(".u-axis").nth(1)).to_be_visible()
    expect(page.locator("h2").first).to_have_text("Tokens per 1 min, by key")
    page.screenshot(path=ARTIFACTS / "usage.png", full_page=True)

    totals = {
        row.locator("td").nth(0).inner_text(): int(row.locator("td").nth(1).inner_text())
        for row in page.locator("table[data-totals=key] tbody tr").all()
    }
    assert totals == {"alpha": 3, "beta": 1}
    exported = page.locator("a", has_text="JSON").first.get_attribute("href")
    laid_out = page.evaluate("url => fetch(url).then(r => r.json())", exported)
    assert {s["name"]: sum(s["requests"]) for s in laid_out["series"]} == {"alpha": 3, "beta": 1}
    as_csv = page.evaluate("url => fetch(url).then(r => r.text())", exported.replace(".json", ".csv"))
    rows = list(csv.DictReader(io.StringIO(as_csv)))
    assert sum(int(r["requests"]) for r in rows if r["name"] == "alpha") == 3
    assert sum(int(r["tokens"]) for r in rows) == sum(sum(s["tokens"]) for s in laid_out["series"]) > 0

    page.select_option("select[name=by]", "model")
    page.get_by_role("button", name="Show").click()
    expect(tokens).to_have_attribute("data-drawn", MODEL)

    page.select_option("select[name=range]", "custom")
    page.fill("input[name=from]", "2020-01-01T00:00")
    page.fill("input[name=to]", "2020-01-02T00:00")
    page.get_by_role("button", name="Show").click()
    expect(tokens).to_have_text("No requests in this range.")
    expect(page.locator("table[data-totals=key]")).to_contain_text("No requests in this range.")
    expect(page.locator("h2").first).to_have_text("Tokens per 15 min, by model")

    assert not problems, problems  # no script error, no refusal by the Content-Security-Policy

    page.fill("input[name=to]", "2019-01-01T00:00")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("p.error")).to_have_text("the end of the range must come after its start")
    expect(page.locator("input[name=from]")).to_have_value("2020-01-01T00:00")
