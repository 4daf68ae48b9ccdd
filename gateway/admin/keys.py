"""``/admin/keys``: create, list, read, change, rotate, revoke and delete API keys (admin scope).

Every action is written to the audit log (actor, action, key, client address). A new or rotated
secret appears once, in the response that made it; never in the audit log, the ledger or a log line.
Bodies are read by the handlers, after authentication, bounded (:data:`BODY_BYTES`,
:data:`gateway.json_limits.ADMIN`); every number has a bound the database's integer columns hold.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, TypeVar

from fastapi import Depends
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway import json_codec
from gateway.auth import KeyExistsError, KeyNotFoundError, KeyStore, Principal
from gateway.auth.store import METADATA_BYTES, METADATA_DEPTH, check_name
from gateway.dialects.openai import OPENAI
from gateway.errors import GatewayError, invalid_request
from gateway.http.auth import admin_for
from gateway.json_limits import ADMIN, deeper_than
from gateway.proxy.body import body_bounds, read_json

AdminDep = Annotated[Principal, Depends(admin_for(OPENAI))]
Thinking = Literal["off", "low", "high", "max"]
#: Largest admin request body, bytes.
BODY_BYTES = 64 * 1024
#: The largest limit a key may have: PostgreSQL's ``integer`` (SQLAlchemy ``Integer``).
_INT_MAX = 2**31 - 1
#: The longest rotation grace period, s (ten years).
_GRACE_MAX_S = 10 * 365 * 86_400
M = TypeVar("M", bound=BaseModel)


class KeyLimits(BaseModel):
    """Limits and options of a key; every field optional (None: unlimited / default)."""

    model_config = ConfigDict(extra="forbid")

    expires_at: datetime | None = Field(default=None, description="UTC expiry (ISO 8601); null: never")
    models: list[str] | None = Field(default=None, description="Model allow-list; null: every model")
    rpm: int | None = Field(default=None, ge=1, le=_INT_MAX, description="Requests per minute")
    tpm: int | None = Field(
        default=None, ge=1, le=_INT_MAX, description="Tokens per minute (prompt + completion)"
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=_INT_MAX, description="Requests in flight at once"
    )
    priority: int | None = Field(default=None, ge=1, le=100, description="Weight in the fair queue")
    default_thinking: Thinking | None = Field(default=None, description="Default thinking mode")
    metadata: dict[str, Any] | None = Field(default=None, description="Free-form labels (team, owner …)")

    @field_validator("metadata")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """Metadata nests at most :data:`~gateway.auth.store.METADATA_DEPTH` levels and takes at most
        :data:`~gateway.auth.store.METADATA_BYTES` bytes as JSON (what every listing carries)."""
        if value is not None:
            if deeper_than(value, METADATA_DEPTH):
                raise ValueError(f"metadata may nest at most {METADATA_DEPTH} levels")
            if len(json_codec.dumps(value)) > METADATA_BYTES:
                raise ValueError(f"metadata may take at most {METADATA_BYTES} bytes as JSON")
        return value


class KeyCreate(KeyLimits):
    """``POST /admin/keys`` body."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@\-]+$")
    scopes: list[Literal["admin", "backend_fields"]] = Field(
        default_factory=list,
        description='["admin"] for an admin key; "backend_fields" lets it set vLLM\'s scheduling, '
        "template and KV fields (gateway/openai_api/fields.py)",
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        check_name(value)
        return value


class KeyRotate(BaseModel):
    """``POST /admin/keys/{id}/rotate`` body."""

    model_config = ConfigDict(extra="forbid")

    grace_s: float | None = Field(
        default=None, ge=0, le=_GRACE_MAX_S, description="How long the old secret still works, s"
    )


def _store(request: Request) -> KeyStore:
    store: KeyStore = request.app.state.store
    return store


async def _audit(request: Request, actor: Principal, action: str, target: str | None, **detail: Any) -> None:
    client = request.client.host if request.client else None
    await request.app.state.audit.record(actor, action, target, client, detail)


async def _body(request: Request, model: type[M], empty: M | None = None) -> M:
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


def _changed(request: Request) -> None:
    request.app.state.authenticator.invalidate()  # this process sees the change at once


async def create_key(request: Request, actor: AdminDep) -> JSONResponse:
    body = await _body(request, KeyCreate)
    fields = body.model_dump(exclude_none=True, exclude={"name", "scopes"})
    try:
        record, secret = await _store(request).create(body.name, scopes=body.scopes, **fields)
    except KeyExistsError:
        raise GatewayError("key_exists", f"A key named {body.name!r} exists.", param="name") from None
    await _audit(
        request, actor, "key.create", record.id, name=record.name, prefix=record.prefix, **_loggable(fields)
    )
    return JSONResponse({**record.public(datetime.now(UTC)), "key": secret}, status_code=201)


def _loggable(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in fields.items()}


async def list_keys(request: Request) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"data": [r.public(now) for r in await _store(request).list()]}


async def get_key(key_id: str, request: Request) -> dict[str, Any]:
    try:
        return (await _store(request).get(key_id)).public(datetime.now(UTC))
    except KeyNotFoundError:
        raise _not_found(key_id) from None


async def update_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    changes = (await _body(request, KeyLimits)).model_dump(exclude_unset=True)
    try:
        record = await _store(request).update(key_id, changes)
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    _changed(request)
    await _audit(request, actor, "key.update", record.id, **_loggable(changes))
    return record.public(datetime.now(UTC))


async def rotate_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    body = await _body(request, KeyRotate, empty=KeyRotate())
    grace_s = body.grace_s if body.grace_s is not None else request.app.state.settings.rotate_grace_s
    try:
        record, secret = await _store(request).rotate(key_id, timedelta(seconds=grace_s))
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    _changed(request)
    await _audit(request, actor, "key.rotate", record.id, grace_s=grace_s, prefix=record.prefix)
    return {**record.public(datetime.now(UTC)), "key": secret}


async def revoke_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    try:
        record = await _store(request).revoke(key_id)
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    _changed(request)
    await _audit(request, actor, "key.revoke", record.id)
    return record.public(datetime.now(UTC))


async def delete_key(key_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    try:
        record = await _store(request).get(key_id)
        await _store(request).delete(record.id)
    except KeyNotFoundError:
        raise _not_found(key_id) from None
    _changed(request)
    await _audit(request, actor, "key.delete", record.id, name=record.name)
    return {"id": record.id, "deleted": True}
