"""The console's groups (``/console/groups``): the groups of keys with their number of keys, limits
and quota left; create one, change one on its own page, delete an empty one after a confirmation
page. A key joins a group on its own page. Forms as the keys' (:mod:`gateway.console.forms`): a
refused one comes back as typed, the bad field named. Changes go through
:class:`~gateway.admin.key_admin.KeyAdmin` (the admin API's audit trail); every page is behind a
session and every form its CSRF token (:func:`gateway.console.pages.page`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin.key_admin import stored_view
from gateway.admin.key_fields import GroupCreate, GroupLimits
from gateway.admin.keys import changed, key_admin
from gateway.auth.groups import (
    GroupExistsError,
    GroupInUseError,
    GroupNotFoundError,
    GroupRecord,
    GroupStore,
)
from gateway.console import forms
from gateway.console.key_pages import quota_left
from gateway.console.pages import page, render
from gateway.console.sessions import Session
from gateway.errors import GatewayError

FIELDS = [forms.FIELDS[name] for name in forms.GROUP_FIELDS]


async def groups(request: Request, session: Session) -> Response:
    return await _list(request)


async def _list(
    request: Request, values: Mapping[str, str] | None = None, errors: Mapping[str, str] | None = None
) -> Response:
    """The groups page; ``values`` and ``errors`` of a refused create form (HTTP 400)."""
    rows = []
    for record, keys in await _store(request).list():
        view = record.public(keys)
        view["quota_left"] = await quota_left(request, record)
        rows.append(view)
    return render(
        request,
        "groups.html",
        400 if errors else 200,
        groups=rows,
        fields=FIELDS,
        values=values or {},
        errors=errors or {},
    )


def _store(request: Request) -> GroupStore:
    return GroupStore(request.app.state.store.engine)


async def _group(request: Request) -> GroupRecord:
    try:
        return await _store(request).get(request.path_params["group_id"])
    except GroupNotFoundError:
        raise GatewayError("group_not_found", "No such group.") from None


async def group_page(request: Request, session: Session) -> Response:
    record = await _group(request)
    return await _group_view(request, record, forms.shown(stored_view(record)))


async def _group_view(
    request: Request,
    record: GroupRecord,
    values: Mapping[str, str],
    errors: Mapping[str, str] | None = None,
    was: Mapping[str, str] | None = None,
) -> Response:
    view = record.public()
    return render(
        request,
        "group.html",
        400 if errors else 200,
        group=view,
        quota_left=await quota_left(request, record),
        fields=FIELDS,
        values=values,
        was=was if was is not None else forms.shown(stored_view(record)),
        errors=errors or {},
    )


async def create_group(request: Request, session: Session) -> Response:
    form: dict[str, str] = request.state.form
    try:
        name = {"name": form.get("name", "").strip()}
        body = forms.body(GroupCreate, form, forms.GROUP_FIELDS, edit=False, extra=name)
        admin, who = key_admin(request, session.principal)
        try:
            await admin.create_group(who, body)
        except GroupExistsError:
            raise forms.FormError({"name": f"A group named {body.name!r} exists."}) from None
    except forms.FormError as refused:
        return await _list(request, form, refused.errors)
    return _back()


async def update_group(request: Request, session: Session) -> Response:
    """The fields of the edit form that differ from what it showed (``was_<name>``), as the keys'."""
    form: dict[str, str] = request.state.form
    record = await _group(request)
    edited = {name: value for name, value in form.items() if form.get(f"was_{name}") != value}
    try:
        body = forms.body(GroupLimits, edited, forms.GROUP_FIELDS, edit=True)
    except forms.FormError as refused:
        was = {name: form.get(f"was_{name}", "") for name in forms.GROUP_FIELDS}
        return await _group_view(request, record, form, refused.errors, was)
    admin, who = key_admin(request, session.principal)
    await _on_group(admin.update_group(who, record.id, body))
    changed(request)
    return _back()


async def confirm_delete(request: Request, session: Session) -> Response:
    record = await _group(request)
    return render(
        request,
        "confirm.html",
        question=f"Delete the group {record.name}?",
        consequence="Its limits and quota go with it; its usage rows stay in the ledger.",
        action=f"/console/groups/{record.id}/delete",
        button="Delete",
        back=f"/console/groups/{record.id}",
    )


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
    """The groups pages' routes (after :func:`gateway.console.pages.install`)."""
    for path, endpoint, method in (
        ("/console/groups", groups, "GET"),
        ("/console/groups", create_group, "POST"),
        ("/console/groups/{group_id}", group_page, "GET"),
        ("/console/groups/{group_id}", update_group, "POST"),
        ("/console/groups/{group_id}/delete", confirm_delete, "GET"),
        ("/console/groups/{group_id}/delete", delete_group, "POST"),
    ):
        app.add_api_route(path, page(endpoint), methods=[method], include_in_schema=False)
