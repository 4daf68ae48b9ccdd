"""Request ids: every request gets one of the gateway's own; every response carries it in ``x-request-id``.

The id goes in ``scope["state"]["request_id"]`` (``request.state.request_id`` in handlers), upstream
with the request, into the ledger and the access line, so gateway logs, the ledger and vLLM's logs
can be joined. A client's own ``x-request-id`` is never the id: sent on to vLLM it would name another
client's sequence (vLLM keys its requests by it) or forge a ledger entry's. A sane one is kept as
``scope["state"]["client_request_id"]``, written beside the id in the access line only.
"""

from __future__ import annotations

import re
import uuid

_SANE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
HEADER = b"x-request-id"


def new_request_id() -> str:
    """A fresh id: ``req-`` + 32 hex characters."""
    return "req-" + uuid.uuid4().hex


def client_request_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The client's ``x-request-id`` if it is sane (1–128 of ``A-Za-z0-9._:-``), else None."""
    sent = next((value for name, value in headers if name == HEADER), b"").decode("latin-1")
    return sent if _SANE.fullmatch(sent) else None
