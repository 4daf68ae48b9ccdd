"""The console's groups page (``/console/groups``): the groups of keys with their number of keys,
limits and quota; create one, change one, delete an empty one. A key joins a group on the keys page.
Changes go through :class:`~gateway.admin.key_admin.KeyAdmin` (the admin API's audit trail); every
page is behind a session and every form its CSRF token (:func:`gateway.console.pages.page`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin.key_fields import GroupCreate, GroupLimits
from gateway.admin.keys import changed, key_admin
from gateway.auth.groups import GroupExistsError, GroupInUseError, GroupNotFoundError, GroupStore
from gateway.console.pages import form_fields, page, render, validated
from gateway.console.sessions import Session
from gateway.errors import GatewayError


async def groups(request: Request, session: Session) -> Response:
    listed = await GroupStore(request.app.state.store.engine).list()
    return render(request, "groups.html", groups=[record.public(keys) for record, keys in listed])


async def create_group(request: Request, session: Session) -> Response:
    form: dict[str, str] = request.state.form
    body = validated(GroupCreate, form_fields(form) | {"name": form.get("name", "").strip()})
    admin, who = key_admin(request, session.principal)
    try:
        await admin.create_group(who, body)
    except GroupExistsError:
        raise GatewayError("group_exists", f"A group named {body.name!r} exists.") from None
    return _back()


async def update_group(request: Request, session: Session) -> Response:
    """The fields of the edit form that differ from what it showed (``was_<name>``), as the keys'."""
    form: dict[str, str] = request.state.form
    edited = {name: value for name, value in form.items() if form.get(f"was_{name}") != value}
    body = validated(GroupLimits, form_fields(edited, every=True))
    admin, who = key_admin(request, session.principal)
    await _on_group(admin.update_group(who, request.path_params["group_id"], body))
    changed(request)
    return _back()


async def delete_group(request: Request, session: Session) -> Response:
    admin, who = key_admin(request, session.principal)
    await _on_group(admin.delete_group(who, request.path_params["group_id"]))
    return _back()


async def _on_group(change: Any) -> None:
    try:
        await change
    except GroupNotFoundError:
        raise GatewayError("group_not_found", "No such group.") from None
    except GroupInUseError:
        raise GatewayError("group_in_use", "This group still has keys: move or delete them first.") from None


def _back() -> Response:
    return RedirectResponse("/console/groups", status_code=303)


def install(app: Any) -> None:
    """The groups page's routes (after :func:`gateway.console.pages.install`)."""
    for path, endpoint, method in (
        ("/console/groups", groups, "GET"),
        ("/console/groups", create_group, "POST"),
        ("/console/groups/{group_id}", update_group, "POST"),
        ("/console/groups/{group_id}/delete", delete_group, "POST"),
    ):
        app.add_api_route(path, page(endpoint), methods=[method], include_in_schema=False)
