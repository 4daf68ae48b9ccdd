"""A batch's input file, line by line, checked as OpenAI's Batch API checks it before any line runs.

Each line is a JSON object ``{"custom_id", "method": "POST", "url", "body"}`` (OpenAI's batch input
format); ``url`` must be the batch's ``endpoint``, ``custom_id`` unique in the file, ``body`` an
object that does not ask to stream. A line is bounded as a request body is: in bytes, and in shape
(values, strings, objects and arrays, depth: :mod:`gateway.body.json_limits`, measured a piece at a
time before it is parsed, so a line of ten million ``[]`` is refused after its first piece instead of
being built). A file that breaks any of this, has no line, more than :data:`MAX_REQUESTS` or a line past
a bound fails the batch with every error found (at most :data:`MAX_ERRORS`), each ``{"code",
"message", "param", "line"}`` (``line`` 1-based, as OpenAI's).
What a line's body asks (its model, its fields) is the pipeline's to judge when it runs, as for any
request of its key: a refusal there is that line's answer, in the error file.

Pure: it reads the lines it is given. A line costs up to a request body's parse (tens of milliseconds):
its callers run it off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark_common import json_codec
from gateway.body.json_limits import JsonLimits, ShapeScanner
from gateway.errors import GatewayError

#: The routes a batch may run, OpenAI's: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses``.
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
#: Most requests in one batch (OpenAI's bound).
MAX_REQUESTS = 50_000
#: Most errors a failed batch lists.
MAX_ERRORS = 1_000
#: Longest ``custom_id``, characters.
MAX_CUSTOM_ID = 512
#: Bytes of a line measured at a time: each call into the scanner is short, so a thread measuring a
#: long line gives the event loop its turn between pieces.
SCAN_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One request of a batch: its 0-based ``index`` in the file, ``custom_id`` and ``body`` (the JSON
    object sent, encoded)."""

    index: int
    custom_id: str
    body: bytes


@dataclass(frozen=True, slots=True)
class LineError:
    """Why a batch's input is refused: OpenAI's batch error (``line`` 1-based, None for the file)."""

    code: str
    message: str
    line: int | None = None
    param: str | None = None

    def as_openai(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


def parse(
    raw: bytes, index: int, endpoint: str, max_line_bytes: int, limits: JsonLimits
) -> BatchLine | LineError:
    """Line ``index`` (0-based; ``raw`` with or without its newline) as a :class:`BatchLine`, or why not:
    at most ``max_line_bytes``, its shape within ``limits``."""
    at = index + 1
    if len(raw) > max_line_bytes:
        return LineError("line_too_large", f"Line {at} is larger than {max_line_bytes} bytes.", at)
    scanner = ShapeScanner(limits)
    try:
        for start in range(0, len(raw), SCAN_BYTES):
            scanner.feed(raw[start : start + SCAN_BYTES])
    except GatewayError as exc:
        return LineError("line_too_complex", f"Line {at} is past a request body's bounds: {exc.message}", at)
    try:
        item = json_codec.loads(raw)
    except ValueError:
        return LineError("invalid_json_line", f"Line {at} is not valid JSON.", at)
    if not isinstance(item, dict):
        return LineError("invalid_json_line", f"Line {at} is not a JSON object.", at)
    custom_id = item.get("custom_id")
    if (
        not isinstance(custom_id, str)
        or not 0 < len(custom_id) <= MAX_CUSTOM_ID
        or not storable_text(custom_id)
    ):
        message = f"Line {at}: custom_id must be a string of 1 to {MAX_CUSTOM_ID} characters (no NUL)."
        return LineError("invalid_custom_id", message, at, "custom_id")
    if item.get("method") != "POST":
        return LineError("invalid_method", f"Line {at}: method must be POST.", at, "method")
    if item.get("url") != endpoint:
        url = str(item.get("url"))[:64]
        message = f"Line {at}: url must be the batch's endpoint, {endpoint}, not {url!r}."
        return LineError("mismatched_endpoint", message, at, "url")
    body = item.get("body")
    if not isinstance(body, dict):
        return LineError("invalid_body", f"Line {at}: body must be a JSON object.", at, "body")
    if body.get("stream"):
        return LineError("invalid_body", f"Line {at}: a batch line cannot stream.", at, "body.stream")
    try:
        sent = json_codec.dumps(body)  # a lone surrogate escape parses but cannot be encoded
    except ValueError:
        return LineError("invalid_body", f"Line {at}: body holds text that is not Unicode.", at, "body")
    return BatchLine(index, custom_id, sent)


def storable_text(value: str) -> bool:
    """``value`` is storable text: UTF-8 encodable (no lone surrogate) and without NUL."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


class InputCheck:
    """A batch's input file checked line by line as it is read (:meth:`add`), for ``endpoint``, each line
    within ``max_line_bytes`` and ``limits``; :meth:`result` when it is read. Blank lines are skipped,
    as JSON Lines readers do."""

    def __init__(self, endpoint: str, max_line_bytes: int, limits: JsonLimits) -> None:
        self._endpoint = endpoint
        self._max_line_bytes = max_line_bytes
        self._limits = limits
        self._errors: list[LineError] = []
        self._seen: set[str] = set()
        self._index = -1
        self.count = 0

    @property
    def failed(self) -> bool:
        """Some line was refused: the batch will not run."""
        return bool(self._errors)

    def add(self, raw: bytes) -> BatchLine | None:
        """The file's next line (``raw``, without its newline), parsed: the request, or None (a blank
        line, or one refused). Past :data:`MAX_ERRORS` lines are counted, not parsed."""
        self._index += 1
        if not raw.strip():
            return None
        self.count += 1
        if len(self._errors) >= MAX_ERRORS:
            return None
        line = parse(raw, self._index, self._endpoint, self._max_line_bytes, self._limits)
        if isinstance(line, LineError):
            self._errors.append(line)
        elif line.custom_id in self._seen:
            message = f"Line {self._index + 1}: custom_id {line.custom_id[:64]!r} is used by an earlier line."
            self._errors.append(LineError("duplicate_custom_id", message, self._index + 1, "custom_id"))
        else:
            self._seen.add(line.custom_id)
            return line
        return None

    def result(self) -> tuple[int, list[LineError]]:
        """(The file's number of requests, the errors found: none when the batch may run.)"""
        errors = list(self._errors)
        if self.count == 0:
            errors.append(LineError("empty_file", "The input file has no request."))
        elif self.count > MAX_REQUESTS:
            message = f"The input file has {self.count} requests; a batch may have at most {MAX_REQUESTS}."
            errors.insert(0, LineError("too_many_requests", message))
        return self.count, errors
