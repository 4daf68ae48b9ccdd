"""The console's keys (``/console/keys``): the list with each key's expiry, last use, requests and
tokens over the last day and quota left; a key's own page to edit it (:mod:`gateway.console.forms`:
selects for choices, durations as durations), rotate it, and revoke or delete it after a confirmation
page. A refused form comes back as it was typed, the bad field named, with HTTP 400.

Changes go through :class:`~gateway.admin.key_admin.KeyAdmin` (the admin API's audit trail); every
page is behind a session and every form its CSRF token (:func:`gateway.console.pages.page`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.admin import reads
from gateway.admin.key_admin import stored_view
from gateway.admin.key_fields import GRACE_MAX_S, KeyCreate, KeyLimits
from gateway.admin.keys import changed, key_admin
from gateway.auth import KeyExistsError, KeyNotFoundError, KeyRecord, KeyRevokedError
from gateway.auth.groups import GroupNotFoundError, GroupRecord, GroupStore
from gateway.console import forms
from gateway.console.pages import page, render
from gateway.console.sessions import Session
from gateway.errors import GatewayError

#: The window of the list's "last day" figures.
DAY = "24h"


async def keys(request: Request, session: Session) -> Response:
    return await _list(request)


async def _list(
    request: Request, values: Mapping[str, str] | None = None, errors: Mapping[str, str] | None = None
) -> Response:
    """The keys page; ``values`` and ``errors`` of a refused create form (HTTP 400)."""
    now = datetime.now(UTC)
    day = {row["key"]: row for row in (await reads.usage(request, group_by="key", since=DAY))["data"]}
    rows = []
    for record in await request.app.state.store.list():
        view = record.public(now)
        used = day.get(record.name) or {}
        view["day_requests"] = used.get("requests") or 0
        view["day_tokens"] = (used.get("prompt_tokens") or 0) + (used.get("completion_tokens") or 0)
        view["quota_left"] = await quota_left(request, record)
        rows.append(view)
    return render(
        request,
        "keys.html",
        400 if errors else 200,
        keys=rows,
        fields=[forms.FIELDS[name] for name in forms.KEY_FIELDS],
        groups=await _group_choices(request),
        values=values or {},
        errors=errors or {},
    )


async def quota_left(request: Request, record: KeyRecord | GroupRecord) -> int | None:
    """What is left of the key's or group's own quota this period (tokens of cost), None if it has none."""
    quota = record.quota()
    if quota is None:
        return None
    return (await request.app.state.pipeline.quotas.standing(quota)).remaining


async def _group_choices(request: Request) -> tuple[tuple[str, str], ...]:
    """The group select's choices: none, then every group by name."""
    listed = await GroupStore(request.app.state.store.engine).list()
    return forms.select(forms.FIELDS["group"], (record.name for record, _ in listed))


async def key_page(request: Request, session: Session) -> Response:
    record = await _key(request)
    return await _key_view(request, record, forms.shown(stored_view(record)))


async def _key_view(
    request: Request,
    record: KeyRecord,
    values: Mapping[str, str],
    errors: Mapping[str, str] | None = None,
    was: Mapping[str, str] | None = None,
) -> Response:
    """A key's page: its figures and its edit form showing ``values`` (what was typed, when
    ``errors`` refused it: then ``was`` is what the form first showed)."""
    view = record.public(datetime.now(UTC))
    quotas = await request.app.state.pipeline.quotas.report(record.principal().quotas())
    used = (await reads.usage(request, group_by="key", key=record.name, since=DAY))["data"]
    grace_s = request.app.state.settings.rotate_grace_s
    return render(
        request,
        "key.html",
        400 if errors else 200,
        key=view,
        quotas=quotas,
        day=used[0] if used else None,
        fields=[forms.FIELDS[name] for name in forms.KEY_FIELDS],
        groups=await _group_choices(request),
        values=values,
        was=was if was is not None else forms.shown(stored_view(record)),
        errors=errors or {},
        grace=forms.duration_text(grace_s),
    )


async def _key(request: Request) -> KeyRecord:
    try:
        record: KeyRecord = await request.app.state.store.get(request.path_params["key_id"])
    except KeyNotFoundError:
        raise GatewayError("key_not_found", "No such key.") from None
    return record


async def create_key(request: Request, session: Session) -> Response:
    form: dict[str, str] = request.state.form
    try:
        extra: dict[str, Any] = {"name": form.get("name", "").strip()}
        if form.get("admin") == "on":
            extra["scopes"] = ["admin"]
        body = forms.body(KeyCreate, form, forms.KEY_FIELDS, edit=False, extra=extra)
        admin, who = key_admin(request, session.principal)
        try:
            record, secret = await admin.create(who, body)
        except KeyExistsError:
            raise forms.FormError({"name": f"A key named {body.name!r} exists."}) from None
        except GroupNotFoundError:
            raise forms.FormError({"group": f"No group {body.group!r}."}) from None
    except forms.FormError as refused:
        return await _list(request, form, refused.errors)
    return render(request, "secret.html", key_name=record.name, secret=secret, what="created")


async def update_key(request: Request, session: Session) -> Response:
    """The fields of the edit form that differ from what it showed (``was_<name>``; a field sent
    without one counts as changed): an empty one means unlimited / the default; the others are left
    as they are."""
    form: dict[str, str] = request.state.form
    record = await _key(request)
    edited = {name: value for name, value in form.items() if form.get(f"was_{name}") != value}
    try:
        body = forms.body(KeyLimits, edited, forms.KEY_FIELDS, edit=True)
        admin, who = key_admin(request, session.principal)
        try:
            await admin.update(who, record.id, body)
        except GroupNotFoundError:
            raise forms.FormError({"group": f"No group {body.group!r}."}) from None
    except forms.FormError as refused:
        was = {name: form.get(f"was_{name}", "") for name in forms.KEY_FIELDS}
        return await _key_view(request, record, form, refused.errors, was)
    changed(request)
    return RedirectResponse(f"/console/keys/{record.id}", status_code=303)


async def rotate_key(request: Request, session: Session) -> Response:
    """A new secret; the old one works for the form's ``grace`` (a duration, ``0``: not at all)."""
    form: dict[str, str] = request.state.form
    record = await _key(request)
    text = form.get("grace", "").strip()
    try:
        grace_s = forms.seconds(text) if text else request.app.state.settings.rotate_grace_s
        if not 0 <= grace_s <= GRACE_MAX_S:
            raise ValueError(f"must be between 0 and {forms.duration_text(GRACE_MAX_S)}")
    except ValueError as exc:
        return await _key_view(request, record, forms.shown(stored_view(record)), {"grace": str(exc)})
    admin, who = key_admin(request, session.principal)
    try:
        record, secret = await admin.rotate(who, record.id, grace_s)
    except KeyRevokedError:
        raise GatewayError("key_revoked", "This key is revoked: it gets no new secret.") from None
    changed(request)
    return render(
        request,
        "secret.html",
        key_name=record.name,
        secret=secret,
        what="rotated",
        grace=forms.duration_text(grace_s) if grace_s else "",
    )


#: What each confirmed action asks and does: the question's verb, its consequence, the button.
ACTIONS = {
    "revoke": ("Revoke", "Requests with its secret are refused from now on. This cannot be undone."),
    "delete": ("Delete", "The key is removed for good; its usage rows stay in the ledger."),
}


async def confirm(request: Request, session: Session) -> Response:
    """``GET /console/keys/{id}/revoke|delete``: the question, with the form that does it."""
    action = request.path_params["action"]
    if action not in ACTIONS:
        raise GatewayError("not_found", "No such page.")
    record = await _key(request)
    verb, consequence = ACTIONS[action]
    return render(
        request,
        "confirm.html",
        question=f"{verb} the key {record.name}?",
        consequence=consequence,
        action=f"/console/keys/{record.id}/{action}",
        button=verb,
        back=f"/console/keys/{record.id}",
    )


async def revoke_key(request: Request, session: Session) -> Response:
    record = await _key(request)
    admin, who = key_admin(request, session.principal)
    await admin.revoke(who, record.id)
    changed(request)
    return RedirectResponse(f"/console/keys/{record.id}", status_code=303)


async def delete_key(request: Request, session: Session) -> Response:
    record = await _key(request)
    admin, who = key_admin(request, session.principal)
    await admin.delete(who, record.id)
    changed(request)
    return RedirectResponse("/console/keys", status_code=303)


def install(app: Any) -> None:
    """The keys pages' routes (after :func:`gateway.console.pages.install`)."""
    for path, endpoint, method in (
        ("/console/keys", keys, "GET"),
        ("/console/keys", create_key, "POST"),
        ("/console/keys/{key_id}", key_page, "GET"),
        ("/console/keys/{key_id}", update_key, "POST"),
        ("/console/keys/{key_id}/rotate", rotate_key, "POST"),
        ("/console/keys/{key_id}/revoke", revoke_key, "POST"),
        ("/console/keys/{key_id}/delete", delete_key, "POST"),
        ("/console/keys/{key_id}/{action}", confirm, "GET"),
    ):
        app.add_api_route(path, page(endpoint), methods=[method], include_in_schema=False)
