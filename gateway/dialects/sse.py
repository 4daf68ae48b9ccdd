"""Server-sent events framing (WHATWG HTML Living Standard, "Server-sent events").

:class:`SSEDecoder` cuts a byte stream into whole events without re-encoding them, so the relay can
forward upstream bytes unchanged; :func:`event_data` reads an event's ``data`` field. An event whose
data is rewritten keeps its other fields (:func:`with_data`); one that is not passed on at all hands
its ``id`` and ``retry`` to the next one sent (:func:`lasting_fields`). Pure: no I/O.
"""

from __future__ import annotations

import re

# An event ends at a blank line: two line terminators in a row (CRLF, LF or CR each).
_EVENT_END = re.compile(rb"(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?!\n))")
DONE = b"[DONE]"
#: An SSE comment that keeps an idle stream open (clients ignore comment lines).
KEEP_ALIVE_COMMENT = b": keep-alive\n\n"


#: Default bound of one event's size, bytes (see :class:`SSEDecoder`).
MAX_EVENT_BYTES = 64 * 1024 * 1024


class EventTooLargeError(ValueError):
    """More bytes than the decoder's bound arrived without completing an event."""


class SSEDecoder:
    """Incremental splitter: ``feed(bytes) -> [raw event bytes]``; an event includes its terminator.

    ``max_event_bytes`` bounds what is held for an incomplete event (an upstream that never ends a
    line would otherwise grow the buffer until memory runs out): past it, :meth:`feed` raises
    :class:`EventTooLargeError`. Each byte is scanned for the event end about once, so a large event
    arriving in many pieces costs linear time, not quadratic.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # bytes at the start of the buffer already searched without finding an end
        self._max = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the events completed by them, in order."""
        buffer = self._buffer
        if not buffer and b"\r" not in data:  # LF line ends and nothing pending: split
            if 0 <= data.find(b"\n\n") == len(data) - 2:  # the usual read: exactly one whole event
                self._scanned = 0
                return [data]
            *complete, rest = data.split(b"\n\n")
            buffer += rest
            self._scanned = len(rest)
            if len(buffer) > self._max:
                raise EventTooLargeError(f"an event is larger than {self._max} bytes")
            return [event + b"\n\n" for event in complete]
        buffer += data
        events: list[bytes] = []
        start = 0
        # An end is at most 4 bytes (+1 of look-ahead): re-search only the tail that new bytes can complete.
        pos = max(0, self._scanned - 8)
        # A trailing CR may be the first half of CRLF: keep it until the next byte decides.
        limit = len(buffer) - 1 if buffer.endswith(b"\r") else len(buffer)
        while True:
            match = _EVENT_END.search(buffer, pos, limit)
            if match is None:
                break
            events.append(bytes(buffer[start : match.end()]))
            start = pos = match.end()
        del buffer[:start]
        self._scanned = limit - start
        if len(buffer) > self._max:
            raise EventTooLargeError(f"an event is larger than {self._max} bytes")
        return events

    def feed_payloads(self, data: bytes) -> list[tuple[bytes, bytes | None]]:
        """:meth:`feed`, each event with its ``data`` payload (:func:`event_data`). The usual read, one
        whole ``data: ...`` line and its blank line with nothing pending, is answered with one scan."""
        if not self._buffer and _lone_data_line(data):
            self._scanned = 0
            return [(data, data[6:-2])]
        return [(event, event_data(event)) for event in self.feed(data)]

    @property
    def pending(self) -> bytes:
        """Bytes received that do not yet form a whole event."""
        return bytes(self._buffer)


def _lone_data_line(data: bytes) -> bool:
    """True for one whole event that is a single ``data: `` line ended by LF LF (vLLM's every event)."""
    return (
        data.startswith(b"data: ")
        and data.find(b"\n") == len(data) - 2
        and data.endswith(b"\n\n")
        and b"\r" not in data
    )


def event_name(event: bytes) -> bytes | None:
    """The event's ``event`` field (its type: ``message_stop``, ``response.completed``), or None."""
    for line in event.splitlines():
        if line.startswith(b"event:"):
            value = line[6:]
            return value[1:] if value.startswith(b" ") else value
    return None


def event_data(event: bytes) -> bytes | None:
    """The event's ``data`` payload (multiple ``data:`` lines joined by LF), or None if it has none.

    Comment lines (starting with ``:``) and other fields are ignored.
    """
    if _lone_data_line(event):  # vLLM's every event: answered without splitting lines
        return event[6:-2]
    parts: list[bytes] = []
    for line in event.splitlines():
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts) if parts else None


def with_data(event: bytes, data: bytes) -> bytes:
    """``event`` with its ``data`` replaced by ``data`` (one line: JSON as :mod:`dspark_common.json_codec`
    writes it, with no line break). Its other lines — ``id``, ``event``, ``retry``, comments — stay,
    in their order, the new data line where its first data line was; lines end with LF."""
    if _lone_data_line(event):  # vLLM's every event: nothing else to keep
        return b"data: " + data + b"\n\n"
    lines: list[bytes] = []
    placed = False
    for line in event.splitlines():
        if line.startswith(b"data:"):
            if not placed:
                lines.append(b"data: " + data)
                placed = True
        elif line:
            lines.append(line)
    if not placed:
        lines.append(b"data: " + data)
    return b"\n".join(lines) + b"\n\n"


#: The fields that outlast their event (WHATWG, "Interpreting an event stream"): ``id`` sets the last
#: event id and ``retry`` the reconnection time whether or not the event is dispatched.
_LASTING = frozenset({b"id", b"retry"})


def lasting_fields(event: bytes) -> bytes:
    """The ``id`` and ``retry`` lines of ``event``, each ended by LF (b"" when it has none): what must
    still reach the client, with the next event sent, when ``event`` itself is not passed on."""
    if _lone_data_line(event):
        return b""
    return b"".join(line + b"\n" for line in event.splitlines() if line.partition(b":")[0] in _LASTING)
