"""Signing in to the console with the organisation's identity provider (``GATEWAY_OIDC_*``): the sign-in
page's button leads to ``/console/oidc/start``, which seals the sign-in's state, nonce, PKCE verifier
and callback URL into a cookie (:mod:`gateway.console.sealing`: the browser can neither read nor make
one, it is good for :data:`PENDING_TTL_S`) and sends the browser to the provider;
``/console/oidc/callback`` opens it, checks the answer (:class:`~gateway.auth.oidc.OidcClient`),
deletes it and opens a session for an admin. Nothing is kept on the server until then, so no number
of anonymous starts can push out a sign-in in progress; any replica sharing the console's secret
(:func:`~gateway.console.sealing.console_secret`) can take the provider's answer. A sealed cookie
replayed by the browser that holds it gains nothing: the provider's code is good once.

The pending sign-in's cookie is ``SameSite=Lax``: the provider's answer is a navigation from another
site, which a ``Strict`` cookie would not come with. For the same reason the callback answers a page
that moves on to the console itself (``<meta http-equiv="refresh">``), rather than a redirect: the
next request then comes from this site, with the session's ``Strict`` cookie.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Depends
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.auth.oidc import OidcClient, OidcConfig, OidcError, Pending
from gateway.config import Settings
from gateway.console.pages import COOKIE, render, sessions, set_cookie, sign_in_page
from gateway.console.sealing import Sealer
from gateway.http.auth import public_limit

#: The pending sign-in's cookie, and how long a sign-in at the provider may take, s.
PENDING_COOKIE = "dspark_console_oidc"
PENDING_TTL_S = 300
CALLBACK = "/console/oidc/callback"


def client_for(settings: Settings) -> OidcClient | None:
    """The provider's client ``settings`` configure, None without ``GATEWAY_OIDC_ISSUER``."""
    if not settings.oidc_issuer or not settings.oidc_client_id:
        return None
    return OidcClient(
        OidcConfig(
            issuer=settings.oidc_issuer,
            client_id=settings.oidc_client_id,
            client_secret=settings.oidc_client_secret,
            scopes=settings.oidc_scopes,
            admin_claim=settings.oidc_admin_claim,
            admin_values=settings.oidc_admin_values,
            name_claim=settings.oidc_name_claim,
        )
    )


def _client(request: Request) -> OidcClient:
    client: OidcClient | None = request.app.state.oidc
    if client is None:
        raise OidcError("sign-in with an identity provider is not configured (GATEWAY_OIDC_ISSUER)")
    return client


def _pending_seal(request: Request) -> Sealer:
    """The sealer of pending sign-ins (``app.state.console_secret``: set by the lifespan)."""
    return Sealer(request.app.state.console_secret, "oidc-pending")


async def start(request: Request) -> Response:
    try:
        client = _client(request)
        url, pending = await client.begin(request.app.state.settings.oidc_redirect_url)
    except OidcError as error:
        return sign_in_page(request, 503, error.message)
    response = RedirectResponse(url, status_code=303)
    sealed = _pending_seal(request).seal(pending.as_dict())
    set_cookie(request, response, PENDING_COOKIE, sealed, PENDING_TTL_S, samesite="lax")
    return response


async def callback(request: Request) -> Response:
    params = request.query_params
    if params.get("error"):  # the sign-in in progress is left as it is: anyone can send this address
        code = "".join(c for c in params["error"][:64] if c.isalnum() or c in "_-.")
        return sign_in_page(request, 403, f"The identity provider did not sign you in ({code}).")
    kept = _pending_seal(request).open(request.cookies.get(PENDING_COOKIE), PENDING_TTL_S)
    if kept is None:
        return _refused(request, 400, "This sign-in has expired or was used already; sign in again.")
    pending = Pending(**kept)
    if not hmac.compare_digest(params.get("state", "").encode(), pending.state.encode()):
        return _refused(
            request, 400, "This sign-in's answer is not the one this browser asked for; sign in again."
        )
    try:
        client = _client(request)
        claims = await client.finish(pending, params.get("code", ""))
        principal = client.principal(claims)
    except OidcError as error:
        return _refused(request, 403, error.message)
    await sessions(request).close(request.cookies.get(COOKIE))  # a new sign-in ends the browser's old one
    # no secret to check again on each page: the session ends with the ID token, so an admin the
    # provider disabled or took out of the group is out within the token's lifetime
    token = await sessions(request).open(principal, "", until=float(claims["exp"]))
    response = render(request, "signed_in.html", admin=principal.name, csrf="")
    set_cookie(request, response, COOKIE, token, int(request.app.state.settings.console_session_ttl_s))
    response.delete_cookie(PENDING_COOKIE, path="/console")
    return response


def _refused(request: Request, code: int, message: str) -> Response:
    response = sign_in_page(request, code, message)
    response.delete_cookie(PENDING_COOKIE, path="/console")
    return response


def install(app: Any) -> None:
    """The sign-in's two public routes (:data:`PUBLIC`) and its client (``app.state.oidc``)."""
    app.state.oidc = client_for(app.state.settings)
    throttled = [Depends(public_limit)]  # public: each address gets GATEWAY_PUBLIC_REQUESTS_PER_MINUTE
    app.add_api_route(
        "/console/oidc/start",
        start,
        methods=["GET"],
        include_in_schema=False,
        dependencies=throttled,
    )
    app.add_api_route(
        CALLBACK,
        callback,
        methods=["GET"],
        include_in_schema=False,
        name="oidc_callback",
        dependencies=throttled,
    )


#: The routes anyone may call: they are how one signs in.
PUBLIC = frozenset({"/console/oidc/start", CALLBACK})
