"""``/admin/keys``: create, list, read, change, rotate, revoke and delete API keys (admin scope).

Every change is made by :class:`~gateway.admin.key_admin.KeyAdmin`, which writes its audit row
(actor, action, key, client address) — the local CLI's changes go the same way. A new or rotated
secret appears once, in the response that made it; never in the audit log, the ledger or a log line.
Bodies are read by the handlers, after authentication, bounded (:data:`BODY_BYTES`,
:data:`gateway.body.json_limits.ADMIN`) and validated by :mod:`gateway.admin.key_fields` (400 naming the
field).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import Depends
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.admin.key_admin import Actor, KeyAdmin
from gateway.admin.key_fields import KeyCreate, KeyLimits, KeyRotate
from gateway.auth import KeyExistsError, KeyNotFoundError, KeyRevokedError, KeyStore, Principal
from gateway.auth.groups import GroupNotFoundError
from gateway.body.json_limits import ADMIN
from gateway.body.read import body_bounds, read_json
from gateway.dialects.openai.dialect import OPENAI
from gateway.errors import GatewayError, invalid_request
from gateway.http.auth import admin_for, client_address

AdminDep = Annotated[Principal, Depends(admin_for(OPENAI))]
#: Largest admin request body, bytes.
BODY_BYTES = 64 * 1024
M = TypeVar("M", bound=BaseModel)


def _store(request: Request) -> KeyStore:
    store: KeyStore = request.app.state.store
    return store


def key_admin(request: Request, principal: Principal) -> tuple[KeyAdmin, Actor]:
    """The audited key changes, and who makes them from where."""
    return KeyAdmin(_store(request), request.app.state.audit), Actor(principal, client_address(request))


async def admin_body(request: Request, model: type[M], empty: M | None = None) -> M:
    """The request's body as ``model`` (400 naming the bad field); ``empty`` when there is none and
    ``empty`` is given."""
    if (
        empty is not None
        and request.headers.get("content-length") in (None, "0")
        and ("transfer-encoding" not in request.headers)
    ):
        return empty
    body, _ = await read_json(request, body_bounds(request.app.state.settings, BODY_BYTES, ADMIN))
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None


def _not_found(ref: str) -> GatewayError:
    return GatewayError("key_not_found", f"No key {ref!r}.", param="id")


def _no_group(ref: str | None) -> GatewayError:
    return GatewayError(
        "invalid_value", f"No group {ref!r}: create it first (POST /admin/groups).", param="group"
    )


def changed(request: Request) -> None:
    request.app.state.authenticator.invalidate()  # this process sees the change at once


async def create_key(request: Request, actor: AdminDep) -> JSONResponse:
    body = await admin_body(request, KeyCreate)
    admin, who = key_admin(request, actor)
    try:
        record, secret = await admin.create(who, body)
    except KeyExistsError:
        raise GatewayError("key_exists", f"A key named {body.name!r} exists.", param="name") from None
    except GroupNotFoundError:
        raise _no_group(body.group) from None
    return JSONResponse({**record.public(datetime.now(UTC)), "key": secret}, status_code=201)


async def list_keys(request: Request) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"data": [r.public(now) for r in await _store(request).list()]}


async def get_key(key_id: str, request: Request) -> dict[str, Any]:
    try:
        return (await _store(request).get(key_id)).public(datetime.now(UTC))
    except KeyNotFoundError:
        raise _not_found(key_id) from None


async def update_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    body = await admin_body(request, KeyLimits)
    admin, who = key_admin(request, actor)
    try:
        record = await admin.update(who, key_id, body)
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    except GroupNotFoundError:
        raise _no_group(body.group) from None
    changed(request)
    return record.public(datetime.now(UTC))


async def rotate_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    body = await admin_body(request, KeyRotate, empty=KeyRotate())
    grace_s = body.grace_s if body.grace_s is not None else request.app.state.settings.rotate_grace_s
    admin, who = key_admin(request, actor)
    try:
        record, secret = await admin.rotate(who, key_id, grace_s)
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    except KeyRevokedError:
        raise GatewayError("key_revoked", f"Key {key_id!r} is revoked: it gets no new secret.") from None
    changed(request)
    return {**record.public(datetime.now(UTC)), "key": secret}


async def revoke_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    admin, who = key_admin(request, actor)
    try:
        record, _ = await admin.revoke(who, key_id)  # one revoked already: 200 with it as it is
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    changed(request)
    return record.public(datetime.now(UTC))


async def delete_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    admin, who = key_admin(request, actor)
    try:
        record = await admin.delete(who, key_id)
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    changed(request)
    return {"id": record.id, "deleted": True}
