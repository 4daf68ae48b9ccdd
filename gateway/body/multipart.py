"""A ``multipart/form-data`` body (RFC 7578) read as it arrives, for uploads: each part's field name,
file name and data in pieces, never the whole body in memory.

python-multipart's push parser does the framing (boundaries, part headers); this turns its callbacks
into values: :meth:`FormReader.feed` takes a piece of the body and returns what it completed, in
order — :class:`PartStart`, then the part's :class:`PartData` pieces, then :class:`PartEnd`. Pure:
no I/O, no web framework.
"""

from __future__ import annotations

from dataclasses import dataclass

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.errors import GatewayError

#: Most header bytes of one part (``Content-Disposition``, ``Content-Type``).
MAX_PART_HEADER_BYTES = 4096


@dataclass(frozen=True, slots=True)
class PartStart:
    """A part begins: its form field ``name``, and ``filename`` for a file (None for a plain field)."""

    name: str
    filename: str | None


@dataclass(frozen=True, slots=True)
class PartData:
    """A piece of the current part's content."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PartEnd:
    """The current part is whole."""


Event = PartStart | PartData | PartEnd


class FormReader:
    """One ``multipart/form-data`` body, fed piece by piece.

    Raises :class:`GatewayError` 400 ``invalid_request`` for a ``content_type`` that is not
    ``multipart/form-data`` with a boundary, and from :meth:`feed` / :meth:`close` for a body that is
    not well formed (bad framing, a part without a name, headers past
    :data:`MAX_PART_HEADER_BYTES`, the body ending mid-part).
    """

    def __init__(self, content_type: str) -> None:
        kind, options = parse_options_header(content_type)
        boundary = options.get(b"boundary")
        if kind != b"multipart/form-data" or not boundary:
            raise GatewayError(
                "invalid_request", "The body must be multipart/form-data with a boundary (an upload form)."
            )
        self._events: list[Event] = []
        self._headers: dict[bytes, bytes] = {}
        self._field = self._value = b""
        self._ended = False
        callbacks = {
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_end": self._on_end,
        }
        self._parser = MultipartParser(boundary, callbacks, max_header_size=MAX_PART_HEADER_BYTES)  # type: ignore[arg-type]

    def feed(self, piece: bytes) -> list[Event]:
        """What ``piece``, the body's next bytes, completed."""
        try:
            self._parser.write(piece)
        except MultipartParseError as error:
            raise _malformed(str(error)) from None
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """The body ended: it must have ended with its closing boundary."""
        if not self._ended:
            raise _malformed("the body ended before its closing boundary")

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _on_header_end(self) -> None:
        self._headers[self._field.strip().lower()] = self._value.strip()
        self._field = self._value = b""

    def _on_headers_finished(self) -> None:
        kind, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._headers = {}
        name = options.get(b"name")
        if kind != b"form-data" or not name:
            raise MultipartParseError("a part without a form field name")
        filename = options.get(b"filename")
        text = filename.decode("utf-8", "replace") if filename is not None else None
        self._events.append(PartStart(name.decode("utf-8", "replace"), text))

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._events.append(PartData(bytes(data[start:end])))

    def _on_part_end(self) -> None:
        self._events.append(PartEnd())

    def _on_end(self) -> None:
        self._ended = True


def _malformed(why: str) -> GatewayError:
    return GatewayError("invalid_request", f"The multipart body is not well formed: {why}.")
