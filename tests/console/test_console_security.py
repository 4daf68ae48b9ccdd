"""The console's defences through a real gateway: no session → the sign-in page; a client key signs
in to nothing; the session cookie's flags; a form without its CSRF token → 403; text from a key's
metadata shown escaped; a session that expires; sign-out; the console off."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from gateway.app import token_config
from gateway.auth.tokens import expires_at, mint
from gateway.config import Settings
from gateway.console.pages import COOKIE
from tests.console.helpers import csrf_of, sign_in, signed_in


@pytest.fixture
def console(start_sim, start_gateway):
    sim = start_sim()
    return lambda **settings: start_gateway(sim.url, trusted_proxies="127.0.0.1", **settings)


def test_no_session_is_sent_to_sign_in(console) -> None:
    gateway = console()
    for path in ("/console", "/console/keys", "/console/usage", "/console/requests", "/console/audit"):
        answer = httpx.get(gateway.url + path)
        assert (answer.status_code, answer.headers["location"]) == (303, "/console/login"), path
    form = httpx.get(gateway.url + "/console/login")
    assert form.status_code == 200 and 'name="secret"' in form.text and 'type="password"' in form.text
    assert "script-src 'self'" in form.headers["content-security-policy"]
    assert httpx.get(gateway.url + "/console/static/console.js").status_code == 200


def test_a_client_key_signs_in_to_nothing_and_a_bad_one_is_401(console, make_key) -> None:
    gateway = console()
    with httpx.Client(base_url=gateway.url) as browser:
        client = sign_in(browser, make_key("app"))
        wrong = sign_in(browser, "dsk-" + "x" * 43)
    assert client.status_code == 403 and "not an admin key" in client.text
    assert wrong.status_code == 401
    for refused in (client, wrong):
        assert COOKIE + "=" not in refused.headers.get("set-cookie", "")


def test_the_session_cookie_is_httponly_strict_and_secure_behind_tls(console, make_key) -> None:
    gateway = console()
    admin = make_key("root", scopes=["admin"])
    with httpx.Client(base_url=gateway.url) as browser:
        plain = sign_in(browser, admin)
        behind_tls = sign_in(browser, admin, **{"X-Forwarded-Proto": "https"})
    cookie = next(c for c in plain.headers.get_list("set-cookie") if c.startswith(COOKIE + "="))
    assert plain.status_code == 303 and plain.headers["location"] == "/console"
    assert re.match(r"dspark_console=[\w-]{40,};", cookie)
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert "Max-Age=28800" in cookie and "Secure" not in cookie and admin not in cookie
    assert all("Secure" in c for c in behind_tls.headers.get_list("set-cookie"))


def test_a_form_without_its_csrf_token_is_refused(console, make_key) -> None:
    gateway = console()
    with signed_in(gateway, make_key("root", scopes=["admin"])) as browser:
        token = csrf_of(browser.get("/console/keys").text)
        for form in ({"name": "sneaky"}, {"name": "sneaky", "csrf": "x" * len(token)}):
            refused = browser.post("/console/keys", data=form)
            assert refused.status_code == 403 and "expired" in refused.text
        assert "sneaky" not in browser.get("/console/keys").text
        made = browser.post("/console/keys", data={"name": "proper", "csrf": token})
        assert made.status_code == 200 and re.search(r'<code id="secret">dsk-[\w-]{43}</code>', made.text)


def test_a_keys_metadata_is_shown_escaped(console, make_key) -> None:
    gateway = console()
    make_key("labelled", metadata={"note": "<script>alert(1)</script>", "owner": '"><img src=x>'})
    with signed_in(gateway, make_key("root", scopes=["admin"])) as browser:
        page = browser.get("/console/keys/labelled").text
    assert "<script>alert" not in page and "<img src=x>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_session_expires_and_sign_out_ends_it(console, make_key) -> None:
    gateway = console(console_session_ttl_s=1.0)
    admin = make_key("root", scopes=["admin"])
    with signed_in(gateway, admin) as browser:
        assert browser.get("/console").status_code == 200
        time.sleep(1.2)
        assert browser.get("/console").status_code == 303  # expired
    with signed_in(console(), admin) as browser:
        token = csrf_of(browser.get("/console").text)
        assert browser.post("/console/logout", data={"csrf": token}).headers["location"] == "/console/login"
        assert browser.get("/console").status_code == 303


def test_the_console_can_be_turned_off(start_sim, start_gateway) -> None:
    gateway = start_gateway(start_sim().url, console=False)
    assert httpx.get(gateway.url + "/console").status_code == 404
    assert httpx.get(gateway.url + "/console/login").status_code == 404


def test_a_session_ends_with_its_key_or_token(console, make_key) -> None:
    secret = "s" * 40
    gateway = console(jwt_secret=secret)
    admin, other = make_key("victim", scopes=["admin"]), make_key("other", scopes=["admin"])
    with signed_in(gateway, admin) as browser:
        assert browser.get("/console").status_code == 200
        keys = httpx.get(gateway.url + "/admin/keys", headers={"Authorization": f"Bearer {other}"}).json()
        victim = next(k["id"] for k in keys["data"] if k["name"] == "victim")
        httpx.post(gateway.url + f"/admin/keys/{victim}/revoke", headers={"Authorization": f"Bearer {other}"})
        assert browser.get("/console").status_code == 303  # revoked: the session is over
    # exp is whole seconds (iat rounded down): 3 s leave at least 2 for the first page
    token = mint(token_config(Settings(upstream="http://x", jwt_secret=secret)), "ops", ["admin"], 3.0)
    with signed_in(gateway, token) as browser:
        assert browser.get("/console").status_code == 200
        time.sleep(max(0.0, (expires_at(token) or 0) - time.time()) + 0.3)
        assert browser.get("/console").status_code == 303  # the JWT expired: so did its session


def test_console_forms_refuse_what_the_api_refuses_and_keep_what_they_did_not_change(
    console, make_key
) -> None:
    gateway = console()
    make_key("odd", models=["m,1"], aliases={"a,b": "deepseek-v4-flash-0731"})
    with signed_in(gateway, make_key("root", scopes=["admin"])) as browser:
        page = browser.get("/console/keys/odd").text
        token = csrf_of(page)
        key_id = re.search(r'action="/console/keys/(key_[0-9a-f]+)" class="grid"', page).group(1)
        deep = browser.post(
            f"/console/keys/{key_id}", data={"csrf": token, "metadata": '{"a":' * 1500 + "1" + "}" * 1500}
        )
        nan = browser.post(f"/console/keys/{key_id}", data={"csrf": token, "metadata": '{"a": NaN}'})
        for refused in (deep, nan):  # read as the admin API reads its bodies, named on the form
            assert refused.status_code == 400 and 'data-error="metadata"' in refused.text
        shown = {"models": "m,1", "aliases": "a,b=deepseek-v4-flash-0731"}
        form = {"csrf": token, "rpm": "9", **shown, **{f"was_{k}": v for k, v in shown.items()}}
        assert browser.post(f"/console/keys/{key_id}", data=form).status_code == 303
        bad_grace = browser.post(f"/console/keys/{key_id}/rotate", data={"csrf": token, "grace": "abc"})
        assert bad_grace.status_code == 400 and 'data-error="grace"' in bad_grace.text
        assert browser.get("/console/usage.xml").status_code == 404
        missing = browser.get("/console/nowhere/at/all")  # a page, not the API's JSON
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
        assert "no such page" in missing.text
        assert 'href="/console"' in bad_grace.text and "javascript:" not in bad_grace.text
    odd = httpx.get(
        gateway.url + "/admin/keys", headers={"Authorization": f"Bearer {make_key('r2', scopes=['admin'])}"}
    )
    record = next(k for k in odd.json()["data"] if k["name"] == "odd")
    assert (
        record["models"] == ["m,1"]
        and record["aliases"] == {"a,b": "deepseek-v4-flash-0731"}
        and record["rpm"] == 9
    )


def test_a_session_ends_when_the_secret_it_signed_in_with_is_rotated_away(console, make_key) -> None:
    gateway = console()
    admin, other = make_key("rotated", scopes=["admin"]), make_key("other", scopes=["admin"])
    api = {"Authorization": f"Bearer {other}"}
    with signed_in(gateway, admin) as browser:
        assert browser.get("/console").status_code == 200
        rotated = httpx.post(gateway.url + "/admin/keys/rotated/rotate", json={"grace_s": 0}, headers=api)
        assert rotated.status_code == 200 and rotated.json()["key"] != admin
        assert browser.get("/console").status_code == 303  # the old secret is no longer valid
    with signed_in(gateway, rotated.json()["key"]) as browser:
        httpx.post(gateway.url + "/admin/keys/rotated/rotate", json={"grace_s": 60}, headers=api)
        assert browser.get("/console").status_code == 200  # within the grace the old secret works


def test_the_sign_in_form_refuses_a_cross_site_post(console, make_key) -> None:
    gateway = console()
    admin = make_key("root", scopes=["admin"])
    # another site's form: it can send the secret but neither read nor send the sign-in cookie
    forged = httpx.post(gateway.url + "/console/login", data={"secret": admin, "login_csrf": "x" * 43})
    assert forged.status_code == 403 and "expired" in forged.text
    assert COOKIE + "=" not in forged.headers.get("set-cookie", "")
    with httpx.Client(base_url=gateway.url) as browser:
        browser.get("/console/login")  # a cookie, but a field that is not its token
        mismatched = browser.post("/console/login", data={"secret": admin, "login_csrf": "y" * 43})
        assert mismatched.status_code == 403
        assert sign_in(browser, admin).status_code == 303


def test_a_throttled_sign_in_says_when_to_retry_and_pages_are_not_sniffed(console, make_key) -> None:
    gateway = console(auth_failures_per_minute=2)
    with httpx.Client(base_url=gateway.url) as browser:
        answers = [sign_in(browser, "dsk-" + "x" * 43) for _ in range(3)]
    assert [a.status_code for a in answers] == [401, 401, 429]
    assert 1 <= int(answers[-1].headers["retry-after"]) <= 60
    with signed_in(console(), make_key("root", scopes=["admin"])) as browser:
        for path in ("/console", "/console/keys", "/console/login", "/console/static/console.js"):
            assert browser.get(path).headers["x-content-type-options"] == "nosniff", path


def test_exports_carry_the_pages_headers_and_huge_numbers_are_no_500(console, make_key) -> None:
    gateway = console()
    with signed_in(gateway, make_key("root", scopes=["admin"])) as browser:
        exported = browser.get("/console/usage/series.csv", params={"range": "hour"})
        assert exported.status_code == 200 and exported.headers["cache-control"] == "no-store"
        assert "default-src 'none'" in exported.headers["content-security-policy"]
        huge = "9" * 25
        assert browser.get("/console/requests", params={"page": huge}).status_code == 200
        assert browser.get(f"/console/requests/{huge}").status_code == 404
        too_long = browser.get(
            "/console/usage/series.json", params={"range": "custom", "from": "0001-01-02T00:00"}
        )
        assert too_long.status_code == 400
    admin = {"Authorization": f"Bearer {make_key('r2', scopes=['admin'])}"}
    assert (
        httpx.get(gateway.url + "/admin/requests", params={"offset": huge}, headers=admin).status_code == 400
    )
