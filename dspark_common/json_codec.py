"""JSON on the relay's hot path: orjson where it can, the standard library where orjson refuses.

Every relayed chunk is parsed once and, when the gateway changes it, encoded once; orjson does both
several times faster than :mod:`json`. The output is the same as
``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))`` up to float spelling (``1e-05`` vs
``1e-5``: the same number), except that a NaN or infinite float is written ``null`` where :mod:`json`
writes the literal ``NaN``, which is not JSON and breaks clients' parsers. Input orjson refuses —
``NaN``/``Infinity`` literals, lone surrogate escapes — falls back to :mod:`json`, so nothing the
standard library accepted is refused now. One difference is left: orjson reads an integer beyond 64
bits as a float (no OpenAI or vLLM field holds one).
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """Parse one JSON document. Raises ``ValueError`` (``json.JSONDecodeError``) if it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps_text(obj: Any) -> str:
    """:func:`dumps` as ``str`` (for a text sink: a log line, a file opened as text, a database's JSON
    column). Raises as :func:`dumps` does."""
    return dumps(obj).decode()


#: Below this, :func:`dumps_kept` copies orjson's output: its buffer starts at 4 KiB and is kept, so a
#: 300-byte document holds a resident 4 KiB page (a larger one grows into pages it touches only as far
#: as it writes).
KEPT_COPY_BYTES = 4096


def dumps_kept(obj: Any) -> bytes:
    """:func:`dumps` for a document that is kept for long (a request's body while it waits in the
    queue: thousands of them): one of its own size."""
    out = dumps(obj)
    return bytes(memoryview(out)) if len(out) < KEPT_COPY_BYTES else out


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (non-ASCII characters as they are; integers beyond 64 bits through :mod:`json`).
    Raises ``TypeError`` for values JSON has no form for, ``UnicodeEncodeError`` for a lone surrogate."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
