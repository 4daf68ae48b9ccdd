"""``GET /v1/key``: the caller's own key as it stands — for a client to plan its use without an admin.

Never the secret, nor anything an admin keeps for itself (metadata, the key's aliases' targets are
shown: they are what its requests get). ``quotas``: its key's, then its group's (``holder``). The
answer carries the key's ``x-ratelimit-*`` headers, read without charging anything::

    {"object": "key", "id", "name", "kind", "expires_at", "models", "scopes",
     "limits": {"rpm", "tpm", "max_concurrency", "priority", "max_wait_s", "request_class"},
     "rate_limits": {"requests": {"limit", "remaining", "reset"} | null, "tokens": … | null},
     "quotas": [{"holder", "tokens", "period", "mode", "used", "remaining", "resets_at"}, …],
     "group": {"name", "rpm", "tpm"} | null,
     "prefix_cache": {"scope": "group <name>" | "key" | "shared", "shared_with"},
     "aliases", "default_thinking"}

``prefix_cache``: whose cached prompt prefixes its requests reuse, and so who could learn from its
``cached_tokens`` (or its time to first token) what it sent (:mod:`gateway.auth.cache_salt`).

``expires_at`` is the key's (ISO 8601 UTC), a JWT's ``exp``, or null for never.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.auth import cache_salt
from gateway.auth.principal import Principal
from gateway.auth.tokens import expires_at
from gateway.dialects.wire import bearer_token
from gateway.limits.rate import Window, reset_after, window_headers
from gateway.proxy.pipeline import Pipeline


async def own_key(request: Request) -> JSONResponse:
    """The caller's key (see the module doc)."""
    principal: Principal = request.state.principal
    group = principal.group
    pipeline: Pipeline = request.app.state.pipeline
    windows = await pipeline.limits.standing(principal)
    quotas = await pipeline.quotas.report(principal.quotas())
    body: dict[str, Any] = {
        "object": "key",
        "id": principal.key_id,
        "name": principal.name,
        "kind": principal.kind,
        "expires_at": await _expiry(request, principal),
        "models": list(principal.models) if principal.models is not None else None,
        "scopes": list(principal.scopes),
        "limits": {
            "rpm": principal.rpm,
            "tpm": principal.tpm,
            "max_concurrency": principal.max_concurrency,
            "priority": principal.priority,
            "max_wait_s": principal.max_wait_s,
            "request_class": principal.request_class,
        },
        "rate_limits": {what: _window(windows.get(what)) for what in ("requests", "tokens")},
        "quotas": quotas,
        "group": {"name": group.name, "rpm": group.rpm, "tpm": group.tpm} if group is not None else None,
        "prefix_cache": cache_salt.described(principal),
        "aliases": dict(principal.aliases) if principal.aliases is not None else None,
        "default_thinking": principal.default_thinking,
    }
    return JSONResponse(body, headers=window_headers(windows))


def _window(window: Window | None) -> dict[str, Any] | None:
    if window is None:
        return None
    reset = reset_after(window.reset_at - time.time())
    return {"limit": window.limit, "remaining": window.remaining, "reset": reset}


async def _expiry(request: Request, principal: Principal) -> str | None:
    if principal.kind == "key":
        record = await request.app.state.store.get(principal.key_id)
        return record.expires_at.isoformat() if record.expires_at else None
    if principal.kind == "jwt":
        exp = expires_at(bearer_token(request.headers.get("authorization")))
        return datetime.fromtimestamp(exp, UTC).isoformat() if exp else None
    return None
