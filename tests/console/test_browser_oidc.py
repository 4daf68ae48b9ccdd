"""Signing in to the console with the organisation's identity provider, in a real browser: a real
OpenID Connect provider (panva's oidc-provider, started by the test), the authorization code flow
with PKCE, the ``groups`` claim mapped to the admin role, two replicas sharing their sessions in
Redis (the provider's answer and the next page may each reach either), and sign-out."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console.helpers import ARTIFACTS
from tests.support.oidc_provider import OidcProvider
from tests.support.servers import free_port


@pytest.fixture
def provider(tmp_path) -> Iterator[OidcProvider]:
    started = OidcProvider(tmp_path / "oidc.log")
    yield started
    started.stop()


def sign_in_at_the_provider(page: Page, gateway_url: str, login: str) -> None:
    page.goto(gateway_url + "/console/login")
    page.get_by_role("link", name="Sign in with the test provider").click()
    page.fill("input[name=login]", login)  # the provider's own form, on its own origin
    page.fill("input[name=password]", "anything")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()  # consent


def test_an_admin_of_the_identity_provider_signs_in_on_any_replica_and_out(
    start_sim, start_gateway, redis_url, provider, browser_page
) -> None:
    sim = start_sim()
    shared = {"admission_store": redis_url, "admission_namespace": f"oidc-{uuid.uuid4().hex[:8]}"}
    one = start_gateway(sim.url, **shared, **provider.settings(free_port()))
    two = start_gateway(sim.url, **shared, **provider.settings(free_port()))
    provider.start([one.url + "/console/oidc/callback", two.url + "/console/oidc/callback"])
    page = browser_page

    sign_in_at_the_provider(page, one.url, "admin-alice")
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("header .who")).to_have_text("admin-alice@example.test")
    # the other replica knows the session: the browser's cookie, sent to it as it is
    cookie = next(c for c in page.context.cookies(one.url + "/console") if c["name"] == "dspark_console")
    other = httpx.get(two.url + "/console/keys", cookies={"dspark_console": cookie["value"]})
    assert other.status_code == 200 and "admin-alice@example.test" in other.text
    page.screenshot(path=ARTIFACTS / "signed-in-oidc.png")

    # an action is audited under the provider's name for the admin
    page.goto(one.url + "/console/groups")
    page.locator("#create input[name=name]").fill("from-sso")
    page.locator("#create").get_by_role("button", name="Create").click()
    page.goto(one.url + "/console/audit")
    expect(page.locator("tr[data-action='group.create']")).to_contain_text("admin-alice@example.test (oidc)")

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(one.url + "/console/login")
    assert httpx.get(two.url + "/console", cookies={"dspark_console": cookie["value"]}).status_code == 303

    # someone the provider signs in who is not in gateway-admins gets no session
    page.context.clear_cookies()
    sign_in_at_the_provider(page, two.url, "bob")
    expect(page.locator("p.error")).to_contain_text("bob@example.test may not administer this gateway")
    page.goto(two.url + "/console")
    expect(page).to_have_url(two.url + "/console/login")


def test_a_callback_without_its_sign_in_is_refused(start_sim, start_gateway, provider) -> None:
    gateway = start_gateway(start_sim().url, **provider.settings(free_port()))
    forged = httpx.get(gateway.url + "/console/oidc/callback", params={"code": "x", "state": "y"})
    assert forged.status_code == 400 and "expired or was used" in forged.text
    denied = httpx.get(gateway.url + "/console/oidc/callback", params={"error": "access_denied"})
    assert denied.status_code == 403 and "access_denied" in denied.text
    unreachable = httpx.get(gateway.url + "/console/oidc/start")  # the provider is not running yet
    assert unreachable.status_code == 503 and "could not be read" in unreachable.text


def test_a_session_from_the_provider_ends_with_its_id_token(
    start_sim, start_gateway, provider, browser_page
) -> None:
    """No key to check again on each page: an admin the provider disables is out when the token ends."""
    gateway = start_gateway(start_sim().url, **provider.settings(free_port()))
    provider.start([gateway.url + "/console/oidc/callback"], id_token_ttl_s=3)
    sign_in_at_the_provider(browser_page, gateway.url, "admin-carol")
    expect(browser_page.locator("h1")).to_have_text("Overview")
    time.sleep(3.5)
    browser_page.goto(gateway.url + "/console/keys")
    expect(browser_page).to_have_url(gateway.url + "/console/login")


def test_the_sign_in_start_is_throttled_per_address(start_sim, start_gateway, provider) -> None:
    gateway = start_gateway(start_sim().url, public_requests_per_minute=2, **provider.settings(free_port()))
    provider.start([gateway.url + "/console/oidc/callback"])
    codes = [httpx.get(gateway.url + "/console/oidc/start").status_code for _ in range(3)]
    assert codes == [303, 303, 429]


def test_anonymous_starts_leave_a_sign_in_in_progress_alone(
    start_sim, start_gateway, provider, browser_page
) -> None:
    """The pending sign-in is the browser's, sealed: hundreds of anonymous starts push nothing out, and
    a replica that shares only the database (and so the console's generated secret) with the one that
    started it, no session store, takes the provider's answer."""
    sim = start_sim()
    shared = {"public_requests_per_minute": 10_000}
    one = start_gateway(sim.url, **shared, **provider.settings(free_port()))
    callback = one.url + "/console/oidc/callback"  # the address both replicas are reached at
    two_settings = {**provider.settings(free_port()), "oidc_redirect_url": callback}
    two = start_gateway(sim.url, **shared, **two_settings)
    provider.start([callback])
    page = browser_page
    page.goto(two.url + "/console/login")
    page.get_by_role("link", name="Sign in with the test provider").click()
    page.fill("input[name=login]", "admin-dana")  # at the provider's form: the sign-in is in progress
    with httpx.Client() as anonymous:
        for _ in range(150):
            for gateway in (one, two):
                assert anonymous.get(gateway.url + "/console/oidc/start").status_code == 303
    page.fill("input[name=password]", "anything")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("header .who")).to_have_text("admin-dana@example.test")
