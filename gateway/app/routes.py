"""The route table: every route the gateway serves, and nothing else.

Deny by default: every route needs credentials except those in :data:`PUBLIC_ROUTES` (liveness,
readiness, the Prometheus scrape — which has a token of its own — and the API docs FastAPI serves,
with their JavaScript and CSS: :data:`PUBLIC_MOUNTS`).
Admin routes need the ``admin`` scope. The inference routes authenticate themselves, in their dialect
(:class:`~gateway.http.inference.InferenceRoute`: plain ASGI, the hot path). Any other path is a 404
in OpenAI shape, so vLLM's ``/tokenize``, ``/invocations``, ``/pause``, its ``/metrics`` ... are unreachable.

=======================================  ======  ============================================
``POST /v1/chat/completions``            key     proxied, stream and non-stream (dialect: chat)
``POST /v1/completions``                 key     proxied (dialect: text completions)
``POST /v1/responses``                   key     proxied, stream and non-stream (dialect: Responses)
``GET|DELETE /v1/responses/{id}``        key     a stored response, the creating key's only
``POST /v1/responses/{id}/cancel``       key     the same
``POST /v1/messages``                    key     proxied, stream and non-stream (dialect: Anthropic)
``POST /v1/messages/count_tokens``       key     the prompt's tokens (no slot)
``GET  /v1/models``, ``/v1/models/{id}`` key     the upstream's list, filtered by the key, and aliases
``/v1/files`` (CRUD, ``/content``)       key     uploads for batches, the uploading key's only
``/v1/batches`` (create, read, cancel)   key     batches run in idle slots, the creating key's only
``/v1/messages/batches`` (+ results)     key     Anthropic's message batches, on the same batches
``GET  /v1/key``                         key     the caller's own key (:mod:`gateway.http.own_key`)
``/admin/keys`` (CRUD, rotate)           admin   API keys (:mod:`gateway.admin.keys`)
``/admin/groups`` (CRUD)                 admin   groups of keys (:mod:`gateway.admin.groups`)
``/admin/batches``, ``/admin/files``     admin   every key's batches and files (:mod:`gateway.admin.batches`)
``GET  /admin/{status,audit,usage,…}``   admin   slots, audit trail, ledger (:mod:`gateway.admin.reads`)
``GET  /health``, ``GET /ready``         public  process up; upstream answers (503 while draining)
``GET  /metrics``                        public  Prometheus: the metrics token, else loopback only
``/console/login``, ``/console/static``  public  the console's sign-in and assets
``/console/…``                           admin   the console (a session cookie + CSRF: :mod:`gateway.console`)
=======================================  ======  ============================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from fastapi import Depends, FastAPI
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import batches as admin_batches
from gateway.admin import groups, keys, reads
from gateway.admin.key_fields import GroupCreate, GroupLimits
from gateway.console import group_pages as console_groups
from gateway.console import key_pages as console_keys
from gateway.console import oidc_pages as console_oidc
from gateway.console import pages as console
from gateway.console import request_pages as console_requests
from gateway.console import usage_pages as console_usage
from gateway.dialects.base import Dialect
from gateway.dialects.messages import COUNT_TOKENS, MESSAGES, CountTokensRequest, MessagesRequest
from gateway.dialects.openai.chat import CHAT
from gateway.dialects.openai.completions import COMPLETIONS
from gateway.dialects.openai.dialect import OPENAI
from gateway.dialects.openai.models import ChatCompletionRequest, CompletionRequest
from gateway.dialects.responses import RESPONSES, ResponsesRequest
from gateway.http import batches, files, health, inference, message_batches, metrics_route, own_key, stored
from gateway.http.auth import admin_for, principal_for, public_limit
from gateway.http.openapi import DOCS_ASSETS, documented

#: Static files anyone may fetch: the docs pages' and the console's JavaScript and CSS (served by the
#: gateway, not a CDN).
PUBLIC_MOUNTS = frozenset({DOCS_ASSETS, console.STATIC})
#: The liveness probe: public and not even throttled per address (its answer costs less than the
#: throttle's look-up in a store that may be down: a load balancer's check must not fail with Redis).
LIVENESS = "/health"
#: The paths anyone may call. FastAPI serves the docs routes itself; the console its sign-in.
PUBLIC_ROUTES = (
    frozenset({"/health", "/ready", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
    | console.PUBLIC
    | console_oidc.PUBLIC
)


@dataclass(frozen=True)
class Route:
    """One route: ``method``, ``path``, its handler and summary, whether it needs the admin scope, the
    dialect of its credentials and errors, and what else FastAPI documents of it."""

    method: str
    path: str
    endpoint: Callable[..., Any]
    summary: str
    admin: bool = False
    dialect: Dialect = OPENAI
    status_code: int | None = None
    openapi_extra: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()


_KEYS, _ADMIN, _OPENAI, _ANTHROPIC = ("admin: keys",), ("admin",), ("openai",), ("anthropic",)
_GROUPS = ("admin: groups",)
_RESPONSE = "/v1/responses/{response_id}"
_FILE = "/v1/files/{file_id}"
_BATCH = "/v1/batches/{batch_id}"
_MESSAGE_BATCHES = "/v1/messages/batches"
_MESSAGE_BATCH = _MESSAGE_BATCHES + "/{message_batch_id}"
ROUTES = (
    Route("POST", CHAT.route, inference.InferenceRoute(CHAT), "Create a chat completion (OpenAI-compatible)",
          dialect=CHAT, openapi_extra=documented(ChatCompletionRequest, streams=True), tags=_OPENAI),
    Route("POST", COMPLETIONS.route, inference.InferenceRoute(COMPLETIONS),
          "Create a text completion (OpenAI-compatible)",
          dialect=COMPLETIONS, openapi_extra=documented(CompletionRequest, streams=True), tags=_OPENAI),
    Route("POST", RESPONSES.route, inference.InferenceRoute(RESPONSES),
          "Create a response (OpenAI Responses API)",
          dialect=RESPONSES, openapi_extra=documented(ResponsesRequest, streams=True), tags=_OPENAI),
    Route("GET", _RESPONSE, stored.get_response, "A stored response this key created", tags=_OPENAI),
    Route("DELETE", _RESPONSE, stored.delete_response, "Forget a stored response this key created",
          tags=_OPENAI),
    Route("POST", _RESPONSE + "/cancel", stored.cancel_response, "Cancel a response this key created",
          tags=_OPENAI),
    Route("POST", MESSAGES.route, inference.InferenceRoute(MESSAGES),
          "Create a message (Anthropic Messages API)",
          dialect=MESSAGES, openapi_extra=documented(MessagesRequest, streams=True), tags=_ANTHROPIC),
    Route("POST", COUNT_TOKENS.route, inference.count_tokens, "Count a message's input tokens (Anthropic)",
          dialect=COUNT_TOKENS, openapi_extra=documented(CountTokensRequest), tags=_ANTHROPIC),
    Route("GET", "/v1/models", inference.list_models, "List the models this key may use", tags=_OPENAI),
    Route("GET", "/v1/models/{model_id}", inference.get_model, "One model this key may use", tags=_OPENAI),
    Route("POST", "/v1/files", files.create_file, "Upload a file (multipart; purpose batch)",
          openapi_extra=files.UPLOAD_FORM, tags=_OPENAI),
    Route("GET", "/v1/files", files.list_files, "List this key's files", tags=_OPENAI),
    Route("GET", _FILE, files.get_file, "A file this key uploaded", tags=_OPENAI),
    Route("GET", _FILE + "/content", files.file_content, "A file's content", tags=_OPENAI),
    Route("DELETE", _FILE, files.delete_file, "Delete a file this key uploaded", tags=_OPENAI),
    Route("POST", _MESSAGE_BATCHES, message_batches.create_message_batch,
          "Create a message batch (Anthropic Message Batches)", dialect=MESSAGES, tags=_ANTHROPIC),
    Route("GET", _MESSAGE_BATCHES, message_batches.list_message_batches, "List this key's message batches",
          dialect=MESSAGES, tags=_ANTHROPIC),
    Route("GET", _MESSAGE_BATCH, message_batches.get_message_batch, "A message batch this key made",
          dialect=MESSAGES, tags=_ANTHROPIC),
    Route("POST", _MESSAGE_BATCH + "/cancel", message_batches.cancel_message_batch,
          "Cancel a message batch this key made", dialect=MESSAGES, tags=_ANTHROPIC),
    Route("GET", _MESSAGE_BATCH + "/results", message_batches.message_batch_results,
          "A message batch's results (JSON Lines)", dialect=MESSAGES, tags=_ANTHROPIC),
    Route("POST", "/v1/batches", batches.create_batch, "Create a batch of requests from an uploaded file",
          tags=_OPENAI),
    Route("GET", "/v1/batches", batches.list_batches, "List this key's batches", tags=_OPENAI),
    Route("GET", _BATCH, batches.get_batch, "A batch this key made", tags=_OPENAI),
    Route("POST", _BATCH + "/cancel", batches.cancel_batch, "Cancel a batch this key made", tags=_OPENAI),
    Route("GET", "/v1/key", own_key.own_key, "The caller's own key: limits, quota left, expiry, models",
          tags=_OPENAI),
    Route("POST", "/admin/keys", keys.create_key, "Create a key (the secret is returned once)",
          admin=True, status_code=201, openapi_extra=documented(keys.KeyCreate), tags=_KEYS),
    Route("GET", "/admin/keys", keys.list_keys, "List keys (no secrets)", admin=True, tags=_KEYS),
    Route("GET", "/admin/keys/{key_id}", keys.get_key, "Read one key", admin=True, tags=_KEYS),
    Route("PATCH", "/admin/keys/{key_id}", keys.update_key,
          "Change limits, models, expiry, thinking default or metadata", admin=True,
          openapi_extra=documented(keys.KeyLimits), tags=_KEYS),
    Route("POST", "/admin/keys/{key_id}/rotate", keys.rotate_key,
          "New secret; the old one keeps working for a grace period", admin=True,
          openapi_extra=documented(keys.KeyRotate, required=False), tags=_KEYS),
    Route("POST", "/admin/keys/{key_id}/revoke", keys.revoke_key, "Revoke a key (idempotent)",
          admin=True, tags=_KEYS),
    Route("DELETE", "/admin/keys/{key_id}", keys.delete_key, "Delete a key for good", admin=True, tags=_KEYS),
    Route("POST", "/admin/groups", groups.create_group, "Create a group of keys (shared limits and quota)",
          admin=True, status_code=201, openapi_extra=documented(GroupCreate), tags=_GROUPS),
    Route("GET", "/admin/groups", groups.list_groups, "List groups, with their number of keys", admin=True,
          tags=_GROUPS),
    Route("GET", "/admin/groups/{group_id}", groups.get_group, "Read one group", admin=True, tags=_GROUPS),
    Route("PATCH", "/admin/groups/{group_id}", groups.update_group, "Change a group's limits or quota",
          admin=True, openapi_extra=documented(GroupLimits), tags=_GROUPS),
    Route("DELETE", "/admin/groups/{group_id}", groups.delete_group, "Delete a group without keys",
          admin=True, tags=_GROUPS),
    Route("GET", "/admin/batches", admin_batches.list_batches, "Every key's batches, newest first",
          admin=True, tags=_ADMIN),
    Route("GET", "/admin/batches/{batch_id}", admin_batches.get_batch, "Any key's batch", admin=True,
          tags=_ADMIN),
    Route("POST", "/admin/batches/{batch_id}/cancel", admin_batches.cancel_batch, "Cancel any key's batch",
          admin=True, tags=_ADMIN),
    Route("GET", "/admin/files", admin_batches.list_files, "Every key's files, newest first", admin=True,
          tags=_ADMIN),
    Route("GET", "/admin/files/{file_id}", admin_batches.get_file, "Any key's file's record", admin=True,
          tags=_ADMIN),
    Route("DELETE", "/admin/files/{file_id}", admin_batches.delete_file, "Delete any key's file",
          admin=True, tags=_ADMIN),
    Route("GET", "/admin/usage", reads.usage, "Token usage totals, grouped by day, key or model",
          admin=True, tags=_ADMIN),
    Route("GET", "/admin/status", reads.status,
          "Live admission state: slots, queue, per-key in flight and waiting", admin=True, tags=_ADMIN),
    Route("GET", "/admin/audit", reads.audit, "Admin actions, newest first", admin=True, tags=_ADMIN),
    Route("GET", "/admin/requests", reads.requests, "Recent requests' telemetry (no prompt text, no keys)",
          admin=True, tags=_ADMIN),
    Route("GET", "/health", health.health, "Liveness: the gateway process is up", tags=("health",)),
    Route("GET", "/ready", health.ready, "Readiness: the model server answers /health", tags=("health",)),
    Route("GET", "/metrics", metrics_route.metrics, "Prometheus exposition", tags=("metrics",)),
)  # fmt: skip

_DIALECTS = {route.path: route.dialect for route in ROUTES}


def dialect_for(path: str) -> Dialect:
    """The dialect of the route at ``path``: Anthropic's under ``/v1/messages/`` (a message batch's
    routes, by id), OpenAI's for anything else (a 404 is answered in it)."""
    return _DIALECTS.get(path) or (MESSAGES if path.startswith(_MESSAGE_BATCHES) else OPENAI)


def install(app: FastAPI) -> None:
    """Add every route of :data:`ROUTES` to ``app``, each with its authentication unless it is public;
    and the console's (``GATEWAY_CONSOLE``), which check their session themselves."""
    if app.state.settings.console:
        console.install(app)
        console_keys.install(app)
        console_groups.install(app)
        console_usage.install(app)
        console_requests.install(app)
        console_oidc.install(app)
        console.install_fallback(app)
    for route in ROUTES:
        if route.path == LIVENESS:
            dependencies = []
        elif route.path in PUBLIC_ROUTES:
            dependencies = [Depends(public_limit)]
        else:
            check = admin_for if route.admin else principal_for
            dependencies = [Depends(check(route.dialect))]
        endpoint, name = route.endpoint, None
        if isinstance(endpoint, inference.InferenceRoute):
            # served as plain ASGI; the FastAPI route after it on the same path only documents it. A
            # Starlette route takes an ASGI app as its endpoint (not a function: called as the app), which
            # add_route's annotation leaves out
            asgi = cast(Callable[[Request], Awaitable[Response]], endpoint)
            app.add_route(route.path, asgi, methods=[route.method], include_in_schema=False)
            endpoint, name = inference.documented_only, route.path.strip("/").replace("/", "_")
        app.add_api_route(
            route.path,
            endpoint,
            name=name,
            methods=[route.method],
            dependencies=dependencies,
            status_code=route.status_code,
            openapi_extra=route.openapi_extra,
            tags=list(route.tags),
            include_in_schema=route.path != "/metrics",
            summary=route.summary,
        )
