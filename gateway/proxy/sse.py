"""Server-sent events framing (WHATWG HTML Living Standard, "Server-sent events").

:class:`SSEDecoder` cuts a byte stream into whole events without re-encoding them, so the relay can
forward upstream bytes unchanged; :func:`event_data` reads an event's ``data`` field. Pure: no I/O.
"""

from __future__ import annotations

import re

# An event ends at a blank line: two line terminators in a row (CRLF, LF or CR each).
_EVENT_END = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?!\n))")
DONE = b"[DONE]"


class SSEDecoder:
    """Incremental splitter: ``feed(bytes) -> [raw event bytes]``; an event includes its terminator."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the events completed by them, in order."""
        buffer = self._buffer + data
        events: list[bytes] = []
        start = 0
        # A trailing CR may be the first half of CRLF: keep it until the next byte decides.
        limit = len(buffer) - 1 if buffer.endswith(b"\r") else len(buffer)
        while True:
            match = _EVENT_END.search(buffer, start, limit)
            if match is None:
                break
            events.append(buffer[start : match.end()])
            start = match.end()
        self._buffer = buffer[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes received that do not yet form a whole event."""
        return self._buffer


def event_data(event: bytes) -> bytes | None:
    """The event's ``data`` payload (multiple ``data:`` lines joined by LF), or None if it has none.

    Comment lines (starting with ``:``) and other fields are ignored.
    """
    parts: list[bytes] = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None
