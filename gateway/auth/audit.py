"""Audit log: every admin action — who, what, on which key, when, from where — stored for good."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.tables import AuditRow, utc


class AuditLog:
    """Append and read admin actions."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(
        self,
        actor: str,
        action: str,
        target: str | None,
        client: str | None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Store one action (written at once: admin actions are rare and must not be lost)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(AuditRow).values(
                    at=datetime.now(UTC),
                    actor=actor,
                    action=action,
                    target=target,
                    client=client,
                    detail=detail or {},
                )
            )

    async def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` actions, newest first."""
        async with self._engine.connect() as conn:
            rows = (
                (await conn.execute(select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)))
                .mappings()
                .all()
            )
        out = []
        for row in rows:
            at = utc(row["at"])
            out.append(
                {
                    "at": at.isoformat() if at else None,
                    "actor": row["actor"],
                    "action": row["action"],
                    "target": row["target"],
                    "client": row["client"],
                    "detail": row["detail"],
                }
            )
        return out
