"""Runs batches in the slots interactive work leaves: one background task per gateway process.

It claims a batch (:meth:`~gateway.storage.batches.BatchStore.claim`: one process per batch, however
many replicas share the database), checks its input file (``validating``: every error found fails
the batch before any line runs, :mod:`gateway.batch.lines`), then runs its lines not answered yet
(``in_progress``) through the gateway's own request path as its key's batch requests
(:mod:`gateway.batch.call`): admission admits a batch request only when no interactive one that fits
waits, so a line makes an interactive request wait for at most the end of the lines already
running. It keeps as many lines in flight as the backends have slots, so batch work fills every slot
nobody else wants, and no more (the queue holds interactive requests, not a batch's backlog).

A line is answered once: its result is recorded under the batch's fence before the next look, and
lines recorded already are skipped after a restart or a take-over. A refusal that says "later"
(429: the key's quota or rate, the queue; 503: draining, the backend down) is not an answer: the line
waits its ``Retry-After`` and is sent again, so a key whose quota ran out has its batches paused, not
failed. Any other answer (a 2xx, or the key's request refused as it would be interactively) is the
line's result, in the output or the error file.

A batch asked to stop (``cancelling``) or past its window sends no more lines; the ones running end;
then it is ``finalizing``: its output and error files are written from the recorded results (lines
not answered are in the error file as ``batch_cancelled`` / ``batch_expired``), and it ends
``completed``, ``cancelled`` or ``expired``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp

from dspark_common import json_codec
from gateway.auth.principal import Principal
from gateway.auth.store import KeyNotFoundError, KeyStore
from gateway.batch.call import Answer, Line, call
from gateway.batch.lines import BatchLine, InputCheck, parse
from gateway.dialects.base import Dialect
from gateway.dialects.openai.chat import CHAT
from gateway.dialects.openai.completions import COMPLETIONS
from gateway.dialects.responses import RESPONSES
from gateway.proxy.pipeline import Pipeline
from gateway.storage.batches import Batch, BatchLease, BatchStore, LeaseLost
from gateway.storage.files import FILE_ID_PREFIX, FileStore

log = logging.getLogger("gateway.batch")

#: The dialect of each batch endpoint.
DIALECTS: dict[str, Dialect] = {d.route: d for d in (CHAT, COMPLETIONS, RESPONSES)}
#: Seconds between looks for a batch to run when none is (a new batch of this process wakes it).
IDLE_POLL_S = 5.0
#: Seconds between looks at a running batch's status (cancelled? expired?).
STATUS_POLL_S = 1.0
#: Seconds a line waits before it is sent again after a refusal without ``Retry-After``.
RETRY_S = 5.0
#: Statuses of refusals that say "later", not "no" (the quota, rates, the queue; draining, backend down).
_LATER = {429, 503}


class BatchRunner:
    """The batches of ``store`` run through ``pipeline`` (``app``: the gateway's ASGI app), reading and
    writing ``files``, as the keys of ``keys``; leases of ``lease_ttl_s``."""

    def __init__(
        self,
        app: ASGIApp,
        pipeline: Pipeline,
        store: BatchStore,
        files: FileStore,
        keys: KeyStore,
        lease_ttl_s: float,
    ) -> None:
        self._app = app
        self._pipeline = pipeline
        self._store = store
        self._files = files
        self._keys = keys
        self.lease_ttl_s = lease_ttl_s
        self.holder = f"{socket.gethostname()[:32]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """A batch was made or cancelled here: look now."""
        self._wake.set()

    async def run(self) -> None:
        """Claim and run batches until cancelled (the gateway stopping: the lease is given back, and
        the lines running are answered again by whoever runs the batch next)."""
        while True:
            try:
                lease = await self._store.claim(self.holder, self.lease_ttl_s)
            except Exception:  # the database away: try again later
                log.exception("batches: could not look for work")
                lease = None
            if lease is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_POLL_S):
                        await self._wake.wait()
                continue
            try:
                await self._drive(lease)
            except* LeaseLost:
                log.warning("batch %s: its lease was taken over; stopped here", lease.batch_id)
            except* Exception:
                log.exception("batch %s: stopped by an error; it is taken up again", lease.batch_id)
            finally:
                await asyncio.shield(self._store.release(lease))

    async def _drive(self, lease: BatchLease) -> None:
        batch = await self._batch(lease)
        if batch.status == "validating":
            batch = await self._validate(lease, batch)
        if batch.status == "in_progress":
            async with asyncio.TaskGroup() as group:
                keeper = group.create_task(self._keep(lease, batch))
                await self._run_lines(lease, batch, keeper)
                keeper.cancel()
            batch = await self._batch(lease)
        if batch.status in ("in_progress", "cancelling", "finalizing"):
            await self._finalize(lease, batch)

    async def _batch(self, lease: BatchLease) -> Batch:
        batch = await self._store.get(lease.batch_id)
        if batch is None:
            raise LeaseLost(lease.batch_id)
        return batch

    async def _validate(self, lease: BatchLease, batch: Batch) -> Batch:
        """The input file checked: the batch ``in_progress`` with its total, or ``failed`` with why."""
        stored = await self._files.get(batch.key_id, batch.input_file_id)
        if stored is None:
            error = {"code": "invalid_input_file", "message": f"No such File object: {batch.input_file_id}",
                     "param": "input_file_id", "line": None}  # fmt: skip
            await self._store.move(lease, "failed", errors=[error])
        else:
            limit = self._pipeline.settings.max_body_bytes
            checking = InputCheck(batch.endpoint, limit)
            async for raw in self._files.lines(stored, limit):
                checking.add(raw)
            total, errors = checking.result()
            if errors:
                await self._store.move(lease, "failed", errors=[e.as_openai() for e in errors])
            else:
                await self._store.move(lease, "in_progress", total=total)
        return await self._batch(lease)

    async def _keep(self, lease: BatchLease, batch: Batch) -> None:
        """Renew ``lease`` every third of its time; look at the batch's status every
        :data:`STATUS_POLL_S` and return when it should send no more lines (cancelled, expired)."""
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while True:
            await asyncio.sleep(STATUS_POLL_S)
            if loop.time() - renewed >= self.lease_ttl_s / 3:
                await self._store.renew(lease, self.lease_ttl_s)
                renewed = loop.time()
            now = await self._batch(lease)
            if now.status != "in_progress" or datetime.now(UTC) >= now.expires_at:
                return

    async def _run_lines(self, lease: BatchLease, batch: Batch, keeper: asyncio.Task[None]) -> None:
        """Send the lines not answered yet, as many at once as the backends have slots, until all are
        answered or ``keeper`` returns (the batch is to stop: the lines running end first)."""
        principal = await self._principal(batch.key_id)
        stored = await self._files.get(batch.key_id, batch.input_file_id)
        if stored is None:  # deleted meanwhile: the lines not answered are the error file's
            return
        answered = await self._store.answered(batch.id)
        limit = self._pipeline.settings.max_body_bytes
        width = sum(b.admission.slots for b in self._pipeline.backends.all)
        room = asyncio.Semaphore(width)
        dialect = DIALECTS[batch.endpoint]
        async with asyncio.TaskGroup() as lines:
            index = -1
            async for raw in self._files.lines(stored, limit):
                index += 1
                if index in answered or not raw.strip():
                    continue
                await room.acquire()
                if keeper.done():
                    room.release()
                    break
                line = parse(raw, index, batch.endpoint, limit)
                assert isinstance(line, BatchLine), "the file was checked when the batch began"
                lines.create_task(self._answer(lease, dialect, principal, line, room, keeper))

    async def _answer(
        self,
        lease: BatchLease,
        dialect: Dialect,
        principal: Principal | None,
        line: BatchLine,
        room: asyncio.Semaphore,
        keeper: asyncio.Task[None],
    ) -> None:
        """One line sent until it has an answer (or the batch is to stop), and the answer recorded."""
        request_id = f"batch_req_{secrets.token_hex(12)}"
        try:
            while True:
                if principal is None:
                    gone = _error("invalid_api_key", "The batch's API key is no longer valid.")
                    answer = Answer(401, gone, None)
                else:
                    sent = Line(json_codec.dumps(line.body), request_id, line.custom_id, lease.batch_id)
                    answer = await call(self._app, self._pipeline, dialect, principal, sent)
                if answer.status not in _LATER:
                    break
                if keeper.done():
                    return
                await asyncio.sleep(answer.retry_after_s or RETRY_S)
            ok = 200 <= answer.status < 300
            response = {"status_code": answer.status, "request_id": request_id, "body": answer.body}
            result = {"id": request_id, "custom_id": line.custom_id, "response": response, "error": None}
            await self._store.record(lease, line.index, line.custom_id, ok, json_codec.dumps_text(result))
        finally:
            room.release()

    async def _principal(self, key_id: str) -> Principal | None:
        """The batch key's principal now, or None if it is revoked, expired or gone."""
        try:
            record = await self._keys.get(key_id)
        except KeyNotFoundError:
            return None
        return record.principal() if record.status(datetime.now(UTC)) == "active" else None

    async def _finalize(self, lease: BatchLease, batch: Batch) -> None:
        """The result files written from what was recorded, and the batch's last status."""
        if batch.status != "finalizing":
            await self._store.move(lease, "finalizing")
        expired = datetime.now(UTC) >= batch.expires_at and batch.status == "in_progress"
        cancelled = batch.status == "cancelling"
        outputs = await self._write(batch, "output", self._store.results(batch.id, ok=True))
        missing = await self._unanswered(batch, "batch_cancelled" if cancelled else "batch_expired")
        failed = self._chain(self._store.results(batch.id, ok=False), missing)
        errors = await self._write(batch, "error", failed)
        end = "cancelled" if cancelled else "expired" if expired else "completed"
        await self._store.move(lease, end, output_file_id=outputs, error_file_id=errors)

    async def _unanswered(self, batch: Batch, code: str) -> list[str]:
        """The error lines of the requests not answered (a batch cancelled or expired)."""
        stored = await self._files.get(batch.key_id, batch.input_file_id)
        if stored is None:
            return []
        answered = await self._store.answered(batch.id)
        limit = self._pipeline.settings.max_body_bytes
        message = (
            "The batch was cancelled before this request ran."
            if code == "batch_cancelled"
            else ("The batch expired before this request ran.")
        )
        missing: list[str] = []
        index = -1
        async for raw in self._files.lines(stored, limit):
            index += 1
            if index in answered or not raw.strip():
                continue
            line = parse(raw, index, batch.endpoint, limit)
            custom_id = line.custom_id if isinstance(line, BatchLine) else None
            result = {"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": custom_id, "response": None,
                      "error": {"code": code, "message": message}}  # fmt: skip
            missing.append(json_codec.dumps_text(result))
        return missing

    @staticmethod
    async def _chain(first: Any, then: list[str]) -> Any:
        async for item in first:
            yield item
        for item in then:
            yield item

    async def _write(self, batch: Batch, kind: str, results: Any) -> str | None:
        """A result file of ``batch`` (``kind`` ``output`` or ``error``) from ``results``, its id, or
        None when it would be empty. Its id is the batch's, so a finalization run again replaces it."""
        upload = await self._files.upload(bounded=False)
        try:
            async for result in results:
                await upload.write(result.encode() + b"\n")
            if not upload.bytes:
                await self._files.discard(upload)
                return None
            file_id = f"{FILE_ID_PREFIX}{batch.id.removeprefix('batch_')}-{kind}"
            name = f"{batch.id}_{kind}.jsonl"
            await self._files.commit(upload, batch.key_id, name, "batch_output", file_id)
        except BaseException:
            await self._files.discard(upload)
            raise
        return file_id


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
