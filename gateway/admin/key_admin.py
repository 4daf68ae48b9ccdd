"""Key administration: every change to a key — made through the admin API or by the local CLI on the
database — is made here, with its row in the audit trail, so both leave the same trail.

============  ==========================================================  =========================
action        detail (never a secret; new and rotated keys by prefix)     target
============  ==========================================================  =========================
key.create    name, prefix and the options set (expires_at ISO 8601 …)   the new key's id
key.update    name; changes: {field: {from, to}}, null ones included      the key's id
key.rotate    name, grace_s, the new prefix                               the key's id
key.revoke    name (no row when the key was revoked already)              the key's id
key.delete    name                                                        the key's id
group.create  name and the fields set                                     the new group's id
group.update  name; changes: {field: {from, to}}, null ones included      the group's id
group.delete  name                                                        the group's id
============  ==========================================================  =========================

Who acted is an :class:`Actor`: the admin's :class:`~gateway.auth.Principal` and client address, or
the local CLI's ``cli:<os user>`` from ``local``. No web framework: the CLI uses this as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.admin.key_fields import GroupCreate, GroupLimits, KeyCreate, KeyLimits
from gateway.auth import KeyRecord, KeyStore, Principal
from gateway.auth.audit import AuditLog
from gateway.auth.groups import GroupRecord, GroupStore


@dataclass(frozen=True, slots=True)
class Actor:
    """Who changes a key: ``principal`` (its name, id and kind go to the audit row) and ``client``,
    the address it came from (``local`` for the CLI on the database)."""

    principal: Principal
    client: str | None


def _loggable(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in fields.items()}


def stored_view(record: KeyRecord | GroupRecord) -> dict[str, Any]:
    """What a key or group holds, as its listing shows it (a group by name, times ISO 8601) but its
    quota's period and mode as stored: the listing hides them while there is no quota."""
    view = record.public(datetime.now(UTC)) if isinstance(record, KeyRecord) else record.public()
    return view | {"quota_period": record.quota_period, "quota_mode": record.quota_mode}


def _changes(
    before: Mapping[str, Any], after: Mapping[str, Any], fields: Mapping[str, Any]
) -> dict[str, Any]:
    """``{field: {"from": before, "to": after}}`` for each of ``fields`` whose value changed."""
    return {
        name: {"from": before.get(name), "to": after.get(name)}
        for name in fields
        if before.get(name) != after.get(name)
    }


class KeyAdmin:
    """Audited changes to the keys of ``store`` and their groups. Errors are the stores':
    ``KeyNotFoundError``, ``KeyExistsError``, ``Group{NotFound,Exists,InUse}Error``."""

    def __init__(self, store: KeyStore, audit: AuditLog) -> None:
        self._store = store
        self._groups = GroupStore(store.engine)
        self._audit = audit

    async def _record(self, actor: Actor, action: str, target: str, **detail: Any) -> None:
        await self._audit.record(actor.principal, action, target, actor.client, detail)

    async def create(self, actor: Actor, body: KeyCreate) -> tuple[KeyRecord, str | None]:
        """A new key and its secret (the only time it exists)."""
        fields = body.fields()
        record, secret = await self._store.create(body.name, **fields)
        await self._record(
            actor, "key.create", record.id, name=record.name, prefix=record.prefix, **_loggable(fields)
        )
        return record, secret

    async def update(self, actor: Actor, ref: str, body: KeyLimits) -> KeyRecord:
        """The key (id or name) with the fields ``body`` sets changed; the trail says each one's value
        before and after (:func:`stored_view`)."""
        changes = body.changes()
        before = await self._store.get(ref)
        record = await self._store.update(ref, changes)
        diff = _changes(stored_view(before), stored_view(record), changes)
        await self._record(actor, "key.update", record.id, name=record.name, changes=diff)
        return record

    async def rotate(self, actor: Actor, ref: str, grace_s: float) -> tuple[KeyRecord, str]:
        """A new secret for the key; the old one keeps working ``grace_s`` seconds."""
        record, secret = await self._store.rotate(ref, timedelta(seconds=grace_s))
        await self._record(
            actor, "key.rotate", record.id, name=record.name, grace_s=grace_s, prefix=record.prefix
        )
        return record, secret

    async def revoke(self, actor: Actor, ref: str) -> tuple[KeyRecord, bool]:
        """The key, revoked, and whether this call revoked it; a key revoked already is left as it
        is (its ``revoked_at`` kept), with no second audit row."""
        record, revoked = await self._store.revoke(ref)
        if revoked:
            await self._record(actor, "key.revoke", record.id, name=record.name)
        return record, revoked

    async def delete(self, actor: Actor, ref: str) -> KeyRecord:
        """The key as it was before it was deleted for good."""
        record = await self._store.get(ref)
        await self._store.delete(record.id)
        await self._record(actor, "key.delete", record.id, name=record.name)
        return record

    async def create_group(self, actor: Actor, body: GroupCreate) -> GroupRecord:
        """A new group."""
        fields = body.fields()
        record = await self._groups.create(body.name, fields)
        await self._record(actor, "group.create", record.id, name=record.name, **fields)
        return record

    async def update_group(self, actor: Actor, ref: str, body: GroupLimits) -> GroupRecord:
        """The group (id or name) with the fields ``body`` sets changed."""
        changes = body.changes()
        before = await self._groups.get(ref)
        record = await self._groups.update(ref, changes)
        diff = _changes(stored_view(before), stored_view(record), changes)
        await self._record(actor, "group.update", record.id, name=record.name, changes=diff)
        return record

    async def delete_group(self, actor: Actor, ref: str) -> GroupRecord:
        """The group as it was before it was deleted (it had no keys)."""
        record = await self._groups.delete(ref)
        await self._record(actor, "group.delete", record.id, name=record.name)
        return record
