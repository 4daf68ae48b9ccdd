"""Audit log: every admin action — who, what, on which key, when, from where — stored for good.

Who is the actor's name, its id and its kind (``key``, ``jwt``, ``bootstrap``, or ``cli`` for the
local CLI on the database, from client ``local``): names alone could be confused (a key and a JWT
subject may both be called ``ops``). The id and kind are kept in the row's detail (``actor_id``,
``actor_kind``) and shown beside the name. What each action writes: :mod:`gateway.admin.key_admin`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.auth.principal import Principal
from gateway.auth.store import METADATA_DEPTH, readable
from gateway.storage.tables import AuditRow, utc

#: How deep an action's detail may nest in a listing: a key's metadata is three levels down in an
#: update's (``changes`` → the field → ``from`` / ``to``).
DETAIL_DEPTH = METADATA_DEPTH + 3


class AuditLog:
    """Append and read admin actions."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(
        self,
        actor: Principal,
        action: str,
        target: str | None,
        client: str | None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Store one action (written at once: admin actions are rare and must not be lost)."""
        who = {"actor_id": actor.key_id, "actor_kind": actor.kind}
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(AuditRow).values(
                    at=datetime.now(UTC),
                    actor=actor.name,
                    action=action,
                    target=target,
                    client=client,
                    detail={**(detail or {}), **who},
                )
            )

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` actions, newest first; ``target_name``: the name the action's detail
        gives its target (a key's, a group's), if any."""
        async with self._engine.connect() as conn:
            rows = (
                (await conn.execute(select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)))
                .mappings()
                .all()
            )
        out = []
        for row in rows:
            at = utc(row["at"])
            detail = readable(row["detail"], DETAIL_DEPTH)
            who = detail if isinstance(detail, dict) else {}
            out.append(
                {
                    "at": at.isoformat() if at else None,
                    "actor": row["actor"],
                    "actor_id": who.get("actor_id"),
                    "actor_kind": who.get("actor_kind"),
                    "action": row["action"],
                    "target": row["target"],
                    "target_name": who.get("name") if isinstance(who.get("name"), str) else None,
                    "client": row["client"],
                    "detail": detail,
                }
            )
        return out
