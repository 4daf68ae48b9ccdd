"""Request ids: every response carries ``x-request-id``; a sane one sent by the client is kept.

The id goes in ``scope["state"]["request_id"]`` (``request.state.request_id`` in handlers) and upstream
with the request, so gateway logs, the ledger and vLLM's logs can be joined.
"""

from __future__ import annotations

import re
import uuid

_SANE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
HEADER = b"x-request-id"


def new_request_id() -> str:
    """A fresh id: ``req-`` + 32 hex characters."""
    return "req-" + uuid.uuid4().hex


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``x-request-id`` if it is sane (1–128 of ``A-Za-z0-9._:-``), else a new one."""
    sent = next((value for name, value in headers if name == HEADER), b"").decode("latin-1")
    return sent if _SANE.fullmatch(sent) else new_request_id()
