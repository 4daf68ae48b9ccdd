"""Console sign-in sessions, kept in this process: a random token in an ``HttpOnly`` cookie names a
session holding the admin's principal, its CSRF token and its expiry. The token is stored only as
its SHA-256, so the store never holds a usable cookie. Pure: no I/O.

A session lives ``ttl_s`` seconds from sign-in, or less if the key or token it signed in with expires
sooner; at most ``limit`` live at once (the oldest go first). Whether the secret it signed in with
is still a valid admin key — not revoked, expired, or rotated away (past its grace) — is the pages'
to check on each request (:func:`gateway.console.pages.page`): a session keeps the secret's SHA-256
(``credential``), as the key store does, for that.
Replicas do not share sessions: behind several, a browser keeps to one (Caddy ``lb_policy cookie``)
or signs in again.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field

from gateway.auth.principal import Principal


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in admin: who, the CSRF token every state-changing form must carry, expiry (monotonic s),
    and the SHA-256 (hex) of the secret it signed in with."""

    principal: Principal
    csrf: str
    expires_at: float
    credential: str

    def allows(self, csrf: str | None) -> bool:
        """Whether a form's ``csrf`` is this session's (constant-time)."""
        return csrf is not None and hmac.compare_digest(csrf.encode(), self.csrf.encode())


@dataclass(slots=True)
class Sessions:
    """The live sessions by their token's SHA-256."""

    ttl_s: float
    limit: int = 1000
    _live: dict[str, Session] = field(default_factory=dict)

    def open(self, principal: Principal, secret: str, until: float | None = None) -> str:
        """A new session for ``principal``, signed in with ``secret``, ending after ``ttl_s`` or at
        ``until`` (Unix time, s: when the credential it signed in with expires), whichever is first:
        its cookie token (shown once, to the browser)."""
        token = secrets.token_urlsafe(32)
        if len(self._live) >= self.limit:
            del self._live[next(iter(self._live))]  # the oldest
        lasts = self.ttl_s if until is None else min(self.ttl_s, until - time.time())
        csrf = secrets.token_urlsafe(32)
        self._live[_digest(token)] = Session(principal, csrf, time.monotonic() + lasts, _digest(secret))
        return token

    def get(self, token: str | None) -> Session | None:
        """The live session of ``token``, or None (unknown, or expired: then forgotten)."""
        if not token:
            return None
        digest = _digest(token)
        session = self._live.get(digest)
        if session is not None and session.expires_at <= time.monotonic():
            del self._live[digest]
            return None
        return session

    def close(self, token: str | None) -> None:
        """Sign out: forget ``token``'s session."""
        if token:
            self._live.pop(_digest(token), None)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
