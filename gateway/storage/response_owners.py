"""Which key created which stored response, so a response id works only for the key that made it.

vLLM keeps stored responses (the Responses API's ``store``, with ``VLLM_ENABLE_RESPONSES_API_STORE=1``)
in its own memory under ids any caller could name; the gateway forwards ``GET``/``cancel`` and
``previous_response_id`` only for the key that created the id, and answers 404 to every other key.
What is kept here: the id, the key's id, the backend that stores it (its name in ``GATEWAY_UPSTREAM``:
with several backends, reads, cancels and continuations go to that one) and when, in the gateway's
database (table ``response_owners``); never the response itself.

A claim is written in the background the moment the id is seen (the stream's first event, or the
whole body), and :meth:`ResponseOwners.owner` sees claims not yet written, so a client continuing
its conversation right after the answer is never refused by this process.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.storage.tables import ResponseOwnerRow

log = logging.getLogger("gateway.responses")


@dataclass(frozen=True, slots=True)
class Owner:
    """Who created a stored response, and where it is: ``backend`` None for a claim written before
    backends were recorded (any backend up is asked, as then)."""

    key_id: str
    backend: str | None = None


class ResponseOwners:
    """Response id -> the key that created it and the backend that stores it, on ``engine``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._pending: dict[str, Owner] = {}
        self._writes: set[asyncio.Task[None]] = set()

    def claim(self, response_id: str, owner: Owner) -> None:
        """Record that ``owner.key_id`` created ``response_id`` on ``owner.backend`` (written in the
        background)."""
        if response_id in self._pending:
            return
        self._pending[response_id] = owner
        task = asyncio.create_task(self._write(response_id, owner))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, response_id: str, owner: Owner) -> None:
        try:
            async with self._engine.begin() as conn:
                await conn.execute(
                    insert(ResponseOwnerRow).values(
                        response_id=response_id,
                        key_id=owner.key_id,
                        backend=owner.backend,
                        created_at=datetime.now(UTC),
                    )
                )
        except IntegrityError:  # claimed before (the id is the backend's): the first claim stands
            log.warning("response id claimed twice; the first claim stands")
        finally:
            self._pending.pop(response_id, None)

    async def owner(self, response_id: str) -> Owner | None:
        """Who created ``response_id`` and where it is stored, or None."""
        pending = self._pending.get(response_id)
        if pending is not None:
            return pending
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    select(ResponseOwnerRow.key_id, ResponseOwnerRow.backend).where(
                        ResponseOwnerRow.response_id == response_id
                    )
                )
            ).one_or_none()
        return Owner(row.key_id, row.backend) if row is not None else None

    async def forget(self, response_id: str) -> None:
        """Drop the claim: the id is unreachable through the gateway from now on."""
        if response_id in self._pending:
            await asyncio.gather(*self._writes, return_exceptions=True)
        async with self._engine.begin() as conn:
            await conn.execute(delete(ResponseOwnerRow).where(ResponseOwnerRow.response_id == response_id))

    async def aclose(self) -> None:
        """Wait for the claims still being written."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
