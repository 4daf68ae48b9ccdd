"""Runs batches in the slots interactive work leaves: one background task per gateway process.

It claims batches (:meth:`~gateway.storage.batches.BatchStore.claim`: one process per batch, however
many replicas share the database), up to ``max_running`` at once, and renews each one's lease while
it works on it. It checks a batch's input file (``validating``: every error found fails the batch
before any line runs, :mod:`gateway.batch.lines`; each line parsed once, off the event loop, and the
requests kept for what follows: :mod:`gateway.batch.prepared`), then runs its lines not answered yet
(``in_progress``) through the gateway's own request path as its key's batch requests
(:mod:`gateway.batch.call`): admission admits a batch request only when no interactive one that fits
waits, so a line makes an interactive request wait for at most the end of the lines already
running. The process keeps as many lines in flight as the backends have slots, all its batches
together, so batch work fills every slot nobody else wants, and no more (the queue holds interactive
requests, not a batch's backlog); a freed slot goes to the next key in turn
(:class:`~gateway.batch.turns.Turns`), so a key's small batch runs beside another key's large one
instead of after it. The key is looked up every :data:`WATCH_S`: a key revoked, expired or deleted
has its remaining lines answered 401, a key's new limits apply to the next lines.

A line is answered once: its result is recorded under the batch's fence, and lines recorded already are
skipped after a restart or a take-over. A refusal that says "later" is not an answer: a line refused for
the key's rate or a full queue (429) or a backend away (503) is sent again after its ``Retry-After``,
and one whose slot an interactive request took back (503 ``preempted``, ``GATEWAY_BATCH_PREEMPTION``) at
once; a line refused because the key's quota is spent *pauses* the batch: no more lines, and its lease
is given back until the ``Retry-After`` (at most the batch's end), so the process runs other batches
meanwhile and the batch is not failed. Any other answer (a 2xx, or the request refused as it would be
interactively) is the line's result, in the output or the error file.

A batch asked to stop (``cancelling``) or past its window sends no more lines; the ones running end;
then it is ``finalizing``: its output and error files are written from the recorded results (lines
not answered are in the error file as ``batch_cancelled`` / ``batch_expired``), and it ends
``cancelled``, ``expired`` or ``completed`` (decided from its stored times, so a finalization taken
up again after a restart ends the same way). A gateway that begins to drain sends no more lines and
gives its batches back as they are. A batch whose work fails with an error (not a lease lost) is
given back until a pause that doubles each time, and taken up again after it; the
:data:`MAX_FAILURES`-th time in a row it ends ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

from starlette.types import ASGIApp

from dspark_common import json_codec
from gateway.auth.principal import Principal
from gateway.auth.store import KeyNotFoundError, KeyStore
from gateway.batch.call import Answer, Line, call
from gateway.batch.lines import BatchLine, LineError
from gateway.batch.prepared import prepare, read_requests, remove, requests_path
from gateway.batch.turns import Turns
from gateway.dialects.base import Dialect
from gateway.dialects.messages import MESSAGES
from gateway.dialects.openai.chat import CHAT
from gateway.dialects.openai.completions import COMPLETIONS
from gateway.dialects.responses import RESPONSES
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.respond import INFERENCE
from gateway.storage.batches import ACTIVE, Batch, BatchLease, BatchStore, LeaseLost
from gateway.storage.files import FILE_ID_PREFIX, FileStore, StoredFile
from gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("gateway.batch")

#: The dialect of each batch endpoint (``/v1/messages``: Anthropic's message batches).
DIALECTS: dict[str, Dialect] = {d.route: d for d in (CHAT, COMPLETIONS, RESPONSES, MESSAGES)}
#: Seconds between looks for a batch to run when none is (a new batch of this process wakes it).
IDLE_POLL_S = 5.0
#: Seconds between looks at a running batch's status and its key.
WATCH_S = 1.0
#: Seconds a line waits before it is sent again after a refusal without ``Retry-After``.
RETRY_S = 5.0
#: Seconds a batch pauses when its key's quota is spent and the refusal names no ``Retry-After``.
PAUSE_S = 60.0
#: Errors in a row after which a batch ends ``failed``; the pause after the n-th is 2^n s (at most 60).
MAX_FAILURES = 5
#: Statuses of refusals that say "later", not "no" (the key's rates, the queue; draining, backend down).
_LATER = {429, 503}
T = TypeVar("T")


class Draining(Protocol):
    """Whether the gateway stops (:class:`~gateway.http.drain.Drain`)."""

    draining: bool


@dataclass
class _Watch:
    """What the lines of a running batch go by, kept current by :meth:`BatchRunner._watch`: the key's
    principal (None: no longer valid), and whether to send no more (``halt``: the batch cancelled or
    past its window, the gateway draining, or paused until ``pause_until``)."""

    principal: Principal | None
    halt: asyncio.Event = field(default_factory=asyncio.Event)
    pause_until: datetime | None = None
    leave: bool = False  # draining: hand the batch back as it is, no finalization

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the batch is halted meanwhile."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.halt.wait()


@dataclass
class _Left:
    """Lines of a running batch not answered yet (its share of ``gateway_batch_lines_waiting``)."""

    lines: int


class BatchRunner:
    """The batches of ``store`` run through ``pipeline`` (``app``: the gateway's ASGI app), reading and
    writing ``files``, as the keys of ``keys``; leases of ``lease_ttl_s``; no new line once ``drain``
    is draining; lines answered and left counted in ``metrics``; at most ``max_running`` batches at
    once, their lines in turns across their keys (:class:`~gateway.batch.turns.Turns`)."""

    def __init__(
        self,
        app: ASGIApp,
        pipeline: Pipeline,
        store: BatchStore,
        files: FileStore,
        keys: KeyStore,
        lease_ttl_s: float,
        drain: Draining,
        metrics: GatewayMetrics,
        max_running: int = 1,
    ) -> None:
        self._app = app
        self._pipeline = pipeline
        self._store = store
        self._files = files
        self._keys = keys
        self.lease_ttl_s = lease_ttl_s
        self._drain = drain
        self._metrics = metrics
        self.max_running = max_running
        # lines in flight, all batches together: as many as the backends have slots
        self._turns = Turns(sum(b.admission.slots for b in pipeline.backends.all))
        self._waiting = 0  # lines not answered yet of the batches running here
        self.holder = f"{socket.gethostname()[:32]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._wake = asyncio.Event()
        self._failures: Counter[str] = Counter()

    def wake(self) -> None:
        """A batch was made or cancelled here: look now."""
        self._wake.set()

    async def run(self) -> None:
        """Claim and run batches, up to :attr:`max_running` at once, until cancelled (the gateway
        stopping: the leases are given back, and the lines running are answered again by whoever runs
        their batches next)."""
        held: dict[str, asyncio.Task[None]] = {}
        try:
            while True:
                self._wake.clear()  # before looking: a batch made while we look wakes the next look
                lease = None
                if len(held) < self.max_running and not self._drain.draining:
                    try:
                        lease = await self._store.claim(self.holder, self.lease_ttl_s, exclude=held)
                    except Exception:  # the database away: try again later
                        log.exception("batches: could not look for work")
                if lease is not None:
                    held[lease.batch_id] = asyncio.create_task(self._hold(lease))
                    continue
                waking = asyncio.create_task(self._wake.wait())
                try:  # a batch made or cancelled here, a batch of ours ended, or the next poll
                    await asyncio.wait([waking, *held.values()], timeout=IDLE_POLL_S,
                                       return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                finally:
                    waking.cancel()
                for batch_id in [b for b, task in held.items() if task.done()]:
                    del held[batch_id]
        finally:
            for task in held.values():
                task.cancel()
            await to_the_end(asyncio.gather(*held.values(), return_exceptions=True))

    async def _hold(self, lease: BatchLease) -> None:
        """Work on the batch of ``lease`` until it ends, is paused, is taken over or fails; then give
        the lease back (until its pause ends, for a batch paused or failed)."""
        pause_until: datetime | None = None
        try:
            pause_until = await self._drive(lease)
            self._failures.pop(lease.batch_id, None)
        except* LeaseLost:
            log.warning("batch %s: its lease was taken over; stopped here", lease.batch_id)
        except* Exception:
            log.exception("batch %s: stopped by an error", lease.batch_id)
            failed = self._failures[lease.batch_id] = self._failures[lease.batch_id] + 1
            if failed >= MAX_FAILURES:
                await to_the_end(self._fail(lease))
            else:  # taken up again (here or elsewhere) after a pause that doubles each time
                pause_until = datetime.now(UTC) + timedelta(seconds=min(60, 2**failed))
        finally:
            try:
                await to_the_end(self._store.release(lease, pause_until))
            except Exception:  # the database away: the lease lapses instead
                log.exception("batch %s: could not give its lease back", lease.batch_id)

    async def _fail(self, lease: BatchLease) -> None:
        """End a batch whose work failed :data:`MAX_FAILURES` times in a row."""
        self._failures.pop(lease.batch_id, None)
        message = f"The batch failed {MAX_FAILURES} times in a row; the gateway's log says why."
        error = {"code": "internal_error", "message": message, "param": None, "line": None}
        with contextlib.suppress(Exception):
            await self._store.move(lease, "failed", ACTIVE, errors=[error])
            await remove(self._requests_path(lease.batch_id))

    async def _drive(self, lease: BatchLease) -> datetime | None:
        """Work on the batch while renewing ``lease``; when it is paused, until when."""
        async with asyncio.TaskGroup() as group:
            renewer = group.create_task(self._renew(lease))
            try:
                return await self._work(lease)
            finally:
                renewer.cancel()

    async def _renew(self, lease: BatchLease) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            await self._store.renew(lease, self.lease_ttl_s)

    async def _work(self, lease: BatchLease) -> datetime | None:
        batch = await self._batch(lease)
        if batch.status == "validating":
            batch = await self._validate(lease, batch)
        if batch.status == "in_progress":
            watch = await self._run_lines(lease, batch)
            if watch.leave:
                return None
            if watch.pause_until is not None:
                return watch.pause_until
            batch = await self._batch(lease)
        if batch.status in ("in_progress", "cancelling", "finalizing"):
            await self._finalize(lease, batch)
        return None

    async def _batch(self, lease: BatchLease) -> Batch:
        batch = await self._store.get(lease.batch_id)
        if batch is None:
            raise LeaseLost(lease.batch_id)
        return batch

    async def _validate(self, lease: BatchLease, batch: Batch) -> Batch:
        """The input file checked: the batch ``in_progress`` with its total, or ``failed`` with why
        (unless it was cancelled meanwhile)."""
        stored = await self._files.get(batch.key_id, batch.input_file_id)
        if stored is None:
            error = {"code": "invalid_input_file", "message": f"No such File object: {batch.input_file_id}",
                     "param": "input_file_id", "line": None}  # fmt: skip
            await self._store.move(lease, "failed", ("validating",), errors=[error])
        else:
            total, errors = await self._prepare(batch, stored)
            if errors:
                await self._store.move(
                    lease, "failed", ("validating",), errors=[e.as_openai() for e in errors]
                )
            else:
                await self._store.move(lease, "in_progress", ("validating",), total=total)
        return await self._batch(lease)

    async def _prepare(self, batch: Batch, stored: StoredFile) -> tuple[int, list[LineError]]:
        """``batch``'s input ``stored`` checked, its requests kept (when it has no error)."""
        target = self._requests_path(batch.id)
        limit = self._pipeline.settings.max_body_bytes
        return await prepare(self._files, stored, target, batch.endpoint, limit, INFERENCE)

    def _requests_path(self, batch_id: str) -> Path:
        return requests_path(self._files.directory, batch_id)

    async def _requests(self, batch: Batch) -> AsyncIterator[BatchLine]:
        """``batch``'s requests as its validation kept them (checked again if they are not kept: a batch
        validated by an older gateway; none for a batch cancelled while its faulty input was checked)."""
        path = self._requests_path(batch.id)
        if not await asyncio.to_thread(path.exists):
            stored = await self._files.get(batch.key_id, batch.input_file_id)
            if stored is None:  # deleted by hand past the API (which refuses while a batch reads it)
                raise RuntimeError(f"the input file {batch.input_file_id} is gone")
            _, errors = await self._prepare(batch, stored)
            if errors and batch.times["in_progress_at"] is None:
                return
            if errors:
                raise RuntimeError(f"the input file {batch.input_file_id} changed since it was checked")
        async for line in read_requests(path):
            yield line

    async def _watch(self, lease: BatchLease, batch: Batch, watch: _Watch) -> None:
        """Every :data:`WATCH_S`: the batch's status and window, the gateway's drain, the key."""
        while not watch.halt.is_set():
            await asyncio.sleep(WATCH_S)
            try:
                now = await self._batch(lease)
                watch.principal = await self._principal(batch.key_id)
            except LeaseLost:
                raise
            except Exception:  # the database away: the lines' records will say so
                log.exception("batch %s: could not look at it", lease.batch_id)
                continue
            if self._drain.draining:
                watch.leave = True
            if watch.leave or now.status != "in_progress" or datetime.now(UTC) >= now.expires_at:
                watch.halt.set()

    async def _run_lines(self, lease: BatchLease, batch: Batch) -> _Watch:
        """Send the lines not answered yet, each when it is the batch's key's turn, until all are
        answered or the batch is halted (the lines running end first); what halted it."""
        watch = _Watch(await self._principal(batch.key_id))
        answered = await self._store.answered(batch.id)
        left = _Left(batch.total - len(answered))
        self._count_waiting(left.lines)
        dialect = DIALECTS[batch.endpoint]
        watching = asyncio.create_task(self._watch(lease, batch, watch))
        try:
            async with asyncio.TaskGroup() as lines:
                async for line in self._requests(batch):
                    if line.index in answered:
                        continue
                    await self._turns.take(batch.key_id)
                    if watch.halt.is_set() or self._drain.draining:
                        watch.leave |= self._drain.draining
                        self._turns.give()
                        break
                    lines.create_task(self._answer(lease, dialect, line, watch, batch.expires_at, left))
        finally:
            self._count_waiting(-left.lines)
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching  # a lease lost while watching is raised here
        return watch

    def _count_waiting(self, lines: int) -> None:
        self._waiting += lines
        self._metrics.batch_waiting(self._waiting)

    async def _answer(
        self,
        lease: BatchLease,
        dialect: Dialect,
        line: BatchLine,
        watch: _Watch,
        ends_at: datetime,
        left: _Left,
    ) -> None:
        """One line sent until it has an answer (or the batch is halted), and the answer recorded;
        its turn given back."""
        request_id = f"batch_req_{secrets.token_hex(12)}"
        try:
            while True:
                if watch.halt.is_set():
                    return
                principal = watch.principal
                if principal is None:
                    gone = _error("invalid_api_key", "The batch's API key is no longer valid.")
                    answer = Answer(401, gone, None)
                else:
                    sent = Line(line.body, request_id, line.custom_id, lease.batch_id)
                    answer = await call(self._app, self._pipeline, dialect, principal, sent)
                if answer.status not in _LATER:
                    break
                if _code(answer) == "preempted":
                    continue  # its slot went to an interactive request: it queues again at once
                wait = answer.retry_after_s
                if _code(answer) == "quota_exceeded":
                    until = min(ends_at, datetime.now(UTC) + timedelta(seconds=wait or PAUSE_S))
                    watch.pause_until = max(until, watch.pause_until or until)
                    watch.halt.set()
                    return
                await watch.sleep(wait or RETRY_S)
            ok = 200 <= answer.status < 300
            response = {"status_code": answer.status, "request_id": request_id, "body": answer.body}
            result = {"id": request_id, "custom_id": line.custom_id, "response": response, "error": None}
            if await self._store.record(lease, line.index, line.custom_id, ok, json_codec.dumps_text(result)):
                self._metrics.batch_line(ok)
                left.lines -= 1
                self._count_waiting(-1)
        finally:
            self._turns.give()

    async def _principal(self, key_id: str) -> Principal | None:
        """The batch key's principal now, or None if it is revoked, expired or gone."""
        try:
            record = await self._keys.get(key_id)
        except KeyNotFoundError:
            return None
        return record.principal() if record.status(datetime.now(UTC)) == "active" else None

    async def _finalize(self, lease: BatchLease, batch: Batch) -> None:
        """The result files written from what was recorded, and the batch's last status: cancelled if
        it was ever cancelling, else expired if lines were left when its window closed, else completed."""
        if batch.status != "finalizing" and not await self._store.move(lease, "finalizing", ACTIVE):
            return
        batch = await self._batch(lease)
        cancelled = batch.times["cancelling_at"] is not None
        missing = await self._unanswered(batch, "batch_cancelled" if cancelled else "batch_expired")
        end = "cancelled" if cancelled else "expired" if missing else "completed"
        outputs = await self._write(batch, "output", self._store.results(batch.id, ok=True))
        errors = await self._write(batch, "error", _chain(self._store.results(batch.id, ok=False), missing))
        await self._store.move(lease, end, ("finalizing",), output_file_id=outputs, error_file_id=errors)
        await remove(self._requests_path(batch.id))

    async def _unanswered(self, batch: Batch, code: str) -> list[str]:
        """The error lines of the requests not answered (a batch cancelled or expired)."""
        answered = await self._store.answered(batch.id)
        message = (
            "The batch was cancelled before this request ran."
            if code == "batch_cancelled"
            else ("The batch expired before this request ran.")
        )
        missing: list[str] = []
        async for line in self._requests(batch):
            if line.index in answered:
                continue
            result = {"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": line.custom_id,
                      "response": None, "error": {"code": code, "message": message}}  # fmt: skip
            missing.append(json_codec.dumps_text(result))
        return missing

    async def _write(self, batch: Batch, kind: str, results: AsyncIterator[str]) -> str | None:
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


async def to_the_end(work: Awaitable[T]) -> T:
    """``work``'s result, waited for even if the caller is cancelled meanwhile, once or more (then
    the cancellation is raised once ``work`` has ended).

    ``asyncio.shield`` alone keeps ``work`` running but lets a cancelled caller go on at once: a
    batch's lease given back as the gateway stops would race the database's close, and a lease not
    given back keeps the batch from every other process until it lapses."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


async def _chain(first: AsyncIterator[str], then: list[str]) -> AsyncIterator[str]:
    async for item in first:
        yield item
    for item in then:
        yield item


def _code(answer: Answer) -> Any:
    """The OpenAI error ``code`` of ``answer``'s body, or None."""
    body = answer.body
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
