"""``/admin/batches`` and ``/admin/files``: every key's batches and files for operators (admin scope:
the route table attaches the check) — list, show, cancel, delete, audited
(:class:`~gateway.admin.batch_admin.BatchAdmin`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query
from starlette.requests import Request

from gateway.admin.batch_admin import BatchAdmin, InUseError, NotFoundError
from gateway.admin.key_admin import Actor
from gateway.auth import Principal
from gateway.dialects.openai.dialect import OPENAI
from gateway.errors import GatewayError
from gateway.http.auth import admin_for, client_address

AdminDep = Annotated[Principal, Depends(admin_for(OPENAI))]
Limit = Annotated[int, Query(ge=1, le=1000, description="How many, newest first")]
Key = Annotated[str | None, Query(description="Only this key's (its name or id)")]


def _admin(request: Request) -> BatchAdmin:
    state = request.app.state
    return BatchAdmin(state.batches, state.files, state.store, state.audit)


def _not_found(error: NotFoundError) -> GatewayError:
    return GatewayError("not_found", str(error).capitalize() + ".")


async def list_batches(
    request: Request, limit: Limit = 100, key: Key = None, status: str | None = None
) -> Any:
    try:
        return {"data": await _admin(request).list_batches(limit, key, status)}
    except NotFoundError as error:
        raise _not_found(error) from None


async def get_batch(batch_id: str, request: Request) -> dict[str, Any]:
    try:
        return await _admin(request).batch(batch_id)
    except NotFoundError as error:
        raise _not_found(error) from None


async def cancel_batch(batch_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    try:
        answer = await _admin(request).cancel(Actor(actor, client_address(request)), batch_id)
    except NotFoundError as error:
        raise _not_found(error) from None
    request.app.state.batch_runner.wake()
    return answer


async def list_files(request: Request, limit: Limit = 100, key: Key = None) -> Any:
    try:
        return {"data": await _admin(request).list_files(limit, key)}
    except NotFoundError as error:
        raise _not_found(error) from None


async def get_file(file_id: str, request: Request) -> dict[str, Any]:
    try:
        return await _admin(request).file(file_id)
    except NotFoundError as error:
        raise _not_found(error) from None


async def delete_file(file_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    try:
        return await _admin(request).delete_file(Actor(actor, client_address(request)), file_id)
    except NotFoundError as error:
        raise _not_found(error) from None
    except InUseError as error:
        message = f"File {file_id} is the input of batch {error}, which has not ended: cancel it first."
        raise GatewayError("invalid_request", message, param="file_id") from None
