"""The caller's ``x-ratelimit-*`` headers on every answer to a key with limits (OpenAI's names, API
docs "Rate limits"), for the routes that do not write them themselves.

An inference request's answer carries the windows its request counted in (its
:class:`~gateway.limits.rate.Ticket`); any other authenticated answer — the model list, a stored
response, ``count_tokens``, a refusal before counting — gets the key's windows as they stand,
read without charging anything (:meth:`~gateway.limits.rate.RateLimiter.standing`). The edge
(:mod:`gateway.http.edge`) asks at each response's start.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

from gateway.auth.principal import Principal
from gateway.limits.rate import RateLimiter, window_headers

log = logging.getLogger("gateway.errors")
Headers = list[tuple[bytes, bytes]]


async def rate_headers(scope: Scope, present: Headers) -> Headers:
    """The headers to add to an answer that has ``present`` for ``scope``'s request (the app's rate
    limiter: ``app.state.pipeline.limits``): none for an unauthenticated caller, a key without limits,
    an answer that has them, or one that says when to retry (a 429 has its windows; a 503 — the limits'
    store down, a drain — would wait on that store for nothing)."""
    principal: Principal | None = scope.get("state", {}).get("principal")
    if principal is None or any(
        name.startswith(b"x-ratelimit-") or name == b"retry-after" for name, _ in present
    ):
        return []
    limits: RateLimiter = scope["app"].state.pipeline.limits
    try:
        standing = await limits.standing(principal)
    except Exception:  # the headers inform; a limits store failing now must not fail the answer
        log.warning("request %s: the rate-limit headers could not be read", scope["state"].get("request_id"))
        return []
    return [(name.encode(), value.encode()) for name, value in window_headers(standing).items()]
