"""The OpenAI Batch API: ``POST /v1/batches``, ``GET /v1/batches``, ``GET /v1/batches/{batch_id}``,
``POST /v1/batches/{batch_id}/cancel``.

A batch is made ``validating`` and run by the gateway's batch runner (:mod:`gateway.batch.runner`) as
its key's batch-class requests. A batch belongs to the key that made it (404 for any other), and it
runs as that key: only an API key may make one (a JWT's claims are not kept to run as later). Errors
are OpenAI's shape.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.auth.principal import Principal
from gateway.batch.lines import ENDPOINTS
from gateway.batch.lines import storable_text as _text
from gateway.body.json_limits import ADMIN
from gateway.body.read import body_bounds, read_json
from gateway.errors import GatewayError
from gateway.http.listing import page, page_limit
from gateway.storage.batches import Batch, BatchStore
from gateway.storage.files import FileStore

#: The completion windows a batch may ask for (OpenAI's only one), and how long each is.
WINDOWS = {"24h": timedelta(hours=24)}
#: A create request's body, bytes.
BODY_BYTES = 64 * 1024
#: OpenAI's metadata bounds: pairs, key and value characters.
METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512
#: Most batches one list answers with (OpenAI's bound of ``limit``), and its default.
MAX_LIST, DEFAULT_LIST = 100, 20


def _batches(request: Request) -> tuple[BatchStore, Principal]:
    return request.app.state.batches, request.state.principal


async def create_batch(request: Request) -> JSONResponse:
    """``POST /v1/batches``: ``{"input_file_id", "endpoint", "completion_window", "metadata"}`` checked,
    the batch made ``validating``; the batch object."""
    store, principal = _batches(request)
    if principal.kind != "key":
        raise GatewayError("invalid_request", "A batch runs as an API key: send one (not a token).")
    body, _ = await read_json(request, body_bounds(request.app.state.settings, BODY_BYTES, ADMIN))
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        message = f"'endpoint' must be one of {', '.join(ENDPOINTS)}."
        raise GatewayError("invalid_value", message, param="endpoint")
    window = body.get("completion_window")
    if window not in WINDOWS:
        raise GatewayError("invalid_value", "'completion_window' must be 24h.", param="completion_window")
    metadata = _metadata(body.get("metadata"))
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str):
        message = "Missing required parameter: 'input_file_id'."
        raise GatewayError("invalid_request", message, param="input_file_id")
    files: FileStore = request.app.state.files
    stored = await files.live(principal.key_id, file_id)
    if stored is None:
        raise GatewayError("not_found", f"No such File object: {file_id}", param="input_file_id")
    if stored.purpose != "batch":
        raise GatewayError(
            "invalid_value", f"File {file_id} has purpose {stored.purpose}, not batch.", param="input_file_id"
        )
    batch = await store.create(principal.key_id, endpoint, file_id, WINDOWS[window], window, metadata)
    request.app.state.batch_runner.wake()
    return JSONResponse(batch.as_openai())


def _metadata(value: Any) -> dict[str, str] | None:
    """OpenAI's ``metadata``: up to 16 string pairs (keys 64 characters, values 512), or null."""
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or len(value) > METADATA_PAIRS
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        or any(len(k) > METADATA_KEY or len(v) > METADATA_VALUE for k, v in value.items())
        or not all(_text(k) and _text(v) for k, v in value.items())
    ):
        message = (
            f"'metadata' must be at most {METADATA_PAIRS} string pairs, keys up to {METADATA_KEY} "
            f"characters and values up to {METADATA_VALUE}."
        )
        raise GatewayError("invalid_value", message, param="metadata")
    return dict(value)


async def _owned(request: Request) -> tuple[BatchStore, Batch]:
    store, principal = _batches(request)
    batch_id = request.path_params["batch_id"]
    batch = await store.get(batch_id, principal.key_id)
    if batch is None:
        raise GatewayError("not_found", f"No such Batch object: {batch_id}", param="batch_id")
    return store, batch


async def get_batch(request: Request) -> JSONResponse:
    """``GET /v1/batches/{batch_id}``: the batch object, its ``request_counts`` as they stand."""
    _, batch = await _owned(request)
    return JSONResponse(batch.as_openai())


async def cancel_batch(request: Request) -> JSONResponse:
    """``POST /v1/batches/{batch_id}/cancel``: the batch ``cancelling`` (then ``cancelled``, with what
    it answered); one that ended is answered as it is."""
    store, batch = await _owned(request)
    batch = await store.cancel(batch)
    request.app.state.batch_runner.wake()
    return JSONResponse(batch.as_openai())


async def list_batches(request: Request) -> JSONResponse:
    """``GET /v1/batches``: the caller's batches, newest first (``limit``, ``after`` as OpenAI's)."""
    store, principal = _batches(request)
    limit = page_limit(request, MAX_LIST, DEFAULT_LIST)
    after = None
    if "after" in request.query_params:
        after = await store.get(request.query_params["after"], principal.key_id)
        if after is None:
            message = f"No such Batch object: {request.query_params['after']}"
            raise GatewayError("invalid_value", message, param="after")
    batches, more = await store.page(principal.key_id, after, limit)
    return JSONResponse(page([b.as_openai() for b in batches], more))
