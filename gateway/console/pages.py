"""The console's pages (``/console``): sign-in, overview (live), keys, usage, requests, audit.

- Sign-in takes an admin key or an admin JWT, checked by the same authenticator (and failure throttle)
  as the API; then a server-side session (:mod:`gateway.console.sessions`) in a cookie that is
  ``HttpOnly``, ``SameSite=Strict``, ``Secure`` when the request came over TLS (the scheme a trusted
  proxy forwarded), ``Path=/console``, with the session's expiry. The key never reaches JavaScript.
- Every page needs a live session (else a redirect to the sign-in page); every POST carries the
  session's CSRF token in a hidden field (else 403), the sign-in form its own (double-submit cookie).
  A client key signs in to nothing (403). A refusal keeps its headers (a throttle's ``Retry-After``).
- Key changes go through :class:`~gateway.admin.key_admin.KeyAdmin`, as the admin API's do: one
  audit trail. Reads are the admin API's own handlers (:mod:`gateway.admin.reads`).
- Templates are Jinja2 with autoescaping; pages send a ``Content-Security-Policy`` that allows only
  the gateway's own script and style, so text from keys' names and metadata stays text.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs

from jinja2 import Environment, FileSystemLoader
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from gateway.admin import batches as admin_batches
from gateway.admin import reads
from gateway.admission.capacity import Reason
from gateway.auth import Principal
from gateway.auth.tokens import expires_at
from gateway.console import live
from gateway.console.sealing import Sealer
from gateway.console.sessions import Session, Sessions, StoreUnavailable, session_store
from gateway.errors import GatewayError
from gateway.http.auth import ADMIN_SCOPE, authenticate

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(env=Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True))
TEMPLATES.env.filters.update(
    seconds=lambda v: "–" if v is None else f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s",
    rate=lambda v: "–" if v is None else f"{v:.1f} tok/s",
    percent=lambda v: "–" if v is None else f"{v * 100:.1f} %",
    jsontext=lambda v: json.dumps(v, ensure_ascii=False),  # then escaped, as all text
    number=lambda v: "–" if v is None else f"{v:,}",
    when=lambda v: datetime.fromisoformat(v).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if v else "–",
)
COOKIE = "dspark_console"
#: The sign-in form's CSRF cookie, and how long a sign-in form stays good, s.
LOGIN_COOKIE = "dspark_console_login"
LOGIN_TTL_S = 3600
#: Largest form body, bytes.
FORM_BYTES = 64 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[Request, Session], Awaitable[Response]]


def sessions(request: Request) -> Sessions:
    store: Sessions = request.app.state.console_sessions
    return store


def render(
    request: Request, name: str, code: int = 200, headers: Mapping[str, str] | None = None, **context: Any
) -> Response:
    """Template ``name`` with ``context`` (and the session's CSRF token when signed in), HTTP ``code``,
    the :data:`SECURITY_HEADERS` and ``headers`` (a refusal's ``Retry-After``)."""
    session: Session | None = getattr(request.state, "session", None)  # set by :func:`page`
    context.setdefault("csrf", session.csrf if session else "")
    context.setdefault("admin", session.principal.name if session else None)
    return TEMPLATES.TemplateResponse(
        request, name, context, status_code=code, headers={**SECURITY_HEADERS, **(headers or {})}
    )


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind a live session (else a redirect to sign-in) and, for a POST, its CSRF token
    in the form (else 403)."""

    async def guarded(request: Request) -> Response:
        token = request.cookies.get(COOKIE)
        session = await sessions(request).get(token)
        if session is None or not await still_admin(request, session):
            await sessions(request).close(token)
            return RedirectResponse("/console/login", status_code=303)
        request.state.session = session
        if request.method == "POST":
            form = await read_form(request)
            if not session.allows(form.get("csrf")):
                return render(request, "error.html", 403, message="This form has expired; reload the page.")
            request.state.form = form
        try:
            return await handler(request, session)
        except GatewayError as error:
            return render(request, "error.html", error.status, error.headers, message=error.message)

    guarded.__name__ = handler.__name__
    return reaching_store(guarded)


def reaching_store(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint``, answering a page (503) when the shared session store cannot be reached."""

    async def reaching(request: Request) -> Response:
        try:
            return await endpoint(request)
        except StoreUnavailable:
            message = "The console's session store (Redis) cannot be reached; try again shortly."
            return render(request, "error.html", 503, message=message)

    reaching.__name__ = endpoint.__name__
    return reaching


async def still_admin(request: Request, session: Session) -> bool:
    """Whether the secret a session signed in with still authenticates as an active admin key: a key
    revoked, expired, changed since, or rotated to a new secret (once the old one's grace ends — at
    once for a rotation without grace) ends the session, as the API would refuse the secret. A JWT's
    session ends with the token (:func:`login`); the bootstrap admin has no record."""
    principal = session.principal
    if principal.kind != "key":
        return True
    record = await request.app.state.store.find_by_hash(session.credential)
    return (
        record is not None
        and record.id == principal.key_id
        and record.status(datetime.now(UTC)) == "active"
        and ADMIN_SCOPE in record.scopes
    )


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body, at most :data:`FORM_BYTES`, one value per name."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_BYTES:
            raise GatewayError("request_too_large", "The form is too large.")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[-1] for name, values in fields.items()}


# -- sign-in


async def login_form(request: Request) -> Response:
    return sign_in_page(request)


def sign_in_page(
    request: Request, code: int = 200, message: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    """The sign-in form saying ``message`` (why the last attempt failed), HTTP ``code``, with a fresh
    sign-in CSRF token in the form and in :data:`LOGIN_COOKIE` (:func:`login`): a random value sealed
    for that use (:mod:`gateway.console.sealing`), so only this gateway can have issued one."""
    token = _login_seal(request).seal({"login": secrets.token_urlsafe(16)})
    settings = request.app.state.settings
    sso = settings.oidc_label if settings.oidc_issuer else None
    response = render(request, "login.html", code, headers, message=message, login_csrf=token, sso=sso)
    set_cookie(request, response, LOGIN_COOKIE, token, LOGIN_TTL_S)
    return response


async def login(request: Request) -> Response:
    """Check the admin key or JWT of the form, open a session, set its cookie.

    The form must carry the sign-in CSRF token its page set in :data:`LOGIN_COOKIE` (double-submit,
    OWASP CSRF cheat sheet, "Login CSRF"): another site's form, which can neither read the cookie nor
    make the browser send a ``SameSite=Strict`` one, cannot sign a browser in to the attacker's key.
    The token must also be one this gateway sealed less than :data:`LOGIN_TTL_S` ago (signed double
    submit): a cookie planted with a made-up value (from a sibling subdomain, say) and the same value
    in the form pass nothing.
    """
    form = await read_form(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    sent = form.get("login_csrf", "")
    issued = _login_seal(request).open(expected, LOGIN_TTL_S) is not None
    if not issued or not hmac.compare_digest(sent.encode(), expected.encode()):
        return sign_in_page(request, 403, "The sign-in form has expired; sign in again.")
    token = form.get("secret", "").strip()
    try:
        principal = await authenticate(request, lambda: token)
    except GatewayError as error:
        return sign_in_page(request, error.status, error.message, error.headers)
    if ADMIN_SCOPE not in principal.scopes:
        return sign_in_page(request, 403, "This key is not an admin key.")
    settings = request.app.state.settings
    await sessions(request).close(request.cookies.get(COOKIE))  # a new sign-in ends the browser's old session
    response = RedirectResponse("/console", status_code=303)
    session = await sessions(request).open(
        principal, token, await credential_expiry(request, principal, token)
    )
    set_cookie(request, response, COOKIE, session, int(settings.console_session_ttl_s))
    response.delete_cookie(LOGIN_COOKIE, path="/console")
    return response


def _login_seal(request: Request) -> Sealer:
    """The sealer of sign-in CSRF tokens (``app.state.console_secret``: set by the lifespan)."""
    return Sealer(request.app.state.console_secret, "login-csrf")


def set_cookie(
    request: Request,
    response: Response,
    name: str,
    value: str,
    max_age: int,
    samesite: Literal["strict", "lax"] = "strict",
) -> None:
    """A console cookie: ``HttpOnly``, ``SameSite=Strict`` (``Lax`` where another site's navigation
    must bring it: :mod:`gateway.console.oidc_pages`), ``Path=/console``, ``Secure`` behind TLS."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/console",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite=samesite,
    )


async def credential_expiry(request: Request, principal: Principal, token: str) -> float | None:
    """When what ``principal`` signed in with expires (Unix time, s): a JWT's ``exp``, a key's
    ``expires_at``; None for never."""
    if principal.kind == "jwt":
        return expires_at(token)
    if principal.kind == "key":
        record = await request.app.state.store.get(principal.key_id)
        return record.expires_at.timestamp() if record.expires_at else None
    return None


async def logout(request: Request, session: Session) -> Response:
    await sessions(request).close(request.cookies.get(COOKIE))
    response = RedirectResponse("/console/login", status_code=303)
    response.delete_cookie(COOKIE, path="/console")
    return response


# -- overview


async def overview(request: Request, session: Session) -> Response:
    return render(request, "overview.html", **await _live(request))


async def live_json(request: Request, session: Session) -> Response:
    """What the overview shows, for its script to refresh it."""
    return JSONResponse(await _live(request), headers={"Cache-Control": "no-store"})


async def _live(request: Request) -> dict[str, Any]:
    rows = (await reads.requests(request, limit=500))["data"]
    phrases = {reason.value: reason.phrase for reason in Reason}
    return {"status": await reads.status(request), "figures": live.figures(rows), "phrases": phrases}


# -- batches, audit


async def batches_page(request: Request, session: Session) -> Response:
    rows = (await admin_batches.list_batches(request, limit=100))["data"]
    for row in rows:
        row["created"] = datetime.fromtimestamp(row["created_at"], UTC).strftime("%Y-%m-%d %H:%M:%S")
    return render(request, "batches.html", rows=rows)


async def audit(request: Request, session: Session) -> Response:
    return render(request, "audit.html", rows=(await reads.audit(request, limit=100))["data"])


def install(app: Any) -> None:
    """The console's routes under ``/console`` and its static files; only sign-in and the static
    files are public (:data:`PUBLIC`), every other page checks its session itself (:func:`page`)."""
    app.state.console_sessions = session_store(app.state.settings)
    get, post = ["GET"], ["POST"]
    for path, endpoint, methods in (
        ("/console/login", login_form, get),
        ("/console/login", reaching_store(login), post),
        ("/console/logout", page(logout), post),
        ("/console", page(overview), get),
        ("/console/live.json", page(live_json), get),
        ("/console/batches", page(batches_page), get),
        ("/console/audit", page(audit), get),
    ):
        app.add_api_route(path, endpoint, methods=methods, include_in_schema=False)
    app.mount(STATIC, StaticFiles(directory=HERE / "static"), name="console-static")


async def not_found(request: Request, session: Session) -> Response:
    raise GatewayError("not_found", "There is no such page in the console.")


def install_fallback(app: Any) -> None:
    """A console page for every other ``/console/…`` address (after every console route): a 404 page,
    not the API's JSON error."""
    app.add_api_route("/console/{rest:path}", page(not_found), methods=["GET"], include_in_schema=False)


#: Where the console's CSS and JavaScript are served (public, like the docs' assets).
STATIC = "/console/static"
#: The console's routes anyone may call: the sign-in form and its post.
PUBLIC = frozenset({"/console/login"})
