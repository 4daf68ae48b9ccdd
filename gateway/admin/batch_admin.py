"""Operators' view of batches and files, whatever key made them: list, show, cancel a batch, list and
delete files — each change written to the audit trail (``batch.cancel``, ``file.delete``). Shared by
the admin API (:mod:`gateway.admin.batches`) and the CLI on the database (:mod:`gateway.cli.batches`).
Values: each answer is the OpenAI object with the owning key's id (``key_id``) added."""

from __future__ import annotations

from typing import Any

from gateway.admin.key_admin import Actor
from gateway.auth import KeyNotFoundError, KeyStore
from gateway.auth.audit import AuditLog
from gateway.storage.batches import Batch, BatchStore
from gateway.storage.files import FileStore, StoredFile


class NotFoundError(LookupError):
    """No batch or file of that id."""


class InUseError(Exception):
    """The file is the input of a batch that has not ended: the batch's id."""


def batch_view(batch: Batch) -> dict[str, Any]:
    return {**batch.as_openai(), "key_id": batch.key_id}


def file_view(stored: StoredFile) -> dict[str, Any]:
    return {**stored.as_openai(), "key_id": stored.key_id}


class BatchAdmin:
    """Batches and files of every key, on ``batches``, ``files`` and ``keys``, audited in ``audit``."""

    def __init__(self, batches: BatchStore, files: FileStore, keys: KeyStore, audit: AuditLog) -> None:
        self._batches = batches
        self._files = files
        self._keys = keys
        self._audit = audit

    async def _key_id(self, key: str | None) -> str | None:
        """The id of the key named or numbered ``key`` (None: every key). Raises :class:`NotFoundError`."""
        if key is None:
            return None
        try:
            return (await self._keys.get(key)).id
        except KeyNotFoundError:
            raise NotFoundError(f"no key {key!r}") from None

    async def list_batches(self, limit: int, key: str | None, status: str | None) -> list[dict[str, Any]]:
        return [batch_view(b) for b in await self._batches.recent(limit, await self._key_id(key), status)]

    async def batch(self, batch_id: str) -> dict[str, Any]:
        found = await self._batches.get(batch_id)
        if found is None:
            raise NotFoundError(f"no batch {batch_id!r}")
        return batch_view(found)

    async def cancel(self, actor: Actor, batch_id: str) -> dict[str, Any]:
        found = await self._batches.get(batch_id)
        if found is None:
            raise NotFoundError(f"no batch {batch_id!r}")
        cancelled = await self._batches.cancel(found)
        detail = {"key_id": found.key_id, "status": {"before": found.status, "after": cancelled.status}}
        await self._audit.record(actor.principal, "batch.cancel", batch_id, actor.client, detail)
        return batch_view(cancelled)

    async def list_files(self, limit: int, key: str | None) -> list[dict[str, Any]]:
        return [file_view(f) for f in await self._files.recent(limit, await self._key_id(key))]

    async def file(self, file_id: str) -> dict[str, Any]:
        return file_view(await self._file(file_id))

    async def _file(self, file_id: str) -> StoredFile:
        found = await self._files.find(file_id)
        if found is None:
            raise NotFoundError(f"no file {file_id!r}")
        return found

    async def delete_file(self, actor: Actor, file_id: str) -> dict[str, Any]:
        found = await self._file(file_id)
        batch = await self._batches.uses(found.key_id, file_id)
        if batch is not None:
            raise InUseError(batch)
        await self._files.delete(found.key_id, file_id)
        detail = {"key_id": found.key_id, "filename": found.filename, "bytes": found.bytes}
        await self._audit.record(actor.principal, "file.delete", file_id, actor.client, detail)
        return {"id": file_id, "object": "file", "deleted": True}
