"""The keys and groups pages in a real browser (Playwright, headless Chromium): what a key shows
(expiry, last use, the last day's requests and tokens, quota left), its edit form (selects, durations)
keeping a refused value with the field named, and revoke and delete asked before they are done."""

from __future__ import annotations

import re

import httpx
import openai
from playwright.sync_api import expect

from tests.console.helpers import ARTIFACTS

MODEL = "deepseek-v4-flash-0731"


def test_a_key_shows_its_use_keeps_a_refused_edit_and_asks_before_revoke_and_delete(
    start_sim, start_gateway, admin_key, signed_in_page
) -> None:
    gateway = start_gateway(start_sim().url)
    api = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin_key}"})
    assert api.post("/admin/groups", json={"name": "team"}).status_code == 201
    made = api.post(
        "/admin/keys",
        json={"name": "agent", "quota_tokens": 100_000, "quota_period": "day", "expires_in": "30d"},
    )
    secret = made.json()["key"]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    hi = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    for _ in range(2):
        client.chat.completions.create(**hi)

    page = signed_in_page(gateway.url)
    page.goto(gateway.url + "/console/keys")
    row = page.locator("tr[data-key=agent]")
    cells = row.locator("td")
    expect(cells.nth(1)).to_have_text("active")
    expect(cells.nth(2).locator("time")).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\d .* UTC$"))
    expect(cells.nth(3)).not_to_have_text("never")  # last used
    expect(cells.nth(4)).to_have_text("2")  # requests over the last day
    tokens = int(cells.nth(5).inner_text().replace(",", ""))
    assert tokens > 0
    expect(cells.nth(6)).to_have_text(f"{100_000 - tokens:,} / 100,000 a day")
    page.screenshot(path=ARTIFACTS / "keys-list.png", full_page=True)

    row.get_by_role("link", name="Edit").click()
    expect(page.locator("h1")).to_contain_text("agent")
    expect(page.locator("select[name=quota_period]")).to_have_value("day")
    expect(page.locator("input[name=expires]")).to_have_value(re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\dZ$"))
    page.fill("input[name=rpm]", "-5")
    page.fill("input[name=expires]", "soon")  # two bad fields: both named at once
    page.fill("input[name=tpm]", "1234")
    page.select_option("select[name=default_thinking]", "low")
    page.select_option("select[name=group]", "team")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[data-error=rpm]")).to_contain_text("greater than or equal to 1")
    expect(page.locator("[data-error=expires]")).to_contain_text("a duration such as 30d")
    expect(page.locator("input[name=rpm]")).to_have_value("-5")  # what was typed is kept
    expect(page.locator("input[name=tpm]")).to_have_value("1234")
    expect(page.locator("select[name=default_thinking]")).to_have_value("low")
    expect(page.locator("select[name=group]")).to_have_value("team")
    page.screenshot(path=ARTIFACTS / "key-refused.png", full_page=True)
    assert api.get("/admin/keys/agent").json()["tpm"] is None  # nothing was changed

    page.fill("input[name=rpm]", "120")
    page.fill("input[name=expires]", "")  # never
    page.get_by_role("button", name="Save").click()
    expect(page.locator("input[name=rpm]")).to_have_value("120")
    stored = api.get("/admin/keys/agent").json()
    fields = ("rpm", "tpm", "default_thinking", "group", "expires_at")
    assert [stored[name] for name in fields] == [120, 1234, "low", "team", None]

    page.get_by_role("link", name="Revoke…").click()
    expect(page.locator("h1")).to_have_text("Revoke the key agent?")
    page.get_by_role("link", name="Cancel").click()
    expect(page.locator("h1 .status")).to_have_text("active")
    assert api.get("/admin/keys/agent").json()["status"] == "active"
    page.get_by_role("link", name="Revoke…").click()
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("h1 .status")).to_have_text("revoked")
    expect(page.locator("input[name=grace]")).to_have_count(0)  # nothing left to rotate or change
    try:
        client.chat.completions.create(**hi)
        raise AssertionError("a revoked key was let through")
    except openai.AuthenticationError:
        pass

    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(gateway.url + "/console/keys")
    expect(page.locator("tr[data-key=agent]")).to_have_count(0)
    assert api.get("/admin/keys/agent").status_code == 404

    page.goto(gateway.url + "/console/audit")
    update = page.locator("tr[data-action='key.update']")
    expect(update.locator("td").nth(3)).to_contain_text("agent")  # by name, not only its id
    changes = update.locator("td.changes")
    expect(changes).to_contain_text("rpm: – → 120")
    expect(changes).to_contain_text("default_thinking: – → low")
    expect(changes).to_contain_text("group: – → team")
    expect(changes).to_contain_text(re.compile(r"expires_at: \d{4}-\d\d-\d\dT[^ ]+ → –"))
    expect(changes).not_to_contain_text("quota")  # what was not changed is not listed
    expect(page.locator("tr[data-action='key.revoke'] td").nth(3)).to_contain_text("agent")
    page.screenshot(path=ARTIFACTS / "audit.png", full_page=True)


def test_a_group_is_made_with_a_refused_value_kept_and_deleted_after_a_confirmation(
    start_sim, start_gateway, signed_in_page
) -> None:
    gateway = start_gateway(start_sim().url)
    page = signed_in_page(gateway.url)
    page.goto(gateway.url + "/console/groups")
    form = page.locator("#create form")
    form.locator("input[name=name]").fill("search")
    form.locator("input[name=quota_tokens]").fill("lots")
    form.locator("select[name=quota_period]").select_option("week")
    form.get_by_role("button", name="Create").click()
    expect(page.locator("[data-error=quota_tokens]")).to_be_visible()
    expect(form.locator("input[name=name]")).to_have_value("search")
    expect(form.locator("select[name=quota_period]")).to_have_value("week")
    form.locator("input[name=quota_tokens]").fill("50000")
    form.get_by_role("button", name="Create").click()
    row = page.locator("tr[data-group=search]")
    expect(row).to_contain_text("50,000 / 50,000 a week")

    row.get_by_role("link", name="Delete").click()
    page.get_by_role("link", name="Cancel").click()
    expect(page.locator("h1")).to_have_text("Group search")
    page.get_by_role("link", name="Delete…").click()
    page.get_by_role("button", name="Delete").click()
    expect(page.locator("tr[data-group=search]")).to_have_count(0)
