"""``/admin/groups``: create, list, read, change and delete groups of keys (admin scope); a key joins
one with ``PATCH /admin/keys/{id}`` ``{"group": "<name>"}``.

Every change goes through :class:`~gateway.admin.key_admin.KeyAdmin` (its audit row), as the
keys' do; bodies are validated by :mod:`gateway.admin.key_fields` (400 naming the field).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.admin.key_fields import GroupCreate, GroupLimits
from gateway.admin.keys import AdminDep, admin_body, changed, key_admin
from gateway.auth.groups import GroupExistsError, GroupInUseError, GroupNotFoundError, GroupStore
from gateway.errors import GatewayError


def group_not_found(ref: str) -> GatewayError:
    return GatewayError("group_not_found", f"No group {ref!r}.", param="group")


async def create_group(request: Request, actor: AdminDep) -> JSONResponse:
    body = await admin_body(request, GroupCreate)
    admin, who = key_admin(request, actor)
    try:
        record = await admin.create_group(who, body)
    except GroupExistsError:
        raise GatewayError("group_exists", f"A group named {body.name!r} exists.", param="name") from None
    return JSONResponse(record.public(keys=0), status_code=201)


async def list_groups(request: Request) -> dict[str, Any]:
    groups = GroupStore(request.app.state.store.engine)
    return {"data": [record.public(keys) for record, keys in await groups.list()]}


async def get_group(group_id: str, request: Request) -> dict[str, Any]:
    try:
        return (await GroupStore(request.app.state.store.engine).get(group_id)).public()
    except GroupNotFoundError:
        raise group_not_found(group_id) from None


async def update_group(group_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    body = await admin_body(request, GroupLimits)
    admin, who = key_admin(request, actor)
    try:
        record = await admin.update_group(who, group_id, body)
    except GroupNotFoundError:
        raise group_not_found(group_id) from None
    changed(request)  # its keys' principals carry its limits
    return record.public()


async def delete_group(group_id: str, request: Request, actor: AdminDep) -> dict[str, Any]:
    admin, who = key_admin(request, actor)
    try:
        record = await admin.delete_group(who, group_id)
    except GroupNotFoundError:
        raise group_not_found(group_id) from None
    except GroupInUseError:
        message = f"Group {group_id!r} still has keys: move or delete them first."
        raise GatewayError("group_in_use", message) from None
    return {"id": record.id, "deleted": True}
