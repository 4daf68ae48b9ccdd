"""The OpenAI Files API, for batch input and output: ``POST /v1/files`` (a multipart upload, ``purpose``
``batch``), ``GET /v1/files``, ``GET`` / ``DELETE /v1/files/{file_id}``, ``GET
/v1/files/{file_id}/content``.

An upload is streamed to the files directory as it arrives (:mod:`gateway.body.multipart`,
:mod:`gateway.storage.files`): at most ``GATEWAY_FILES_MAX_BYTES`` (OpenAI's 200 MB for a batch input
file), else 413 as soon as it passes. A file belongs to the key that uploaded it: every other key
gets the 404 of a file that never existed, as for stored responses; so does a file that expired.
An upload counts as one request against the key's (and its group's) requests per minute, and is
bounded by what the key and its group keep (400 ``storage_quota_exceeded``, as OpenAI's full file
storage quota) and by the gateway's storage (507 ``insufficient_storage``):
:mod:`gateway.storage.file_bounds`. OpenAI's ``expires_after`` (``anchor`` ``created_at``,
``seconds`` in [3600, 2592000]) sets when it expires, else ``GATEWAY_FILES_DEFAULT_EXPIRY_S``.
Errors are OpenAI's shape.
"""

from __future__ import annotations

from typing import Literal, cast

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse

from gateway.auth.principal import Principal
from gateway.body.multipart import FormReader, PartData, PartEnd, PartStart
from gateway.body.read import body_bounds, body_pieces
from gateway.errors import GatewayError
from gateway.http.listing import page, page_limit
from gateway.storage.file_bounds import Owner
from gateway.storage.files import FileStore, StoredFile, Upload

#: The purposes files are kept for: what the gateway does with files (its batches).
PURPOSES = ("batch",)
#: Bytes of a multipart body besides the file's content: boundaries, part headers, the purpose field.
FORM_OVERHEAD_BYTES = 64 * 1024
#: Longest value of a plain form field (``purpose``), bytes.
MAX_FIELD_BYTES = 1024
#: Most plain form fields an upload may carry (OpenAI's form has one: ``purpose``).
MAX_FIELDS = 8
#: OpenAI's bounds of ``expires_after.seconds``: an hour to 30 days.
EXPIRY_S = (3600, 2_592_000)
#: The form fields of ``expires_after`` (the SDKs send a nested form field as ``name[part]``).
ANCHOR, SECONDS = "expires_after[anchor]", "expires_after[seconds]"
#: The upload's form, as the API docs show it (the handler reads the body itself, after authentication).
UPLOAD_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"type": "string", "enum": list(PURPOSES)},
                        ANCHOR: {"type": "string", "enum": ["created_at"]},
                        SECONDS: {"type": "integer", "minimum": EXPIRY_S[0], "maximum": EXPIRY_S[1]},
                    },
                }
            }
        },
    }
}
#: Most files one list answers with (OpenAI's bound of ``limit``), and its default.
MAX_LIST = 10_000


def _files(request: Request) -> tuple[FileStore, Principal]:
    return request.app.state.files, request.state.principal


async def create_file(request: Request) -> JSONResponse:
    """``POST /v1/files``: the form's ``file`` kept as the caller's, with its ``purpose``; the file object."""
    store, principal = _files(request)
    await request.app.state.pipeline.limits.count(principal)  # its x-ratelimit-*: the edge's
    owner = owner_of(principal)
    reader = FormReader(request.headers.get("content-type", ""))
    bounds = body_bounds(request.app.state.settings, store.max_bytes + FORM_OVERHEAD_BYTES, None)
    upload: Upload | None = None
    filename, fields, part = "", dict[str, bytearray](), None
    try:
        async for piece in body_pieces(request, bounds):
            for event in reader.feed(piece):
                if isinstance(event, PartStart):
                    part = event.name
                    if part == "file":
                        if upload is not None:
                            raise GatewayError("invalid_request", "Send one file per upload.", param="file")
                        upload, filename = await store.upload(owner=owner), _filename(event.filename)
                    elif part in fields or len(fields) >= MAX_FIELDS:
                        message = f"The form repeats '{part[:32]}' or has more than {MAX_FIELDS} fields."
                        raise GatewayError("invalid_request", message, param=part[:32])
                    else:
                        fields[part] = bytearray()
                elif isinstance(event, PartData):
                    if part == "file" and upload is not None:
                        await upload.write(event.data)
                    elif part is not None:
                        fields[part] += event.data
                        if len(fields[part]) > MAX_FIELD_BYTES:
                            message = f"The form field '{part}' is longer than {MAX_FIELD_BYTES} bytes."
                            raise GatewayError("invalid_request", message, param=part)
                elif isinstance(event, PartEnd):
                    part = None
        reader.close()
        purpose = fields.get("purpose", bytearray()).decode("utf-8", "replace")
        if upload is None:
            raise GatewayError("invalid_request", "Missing required parameter: 'file'.", param="file")
        if purpose not in PURPOSES:
            message = f"'purpose' must be one of {', '.join(PURPOSES)}: this gateway keeps files for batches."
            raise GatewayError("invalid_value", message, param="purpose")
        lifetime = _expires_after(fields)
        stored = await store.commit(
            upload, principal.key_id, filename, purpose, owner=owner, expires_after_s=lifetime
        )
    except BaseException:
        if upload is not None:
            await store.discard(upload)
        raise
    return JSONResponse(stored.as_openai())


def owner_of(principal: Principal) -> Owner:
    """Whose bounds ``principal``'s uploads count against: its key's and its group's."""
    return Owner(principal.key_id, principal.group.id if principal.group is not None else None)


def _expires_after(fields: dict[str, bytearray]) -> int | None:
    """The lifetime ``expires_after`` asks for, seconds (None: not given); 400 ``invalid_value`` for an
    anchor other than ``created_at`` or seconds outside :data:`EXPIRY_S`."""
    if ANCHOR not in fields and SECONDS not in fields:
        return None
    anchor = fields.get(ANCHOR, bytearray()).decode("utf-8", "replace")
    if anchor != "created_at":
        raise GatewayError("invalid_value", "'expires_after.anchor' must be created_at.", param=ANCHOR)
    text = fields.get(SECONDS, bytearray()).decode("utf-8", "replace").strip()
    low, high = EXPIRY_S
    if not text.isdigit() or not low <= int(text) <= high:
        message = f"'expires_after.seconds' must be an integer from {low} to {high}."
        raise GatewayError("invalid_value", message, param=SECONDS)
    return int(text)


def _filename(sent: str | None) -> str:
    """The name to keep for a file sent as ``sent``: its last path part, without NUL (a database's text
    can't hold one), else ``file``."""
    name = (sent or "").replace("\x00", "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    return name or "file"


async def list_files(request: Request) -> JSONResponse:
    """``GET /v1/files``: the caller's files, newest first (``order``, ``limit``, ``after``, ``purpose``
    as OpenAI's): ``{"object": "list", "data", "first_id", "last_id", "has_more"}``."""
    store, principal = _files(request)
    query = request.query_params
    purpose = query.get("purpose") or None
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise GatewayError("invalid_value", "'order' must be asc or desc.", param="order")
    limit = page_limit(request, MAX_LIST, MAX_LIST)
    after = None
    if "after" in query:
        after = await store.live(principal.key_id, query["after"])
        if after is None:
            raise GatewayError("invalid_value", f"No such File object: {query['after']}", param="after")
    files, more = await store.page(
        principal.key_id, purpose, after, limit, cast(Literal["asc", "desc"], order)
    )
    return JSONResponse(page([f.as_openai() for f in files], more))


async def _owned(request: Request) -> tuple[FileStore, StoredFile]:
    """The store and the path's file, once it is the caller's and not expired (else 404, as for an id
    never made)."""
    store, principal = _files(request)
    file_id = request.path_params["file_id"]
    stored = await store.live(principal.key_id, file_id)
    if stored is None:
        raise GatewayError("not_found", f"No such File object: {file_id}", param="file_id")
    return store, stored


async def get_file(request: Request) -> JSONResponse:
    """``GET /v1/files/{file_id}``: the file object."""
    _, stored = await _owned(request)
    return JSONResponse(stored.as_openai())


async def file_content(request: Request) -> FileResponse:
    """``GET /v1/files/{file_id}/content``: the file's bytes, streamed from the files directory."""
    store, stored = await _owned(request)
    path = store.content(stored)
    return FileResponse(path, media_type="application/octet-stream", filename=stored.filename)


async def delete_file(request: Request) -> JSONResponse:
    """``DELETE /v1/files/{file_id}``: the file gone: ``{"id", "object": "file", "deleted": true}``; 400
    while a batch not ended reads it (cancel the batch first)."""
    store, stored = await _owned(request)
    batch = await request.app.state.batches.uses(stored.key_id, stored.id)
    if batch is not None:
        message = f"File {stored.id} is the input of batch {batch}, which has not ended: cancel it first."
        raise GatewayError("invalid_request", message, param="file_id")
    await store.delete(stored.key_id, stored.id)
    return JSONResponse({"id": stored.id, "object": "file", "deleted": True})
