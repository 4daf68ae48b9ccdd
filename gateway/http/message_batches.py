"""Anthropic's Message Batches API on the same machinery as OpenAI's batches: ``POST
/v1/messages/batches``, ``GET /v1/messages/batches`` and ``/{id}``, ``POST /{id}/cancel``, ``GET
/{id}/results``.

A create's ``requests`` (``[{"custom_id", "params"}]``) become an input file of the key (purpose
``message_batch_input``) whose lines are ``/v1/messages`` requests, and a batch of it
(:mod:`gateway.batch.runner` runs it as any other: the Messages dialect, the key's batch requests).
The answers are Anthropic's: the message batch object (``msgbatch_`` and the batch's id;
``processing_status`` ``in_progress`` | ``canceling`` | ``ended``; ``request_counts`` processing /
succeeded / errored / canceled / expired; RFC 3339 times; ``results_url`` once ended), and results
as JSON Lines of ``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored",
"error"} | {"type": "canceled"} | {"type": "expired"}}``. A request list that is not well formed
(duplicate or malformed ``custom_id``, ``params`` not an object or streaming) is refused at once
with 400, as Anthropic does; what ``params`` ask is judged when the line runs (an ``errored``
result). Errors are Anthropic's shape (the route table names the Messages dialect).

A create's body is read a piece at a time (at most ``GATEWAY_MESSAGE_BATCH_MAX_BYTES``), its
requests taken one by one off the event loop, each bounded as a request body is, and written to the
input file as they come: a create holds one request at a time, not its body, and a key makes one
create at a time.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from dspark_common import json_codec
from gateway.auth.principal import Principal
from gateway.batch.lines import InputCheck
from gateway.body.json_items import ItemStream
from gateway.body.read import body_bounds, body_pieces
from gateway.errors import GatewayError
from gateway.http.files import owner_of
from gateway.http.listing import page, page_limit
from gateway.proxy.respond import INFERENCE
from gateway.storage.batches import BATCH_ID_PREFIX, Batch, BatchStore
from gateway.storage.files import FileStore, StoredFile

ROUTE = "/v1/messages"
#: How a message batch id begins (Anthropic's shape), in place of :data:`BATCH_ID_PREFIX`.
ID_PREFIX = "msgbatch_"
#: Anthropic's ``custom_id``: 1 to 64 letters, digits, ``_`` or ``-``.
CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Anthropic's bound on requests in one batch.
MAX_REQUESTS = 100_000
#: A create's body may be this many request bodies (``GATEWAY_MAX_BODY_BYTES``) unless
#: ``GATEWAY_MESSAGE_BATCH_MAX_BYTES`` says otherwise.
BODY_FACTOR = 4
#: Longest line of a result file read back, bytes (an answer is far shorter).
RESULT_LINE_BYTES = 1 << 30
#: Most batches one list answers with, and its default (Anthropic's).
MAX_LIST, DEFAULT_LIST = 1000, 20
#: Our statuses Anthropic calls ``ended``, and the time each is stamped with.
_ENDED = {
    "completed": "completed_at",
    "cancelled": "cancelled_at",
    "expired": "expired_at",
    "failed": "failed_at",
}


def _rfc3339(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _view(batch: Batch, base_url: str) -> dict[str, Any]:
    """Anthropic's message batch object of ``batch``."""
    ended = batch.status in _ENDED
    status = "ended" if ended else "canceling" if batch.status == "cancelling" else "in_progress"
    left = max(0, batch.total - batch.completed - batch.failed)
    counts = {
        "processing": 0 if ended else left,
        "succeeded": batch.completed,
        "errored": batch.failed,
        "canceled": left if batch.status == "cancelled" else 0,
        "expired": left if batch.status == "expired" else 0,
    }
    message_id = _message_id(batch)
    return {
        "id": message_id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": counts,
        "ended_at": _rfc3339(batch.times[_ENDED[batch.status]]) if ended else None,
        "created_at": _rfc3339(batch.created_at),
        "expires_at": _rfc3339(batch.expires_at),
        "archived_at": None,
        "cancel_initiated_at": _rfc3339(batch.times["cancelling_at"]),
        "results_url": f"{base_url}/v1/messages/batches/{message_id}/results" if ended else None,
    }


def _message_id(batch: Batch) -> str:
    return ID_PREFIX + batch.id.removeprefix(BATCH_ID_PREFIX)


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _batches(request: Request) -> tuple[BatchStore, Principal]:
    return request.app.state.batches, request.state.principal


def _invalid(message: str) -> GatewayError:
    return GatewayError("invalid_request", message, param="requests")


async def create_message_batch(request: Request) -> JSONResponse:
    """``POST /v1/messages/batches``: ``{"requests": [{"custom_id", "params"}]}`` checked and kept as
    the key's input file as it arrives, and run as a batch; the message batch object. One create per
    key at a time (429 ``rate_limit_error`` for a second one while the first is read)."""
    store, principal = _batches(request)
    if principal.kind != "key":
        raise GatewayError("invalid_request", "A batch runs as an API key: send one (not a token).")
    creating: set[str] = request.app.state.message_batch_creates
    if principal.key_id in creating:
        message = "A message batch of this key is being created; send the next one when it is made."
        raise GatewayError("create_in_progress", message)
    creating.add(principal.key_id)
    try:
        stored = await _keep_requests(request, principal)
    finally:
        creating.discard(principal.key_id)
    batch = await store.create(principal.key_id, ROUTE, stored.id, timedelta(hours=24), "24h", None)
    request.app.state.batch_runner.wake()
    return JSONResponse(_view(batch, _base(request)))


async def _keep_requests(request: Request, principal: Principal) -> StoredFile:
    """The body's requests written to a new input file of the key as they arrive (each checked in a
    thread, a piece of the body at a time: :class:`_Requests`); the file."""
    settings = request.app.state.settings
    files: FileStore = request.app.state.files
    max_bytes = settings.message_batch_max_bytes or BODY_FACTOR * settings.max_body_bytes
    requests = _Requests(settings.max_body_bytes)
    await request.app.state.pipeline.limits.count(principal)  # an upload: one request of the key's
    owner = owner_of(principal)  # and within what the key and its group may keep
    upload = await files.upload(owner=owner)
    try:
        async for piece in body_pieces(request, body_bounds(settings, max_bytes, None)):
            await upload.write(await asyncio.to_thread(requests.feed, piece))
        await upload.write(await asyncio.to_thread(requests.close))
        name, purpose = "message_batch.jsonl", "message_batch_input"
        return await files.commit(upload, principal.key_id, name, purpose, owner=owner)
    except BaseException:
        await files.discard(upload)
        raise


class _Requests:
    """A create's ``requests``, taken one at a time from the body's pieces (:class:`ItemStream`, each
    bounded as a request body is) and turned into input lines of ``/v1/messages`` requests, each
    checked as a batch's line is (:class:`InputCheck`, lines up to ``max_line_bytes``); the first fault
    raises 400 (413 for a request past the shape bounds). Runs off the event loop."""

    def __init__(self, max_line_bytes: int) -> None:
        self._items = ItemStream("requests", INFERENCE)
        self._checking = InputCheck(ROUTE, max_line_bytes, INFERENCE)

    def feed(self, piece: bytes) -> bytes:
        """The lines of the requests ``piece`` completed."""
        return self._lines(self._items.feed(piece))

    def close(self) -> bytes:
        """The lines of the last requests; raises unless the body held 1 to :data:`MAX_REQUESTS`."""
        lines = self._lines(self._items.close())
        if self._items.arrays != 1 or self._items.items == 0:
            raise _invalid(f"requests must be a list of 1 to {MAX_REQUESTS} requests.")
        return lines

    def _lines(self, items: list[Any]) -> bytes:
        lines = []
        for item in items:
            n = self._checking.count
            if n >= MAX_REQUESTS:
                raise _invalid(f"requests must be a list of 1 to {MAX_REQUESTS} requests.")
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
                raise _invalid(f"requests.{n}.custom_id must be 1 to 64 letters, digits, _ or -.")
            params = item.get("params")
            line = json_codec.dumps({"custom_id": custom_id, "method": "POST", "url": ROUTE, "body": params})
            self._checking.add(line)
            if self._checking.failed:
                _, [error, *_] = self._checking.result()
                raise _invalid(f"requests.{n}: {error.message}")
            lines.append(line + b"\n")
        return b"".join(lines)


async def _find(store: BatchStore, principal: Principal, message_id: str, param: str) -> Batch:
    """The caller's message batch ``message_id`` (404, naming ``param``, for any other)."""
    batch = None
    if message_id.startswith(ID_PREFIX):
        batch = await store.get(BATCH_ID_PREFIX + message_id.removeprefix(ID_PREFIX), principal.key_id)
    if batch is None or batch.endpoint != ROUTE:
        raise GatewayError("not_found", f"No message batch {message_id[:80]}.", param=param)
    return batch


async def _owned(request: Request) -> tuple[BatchStore, Batch]:
    store, principal = _batches(request)
    param = "message_batch_id"
    return store, await _find(store, principal, request.path_params[param], param)


async def get_message_batch(request: Request) -> JSONResponse:
    """``GET /v1/messages/batches/{message_batch_id}``."""
    _, batch = await _owned(request)
    return JSONResponse(_view(batch, _base(request)))


async def cancel_message_batch(request: Request) -> JSONResponse:
    """``POST /v1/messages/batches/{message_batch_id}/cancel``: ``canceling``, then ``ended``."""
    store, batch = await _owned(request)
    batch = await store.cancel(batch)
    request.app.state.batch_runner.wake()
    return JSONResponse(_view(batch, _base(request)))


async def list_message_batches(request: Request) -> JSONResponse:
    """``GET /v1/messages/batches``: the key's message batches, newest first (``limit``, ``after_id``)."""
    store, principal = _batches(request)
    limit = page_limit(request, MAX_LIST, DEFAULT_LIST)
    after = None
    if "after_id" in request.query_params:
        after = await _find(store, principal, request.query_params["after_id"], "after_id")
    batches: list[Batch] = []
    more, seen = False, after
    while len(batches) < limit:  # pages of every batch of the key; only its message batches shown
        found, more = await store.page(principal.key_id, seen, limit)
        batches += [b for b in found if b.endpoint == ROUTE]
        if not more or not found:
            break
        seen = found[-1]
    shown = [_view(b, _base(request)) for b in batches[:limit]]
    return JSONResponse(page(shown, more or len(batches) > limit, openai=False))


async def message_batch_results(request: Request) -> StreamingResponse:
    """``GET /v1/messages/batches/{message_batch_id}/results``: JSON Lines, one result per request."""
    _, batch = await _owned(request)
    if batch.status not in _ENDED:
        raise GatewayError("invalid_request", f"Message batch {_message_id(batch)} has not ended yet.")
    files: FileStore = request.app.state.files
    stored = [await files.get(batch.key_id, i) for i in (batch.output_file_id, batch.error_file_id) if i]

    async def lines() -> AsyncIterator[bytes]:
        for kept in stored:
            if kept is None:
                continue
            async for raw in files.lines(kept, RESULT_LINE_BYTES):
                if raw.strip():
                    yield json_codec.dumps(_result(json_codec.loads(raw))) + b"\n"

    return StreamingResponse(lines(), media_type="application/binary")


def _result(row: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's individual result of one line of a batch's output or error file."""
    response, error = row.get("response"), row.get("error")
    if isinstance(response, dict) and 200 <= response.get("status_code", 0) < 300:
        result: dict[str, Any] = {"type": "succeeded", "message": response.get("body")}
    elif isinstance(response, dict):
        result = {"type": "errored", "error": response.get("body")}
    elif isinstance(error, dict) and error.get("code") == "batch_cancelled":
        result = {"type": "canceled"}
    else:
        result = {"type": "expired"}
    return {"custom_id": row.get("custom_id"), "result": result}
