"""Batches (the OpenAI Batch API) in the gateway's database: each batch's status, times and counts
(table ``batches``), each answered line (``batch_lines``), and the lease of the process running it.

A batch is run by one process at a time, however many replicas share the database (a process may
run several batches, each under its own claim): it *claims* a batch whose lease is free or lapsed
(:meth:`BatchStore.claim`), which raises the batch's ``fence``, and renews the lease while it runs.
Every write it makes for the batch — a line's result, a status — is conditional on the fence it
claimed: a process that lost its lease (stalled past it, or partitioned away) and carries on has
every write refused (:class:`LeaseLost`), so a batch another process took over is never written by
two. A line's result is written once (its primary key): a line answered again after a restart or a
take-over is not recorded twice, and the counts move in the same transaction as the line.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, insert, literal, null, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.storage.tables import BatchLineRow, BatchRow, utc

#: How a batch id begins (OpenAI's shape).
BATCH_ID_PREFIX = "batch_"
#: Statuses a batch ends in.
TERMINAL = ("completed", "failed", "expired", "cancelled")
#: Statuses of a batch some process has work to do for.
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
#: OpenAI's times, each set when the batch reaches its status.
_TIMES = {
    "in_progress": "in_progress_at",
    "finalizing": "finalizing_at",
    "completed": "completed_at",
    "failed": "failed_at",
    "expired": "expired_at",
    "cancelling": "cancelling_at",
    "cancelled": "cancelled_at",
}


class LeaseLost(Exception):
    """The batch's lease is another process's now (or its fence moved on): stop working on it."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One batch as stored (:class:`~gateway.storage.tables.BatchRow`'s columns, times aware)."""

    id: str
    key_id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    metadata: dict[str, str] | None
    errors: list[dict[str, Any]] | None
    total: int
    completed: int
    failed: int
    output_file_id: str | None
    error_file_id: str | None
    created_at: datetime
    expires_at: datetime
    times: dict[str, datetime | None]

    def as_openai(self) -> dict[str, Any]:
        """OpenAI's batch object (API reference, "The batch object"; times in Unix seconds)."""

        def unix(value: datetime | None) -> int | None:
            return int(value.timestamp()) if value is not None else None

        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": unix(self.created_at),
            "expires_at": unix(self.expires_at),
            **{column: unix(value) for column, value in self.times.items()},
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class BatchLease:
    """``holder``'s claim on batch ``batch_id`` under ``fence``."""

    batch_id: str
    holder: str
    fence: int


class BatchStore:
    """Batches on ``engine``."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(
        self,
        key_id: str,
        endpoint: str,
        input_file_id: str,
        window: timedelta,
        window_text: str,
        metadata: dict[str, str] | None,
    ) -> Batch:
        """A new batch of ``key_id``, ``validating``, to end within ``window`` from now."""
        now = datetime.now(UTC)
        batch_id = BATCH_ID_PREFIX + secrets.token_hex(12)
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(BatchRow).values(
                    id=batch_id,
                    key_id=key_id,
                    endpoint=endpoint,
                    input_file_id=input_file_id,
                    completion_window=window_text,
                    status="validating",
                    metadata_=metadata,
                    total=0,
                    completed=0,
                    failed=0,
                    created_at=now,
                    expires_at=now + window,
                    fence=0,
                )
            )
        batch = await self.get(batch_id)
        assert batch is not None
        return batch

    async def get(self, batch_id: str, key_id: str | None = None) -> Batch | None:
        """Batch ``batch_id`` (``key_id``'s only, when given), or None."""
        query = select(BatchRow).where(BatchRow.id == batch_id)
        if key_id is not None:
            query = query.where(BatchRow.key_id == key_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _batch(row) if row is not None else None

    async def page(self, key_id: str, after: Batch | None, limit: int) -> tuple[list[Batch], bool]:
        """``key_id``'s batches newest first, ``limit`` of them from just past ``after``; and whether
        more follow."""
        query = select(BatchRow).where(BatchRow.key_id == key_id)
        if after is not None:
            at, ident = BatchRow.created_at, BatchRow.id
            query = query.where(or_(at < after.created_at, and_(at == after.created_at, ident < after.id)))
        query = query.order_by(BatchRow.created_at.desc(), BatchRow.id.desc()).limit(limit + 1)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_batch(row) for row in rows[:limit]], len(rows) > limit

    async def recent(self, limit: int, key_id: str | None = None, status: str | None = None) -> list[Batch]:
        """The newest ``limit`` batches (of ``key_id``, in ``status``), newest first: an operator's view."""
        query = select(BatchRow)
        if key_id is not None:
            query = query.where(BatchRow.key_id == key_id)
        if status is not None:
            query = query.where(BatchRow.status == status)
        query = query.order_by(BatchRow.created_at.desc(), BatchRow.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            return [_batch(row) for row in (await conn.execute(query)).all()]

    async def cancel(self, batch: Batch) -> Batch:
        """Ask ``batch`` to stop: ``cancelling`` (its runner ends it ``cancelled``, keeping what it
        answered); a batch past running is left as it is."""
        if batch.status in ("validating", "in_progress"):
            now = datetime.now(UTC)
            async with self._engine.begin() as conn:
                await conn.execute(
                    update(BatchRow)
                    .where(BatchRow.id == batch.id, BatchRow.status.in_(("validating", "in_progress")))
                    .values(status="cancelling", cancelling_at=now)
                )
                # a batch paused (its lease given back until later) is finalized now
                await conn.execute(
                    update(BatchRow)
                    .where(BatchRow.id == batch.id, BatchRow.holder.is_(None))
                    .values(lease_until=None)
                )
        again = await self.get(batch.id)
        assert again is not None
        return again

    async def claim(self, holder: str, ttl_s: float, exclude: Collection[str] = ()) -> BatchLease | None:
        """The oldest active batch whose lease is free or lapsed, now ``holder``'s for ``ttl_s``
        under a new fence; None when there is none. ``exclude``: ids of batches the caller runs
        already (its own lapsed lease is not taken again beside the claim it works under)."""
        now = datetime.now(UTC)
        free = or_(BatchRow.lease_until.is_(None), BatchRow.lease_until < now)
        query = select(BatchRow.id, BatchRow.fence).where(BatchRow.status.in_(ACTIVE), free)
        if exclude:
            query = query.where(BatchRow.id.not_in(list(exclude)))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query.order_by(BatchRow.created_at).limit(8))).all()
        for batch_id, fence in rows:
            async with self._engine.begin() as conn:
                taken = await conn.execute(
                    update(BatchRow)
                    .where(BatchRow.id == batch_id, BatchRow.fence == fence, free)
                    .values(holder=holder, lease_until=now + timedelta(seconds=ttl_s), fence=fence + 1)
                )
            if taken.rowcount == 1:
                return BatchLease(batch_id, holder, fence + 1)
        return None

    async def renew(self, lease: BatchLease, ttl_s: float) -> None:
        """Keep ``lease`` for ``ttl_s`` more. Raises :class:`LeaseLost`."""
        until = datetime.now(UTC) + timedelta(seconds=ttl_s)
        await self._fenced(lease, None, lease_until=until)

    async def release(self, lease: BatchLease, until: datetime | None = None) -> None:
        """Give ``lease`` up (the batch ended, or the process stops): another may claim it at once, or
        from ``until`` (a batch paused) unless it is ``cancelling`` (a cancel made while the lease was
        held, which :meth:`cancel` could not clear: it is finalized at once)."""
        later: Any = None
        if until is not None:
            at = literal(until, BatchRow.lease_until.type)
            later = case((BatchRow.status == "cancelling", null()), else_=at)
        with contextlib.suppress(LeaseLost):
            await self._fenced(lease, None, lease_until=later, holder=None)

    async def move(self, lease: BatchLease, status: str, was: tuple[str, ...], **values: Any) -> bool:
        """The batch to ``status`` (its time set), with ``values`` (columns), if its status is one of
        ``was``: False if it moved on meanwhile (a cancel). Raises :class:`LeaseLost`."""
        moment = {_TIMES[status]: datetime.now(UTC)} if status in _TIMES else {}
        return await self._fenced(lease, was, status=status, **moment, **values)

    async def uses(self, key_id: str, file_id: str) -> str | None:
        """The id of a batch of ``key_id`` not ended that reads ``file_id``, or None."""
        query = select(BatchRow.id).where(
            BatchRow.key_id == key_id, BatchRow.input_file_id == file_id, BatchRow.status.in_(ACTIVE)
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query.limit(1))).scalar()

    async def record(self, lease: BatchLease, line: int, custom_id: str, ok: bool, result: str) -> bool:
        """Line ``line``'s result, once: False if it was recorded before (nothing changes). The
        batch's counts move with it. Raises :class:`LeaseLost`."""
        try:
            async with self._engine.begin() as conn:
                counted = await conn.execute(
                    update(BatchRow)
                    .where(BatchRow.id == lease.batch_id, BatchRow.fence == lease.fence)
                    .values(completed=BatchRow.completed + int(ok), failed=BatchRow.failed + int(not ok))
                )
                if counted.rowcount != 1:
                    raise LeaseLost(lease.batch_id)
                await conn.execute(
                    insert(BatchLineRow).values(
                        batch_id=lease.batch_id, line=line, custom_id=custom_id, ok=ok, result=result
                    )
                )
        except IntegrityError:  # answered before: the transaction, counts included, is undone
            return False
        return True

    async def answered(self, batch_id: str) -> set[int]:
        """The lines of ``batch_id`` recorded so far."""
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(BatchLineRow.line).where(BatchLineRow.batch_id == batch_id))
            return {line for (line,) in rows}

    async def results(self, batch_id: str, ok: bool) -> AsyncIterator[str]:
        """The result lines of ``batch_id`` that went ``ok`` (or not), in input order."""
        query = (
            select(BatchLineRow.result)
            .where(BatchLineRow.batch_id == batch_id, BatchLineRow.ok == ok)
            .order_by(BatchLineRow.line)
        )
        async with self._engine.connect() as conn:
            async for (result,) in await conn.stream(query):
                yield result

    async def _fenced(self, lease: BatchLease, was: tuple[str, ...] | None, **values: Any) -> bool:
        """``values`` written if ``lease`` holds (else :class:`LeaseLost`) and the status is one of
        ``was`` (any, for None); whether they were."""
        where = [BatchRow.id == lease.batch_id, BatchRow.fence == lease.fence]
        if was is not None:
            where.append(BatchRow.status.in_(was))
        async with self._engine.begin() as conn:
            changed = await conn.execute(update(BatchRow).where(*where).values(**values))
            if changed.rowcount == 1:
                return True
            held = await conn.execute(select(BatchRow.fence).where(BatchRow.id == lease.batch_id))
            if held.scalar() != lease.fence:
                raise LeaseLost(lease.batch_id)
        return False


def _batch(row: Any) -> Batch:
    created, expires = utc(row.created_at), utc(row.expires_at)
    assert created is not None and expires is not None
    return Batch(
        row.id,
        row.key_id,
        row.endpoint,
        row.input_file_id,
        row.completion_window,
        row.status,
        row.metadata,
        row.errors,
        row.total,
        row.completed,
        row.failed,
        row.output_file_id,
        row.error_file_id,
        created,
        expires,
        {column: utc(getattr(row, column)) for column in _TIMES.values()},
    )
