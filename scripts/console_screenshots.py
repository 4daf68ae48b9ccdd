"""``make screenshots``: the console's pictures in docs/, taken from a real run rather than by hand.

Starts a gateway of its own (the built-in simulator, a throwaway database: :mod:`local_gateway`),
makes keys, a group and some traffic with the official SDKs, then signs in to the console in headless
Chromium (Debian's, driven by Playwright) and photographs each page while a stream holds a slot.
``--out DIR`` (default ``docs``) receives ``console-<page>.png``.
"""

from __future__ import annotations

import argparse
import shutil
import threading
from pathlib import Path

from local_gateway import LocalGateway, local_gateway
from openai import OpenAI
from playwright.sync_api import Page, expect, sync_playwright

MODEL = "deepseek-v4-flash-0731"
#: The pages photographed: file name -> address under /console (the key's and request's found below).
PAGES = ("keys", "usage", "requests", "audit")


def traffic(gateway: LocalGateway) -> tuple[str, str]:
    """Keys, a group and requests to show; the admin key and one client key."""
    admin = gateway.cli("keys", "create", "ops", "--admin").strip().splitlines()[-1]
    gateway.cli("groups", "create", "search", "--rpm", "600", "--quota", "5000000", "--quota-period", "month")
    client_keys = {}
    for name, extra in (
        ("search-bot", ("--group", "search")),
        ("ci-agent", ("--quota", "200000", "--quota-period", "day")),
    ):
        client_keys[name] = (
            gateway.cli("keys", "create", name, "--expires-in", "30d", *extra).strip().splitlines()[-1]
        )
    for name, turns in (("search-bot", 6), ("ci-agent", 3)):
        client = OpenAI(base_url=gateway.url + "/v1", api_key=client_keys[name], max_retries=0)
        for turn in range(turns):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"question {turn}"}], max_tokens=16
            )  # short answers: the pages show the same rows, and the simulator's 90 tokens/s add up
    gateway.cli("keys", "update", "ci-agent", "--rpm", "120", "--thinking", "low")
    return admin, client_keys["search-bot"]


def stream_in_background(gateway: LocalGateway, key: str) -> threading.Thread:
    """A long stream, so the overview shows a slot held."""

    def run() -> None:
        client = OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
        for _ in client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "count to 300"}], max_tokens=600, stream=True
        ):
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def photograph(page: Page, gateway: LocalGateway, admin: str, client_key: str, out: Path) -> list[Path]:
    taken = []

    def shot(name: str) -> None:
        path = out / f"console-{name}.png"
        page.screenshot(path=path, full_page=True)
        taken.append(path)

    page.goto(gateway.url + "/console/login")
    page.fill("#secret", admin)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Overview")
    streaming = stream_in_background(gateway, client_key)
    expect(page.locator("[data-live=slots]")).to_have_text("1/2", timeout=10_000)
    shot("overview")
    streaming.join(timeout=60)
    for name in PAGES:
        page.goto(gateway.url + f"/console/{name}")
        if name == "usage":
            expect(page.locator("[data-chart=tokens][data-drawn]")).to_have_count(1)
        shot(name)
    page.goto(gateway.url + "/console/keys")
    page.locator("tr[data-key=ci-agent]").get_by_role("link", name="Edit").click()
    shot("key")
    page.goto(gateway.url + "/console/requests")
    page.locator("table.requests tbody tr").first.get_by_role("link").click()
    shot("request")
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where the PNG files go")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed: run `make test-deps` (apt-get install chromium)")
    with local_gateway() as gateway, sync_playwright() as playwright:
        admin, client_key = traffic(gateway)
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        try:
            for path in photograph(page, gateway, admin, client_key, args.out):
                print(path)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
