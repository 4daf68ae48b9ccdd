"""The console in a real browser: Playwright driving headless Chromium (Debian's ``chromium``, from
``make test-deps``; Playwright downloads no browser). Sign in with an admin key, create a key and use
it through the OpenAI SDK, see its stream hold a slot on the live overview and its request appear,
rotate it and see the old secret refused, revoke it and see the new one refused. Screenshots of each
page are kept in ``tests/.artifacts/console/``."""

from __future__ import annotations

import threading

import openai
from playwright.sync_api import expect

from tests.console.helpers import ARTIFACTS
from tests.support.clients import chat_ok

MODEL = "deepseek-v4-flash-0731"


def test_sign_in_create_use_watch_rotate_revoke(start_sim, start_gateway, signed_in_page) -> None:
    gateway = start_gateway(start_sim(decode_tps=40.0).url)
    page = signed_in_page(gateway.url)

    page.goto(gateway.url + "/console/keys")
    page.click("#create summary")
    page.fill("form[action^='/console/keys'] input[name=name]", "browser-client")
    page.fill("form[action^='/console/keys'] input[name=rpm]", "600")
    page.click("form[action^='/console/keys'] button[type=submit]")
    secret = page.locator("#secret").inner_text()
    assert secret.startswith("dsk-")
    page.screenshot(path=ARTIFACTS / "key-created.png")

    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    streamed: list[str] = []

    def stream() -> None:
        for chunk in client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "count from 1 to 60"}],
            max_tokens=200,
            stream=True,
        ):
            streamed.append(chunk.id)

    page.goto(gateway.url + "/console")
    running = threading.Thread(target=stream)
    running.start()
    slots = page.locator("[data-live=slots]")
    expect(slots).to_have_text("1/2", timeout=10_000)  # the live refresh shows it holding a slot
    expect(page.locator("[data-live=keys]")).to_contain_text("browser-client")
    page.screenshot(path=ARTIFACTS / "overview-live.png")
    running.join(timeout=30)
    assert streamed
    expect(slots).to_have_text("0/2", timeout=10_000)

    page.goto(gateway.url + "/console/requests")
    expect(page.locator("tbody tr").first).to_contain_text("browser-client")
    page.screenshot(path=ARTIFACTS / "requests.png")

    page.goto(gateway.url + "/console/keys")
    page.locator("tr[data-key=browser-client]").get_by_role("link", name="Edit").click()
    page.fill("input[name=grace]", "0")
    page.get_by_role("button", name="Rotate").click()
    new_secret = page.locator("#secret").inner_text()
    assert new_secret.startswith("dsk-") and new_secret != secret
    assert not chat_ok(gateway.url, secret) and chat_ok(gateway.url, new_secret)

    page.goto(gateway.url + "/console/keys")
    page.locator("tr[data-key=browser-client]").get_by_role("link", name="Revoke").click()
    page.get_by_role("button", name="Revoke").click()  # the confirmation page's
    page.goto(gateway.url + "/console/keys")
    expect(page.locator("tr[data-key=browser-client]")).to_contain_text("revoked")
    assert not chat_ok(gateway.url, new_secret)
    page.screenshot(path=ARTIFACTS / "keys.png")

    page.goto(gateway.url + "/console/audit")
    expect(page.locator("tbody")).to_contain_text("key.revoke")
    page.goto(gateway.url + "/console/usage")
    expect(page.locator("[data-chart=tokens]")).to_have_attribute("data-drawn", "browser-client")
    page.screenshot(path=ARTIFACTS / "usage.png")
