"""Console sign-in sessions: a random token in an ``HttpOnly`` cookie names a session holding who
signed in, its CSRF token and its expiry. The token is stored only as its SHA-256, so the store never
holds a usable cookie. Two stores, one interface:

- :class:`MemorySessions`: this process's (``GATEWAY_ADMISSION_STORE=memory://``);
- :class:`RedisSessions`: the Redis the replicas share (``redis://…``), so any replica serves a
  signed-in admin. Keys ``{namespace}:console:session:{sha256}``, each with its own expiry.

A session lives ``ttl_s`` seconds from sign-in, or less if the key or token it signed in with expires
sooner; the memory store keeps at most ``limit`` sessions (the oldest go first). Whether the secret
it signed
in with is still a valid admin key — not revoked, expired, or rotated away (past its grace) — is the
pages' to check on each request (:func:`gateway.console.pages.page`): a session keeps the secret's
SHA-256 (``credential``), as the key store does, for that. What an OpenID Connect sign-in keeps
between sending the browser to the provider and its answer is not here: the browser holds it, sealed
(:mod:`gateway.console.oidc_pages`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.auth.principal import Principal
from gateway.config import Settings


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in admin: who (``principal``: its id, name, kind and scopes), the CSRF token every
    state-changing form must carry, expiry (Unix time, s), and the SHA-256 (hex) of the secret it signed
    in with (empty for an identity provider's sign-in: it has none the gateway checks again)."""

    principal: Principal
    csrf: str
    expires_at: float
    credential: str

    def allows(self, csrf: str | None) -> bool:
        """Whether a form's ``csrf`` is this session's (constant-time)."""
        return csrf is not None and hmac.compare_digest(csrf.encode(), self.csrf.encode())

    def dumps(self) -> str:
        who = self.principal
        return json.dumps(
            {
                "who": [who.key_id, who.name, who.kind, list(who.scopes)],
                "csrf": self.csrf,
                "expires_at": self.expires_at,
                "credential": self.credential,
            }
        )

    @classmethod
    def loads(cls, text: str | bytes) -> Session:
        data = json.loads(text)
        key_id, name, kind, scopes = data["who"]
        principal = Principal(key_id=key_id, name=name, kind=kind, scopes=tuple(scopes))
        return cls(principal, data["csrf"], data["expires_at"], data["credential"])


P = ParamSpec("P")
R = TypeVar("R")
#: How long a call to the shared store may take, s.
REDIS_TIMEOUT_S = 5.0


class Sessions(Protocol):
    """What the console's pages need of a session store."""

    ttl_s: float

    async def open(self, principal: Principal, secret: str, until: float | None = None) -> str:
        """A new session for ``principal``, signed in with ``secret`` (empty: none to check again),
        ending after ``ttl_s`` or at ``until`` (Unix time, s), whichever is first: its cookie token."""
        ...

    async def get(self, token: str | None) -> Session | None:
        """The live session of ``token``, or None (unknown or expired)."""
        ...

    async def close(self, token: str | None) -> None:
        """Sign out: forget ``token``'s session."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds open."""
        ...


def _new(principal: Principal, secret: str, ttl_s: float, until: float | None) -> tuple[str, Session]:
    token = secrets.token_urlsafe(32)
    ends = time.time() + ttl_s if until is None else min(time.time() + ttl_s, until)
    credential = _digest(secret) if secret else ""
    return token, Session(principal, secrets.token_urlsafe(32), ends, credential)


@dataclass(slots=True)
class MemorySessions:
    """The live sessions by their token's SHA-256, in this process."""

    ttl_s: float
    limit: int = 1000
    _live: dict[str, Session] = field(default_factory=dict)

    async def open(self, principal: Principal, secret: str, until: float | None = None) -> str:
        token, session = _new(principal, secret, self.ttl_s, until)
        if len(self._live) >= self.limit:
            del self._live[next(iter(self._live))]  # the oldest
        self._live[_digest(token)] = session
        return token

    async def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        digest = _digest(token)
        session = self._live.get(digest)
        if session is not None and session.expires_at <= time.time():
            del self._live[digest]
            return None
        return session

    async def close(self, token: str | None) -> None:
        if token:
            self._live.pop(_digest(token), None)

    async def aclose(self) -> None:
        return None


class StoreUnavailable(Exception):
    """The shared session store could not be reached (its Redis is down or does not answer)."""


def _reached(call: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """``call``, with a Redis failure turned into :class:`StoreUnavailable` (a page to show, not a 500)."""

    @functools.wraps(call)
    async def reaching(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await call(*args, **kwargs)
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc

    return reaching


class RedisSessions:
    """The sessions in a Redis every replica shares, under ``namespace``; a call
    the Redis does not answer within :data:`REDIS_TIMEOUT_S` raises :class:`StoreUnavailable`."""

    def __init__(self, client: Redis, namespace: str, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._redis = client
        self._prefix = f"{namespace}:console:"

    @_reached
    async def open(self, principal: Principal, secret: str, until: float | None = None) -> str:
        token, session = _new(principal, secret, self.ttl_s, until)
        lasts_ms = max(1, int((session.expires_at - time.time()) * 1000))
        await self._redis.set(self._key("session", token), session.dumps(), px=lasts_ms)
        return token

    @_reached
    async def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        text = await self._redis.get(self._key("session", token))
        if text is None:
            return None
        session = Session.loads(text)
        return session if session.expires_at > time.time() else None

    @_reached
    async def close(self, token: str | None) -> None:
        if token:
            await self._redis.delete(self._key("session", token))

    async def aclose(self) -> None:
        await self._redis.aclose()

    def _key(self, kind: str, token: str) -> str:
        return f"{self._prefix}{kind}:{_digest(token)}"


def session_store(settings: Settings) -> Sessions:
    """The store ``settings`` call for: Redis when the replicas share admission there
    (``GATEWAY_ADMISSION_STORE=redis://…``), else this process's memory."""
    store, ttl_s = settings.admission_store, settings.console_session_ttl_s
    if store.startswith(("redis://", "rediss://", "unix://")):
        client = Redis.from_url(store, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        return RedisSessions(client, settings.admission_namespace, ttl_s)
    return MemorySessions(ttl_s)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
