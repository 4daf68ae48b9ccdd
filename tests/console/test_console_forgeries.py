"""What a browser sends back that the gateway did not issue counts for nothing, and what it exports
cannot run in a spreadsheet (issue 57, item 12): a made-up sign-in CSRF cookie with the same value in
the form, or another gateway's genuine token, is refused; an exported cell a spreadsheet would
evaluate as a formula starts with ``'``."""

from __future__ import annotations

import csv
import io

import httpx
import openai

from gateway.console.pages import COOKIE, LOGIN_COOKIE
from tests.console.helpers import login_csrf_of, sign_in, signed_in
from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
ASK = [{"role": "user", "content": "hi"}]


def test_a_made_up_or_foreign_sign_in_token_is_refused(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, console_secret="s" * 32)
    other = start_gateway(sim.url, console_secret="t" * 32)
    admin = make_key("root", scopes=["admin"])
    genuine_elsewhere = login_csrf_of(httpx.get(other.url + "/console/login").text)
    for token in ("x" * 43, genuine_elsewhere):  # a value planted as the cookie and sent in the form
        with httpx.Client(base_url=gateway.url, cookies={LOGIN_COOKIE: token}) as browser:
            forged = browser.post("/console/login", data={"secret": admin, "login_csrf": token})
            assert forged.status_code == 403 and "expired" in forged.text
            assert COOKIE + "=" not in forged.headers.get("set-cookie", "")
    with httpx.Client(base_url=gateway.url) as browser:
        assert sign_in(browser, admin).status_code == 303  # the gateway's own form signs in


def test_exported_cells_that_would_be_formulas_stay_text(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url)
    for name in ("-1-1", "=HYPERLINK(1)", "+1", "@SUM(1)", "plain-1"):
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key(name), max_retries=0)
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)
    with signed_in(gateway, make_key("root", scopes=["admin"])) as browser:
        exports = {
            "/console/usage.csv": {"group_by": "key"},
            "/console/usage/series.csv": {"range": "hour", "by": "key"},
        }

        def cells(path: str) -> set[str]:
            exported = browser.get(path, params=exports[path]).text
            return {cell for row in csv.reader(io.StringIO(exported)) for cell in row}

        for path in exports:  # the ledger's rows are written behind the answers
            wait_until(lambda: "plain-1" in cells(path), timeout_s=60, what=f"the usage in {path}")  # noqa: B023
            assert {"'-1-1", "'=HYPERLINK(1)", "'+1", "'@SUM(1)", "plain-1"} <= cells(path)
            assert not cells(path) & {"-1-1", "=HYPERLINK(1)", "+1", "@SUM(1)"}
