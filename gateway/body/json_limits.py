"""Request bodies parsed as JSON within bounds, so that no body costs the event loop more than a few
tens of milliseconds however it is shaped. Pure: no web framework.

What a body costs to parse and handle grows with its values and containers, not its bytes: a 30 MiB
body of tiny arrays is ten million objects, which orjson alone takes seconds to build. So the body's
shape is measured while it arrives (:class:`ShapeScanner`, fed each piece the server hands over):
the bytes outside strings — escaped backslashes and quotes removed, then every other quote-separated
run — give its values (one per comma, plus one), its strings (object keys included: each costs a
Python object, often a dict slot), its objects and arrays, and its depth, at
``bytes.split`` / ``bytes.count`` speed, a piece at a time, and the read stops at the first piece
that passes a limit: 413 ``request_too_complex`` (values, strings, containers), 400 ``invalid_request``
(depth). Only then does orjson parse it, strictly: ``NaN``, ``Infinity``, numbers beyond a double
(``1e400``), invalid UTF-8 and lone surrogate escapes are not JSON (RFC 8259) and are refused there,
so no tree is walked for them afterwards.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import GatewayError

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
#: The key an error position is inside the value of: the last one before it, followed by the start of
#: its value (a string read so far, or a number or literal).
_KEY_BEFORE = re.compile(rb'"([^"\\]{1,128})"\s*:\s*(?:"(?:[^"\\]|\\.)*|[^"\[\]{},]*)$')


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Bounds of one body: values (one per comma outside strings, plus one), strings (keys too),
    containers (objects and arrays), depth.

    The inference default admits a 1M-token prompt sent as token ids (a million numbers, which
    orjson parses quickly) and a conversation of thousands of messages with tools; strings and
    containers cost many times a number to build (a dict of distinct keys above all), so they are
    bounded lower.
    """

    max_values: int = 1_100_000
    max_strings: int = 50_000
    max_containers: int = 10_000
    max_depth: int = 64


#: Bounds of the admin API's bodies (a key's settings and labels).
ADMIN = JsonLimits(max_values=2_000, max_strings=1_000, max_containers=200, max_depth=8)


class ShapeScanner:
    """Measures a JSON text fed in pieces; :meth:`feed` raises as soon as a limit is passed.

    Invalid JSON is measured too (orjson refuses it afterwards); what matters is that the figures
    bound what parsing it would build.
    """

    def __init__(self, limits: JsonLimits) -> None:
        self.limits = limits
        self.values = 1
        self.strings = 0
        self.containers = 0
        self._quotes = 0
        self.depth = 0
        self._in_string = False
        self._carry = b""  # a trailing run of backslashes: its escape may continue in the next piece

    def feed(self, data: bytes) -> None:
        """Measure the next piece of the text."""
        if self._carry:
            data, self._carry = self._carry + data, b""
        if b"\\" in data:
            kept = data.rstrip(b"\\")
            self._carry = data[len(kept) :]
            data = kept.replace(b"\\\\", b"").replace(b'\\"', b"")
        parts = data.split(b'"')
        outside = parts[1::2] if self._in_string else parts[0::2]
        if len(parts) % 2 == 0:
            self._in_string = not self._in_string
        limits = self.limits
        self._quotes += len(parts) - 1
        self.strings = self._quotes // 2
        if self.strings > limits.max_strings:
            raise _too_complex(f"more than {limits.max_strings} strings")
        skeleton = b"".join(outside)
        self.values += skeleton.count(b",")
        if self.values > limits.max_values:
            raise _too_complex(f"more than {limits.max_values} values")
        brackets = skeleton.translate(None, _NOT_BRACKETS)
        if not brackets:
            return
        self.containers += brackets.count(b"[") + brackets.count(b"{")
        if self.containers > limits.max_containers:
            raise _too_complex(f"more than {limits.max_containers} objects and arrays")
        steps = list(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets), initial=self.depth))
        if max(steps) > limits.max_depth:
            message = f"The body is nested more than {limits.max_depth} levels deep."
            raise GatewayError("invalid_request", message)
        self.depth = steps[-1]


def parse_object(raw: bytes, limits: JsonLimits | None = None) -> dict[str, Any]:
    """``raw`` parsed, if it is a JSON object (within ``limits``, when given: a body read through a
    :class:`ShapeScanner` was measured already); else :class:`GatewayError` (413 / 400, naming as
    ``param`` the key before the fault, when it can)."""
    if limits is not None:
        ShapeScanner(limits).feed(raw)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        param = param_at(raw, exc.pos)
        raise GatewayError("invalid_request", f"The body is not valid JSON: {exc.msg}", param=param) from None
    if not isinstance(parsed, dict):
        raise GatewayError("invalid_request", "The body must be a JSON object.")
    return parsed


def deeper_than(value: Any, max_depth: int) -> bool:
    """True if parsed JSON ``value`` nests objects and arrays more than ``max_depth`` levels (a scalar is
    0 levels); iterative, and it stops at the first container past the bound."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def param_at(raw: bytes, position: int) -> str | None:
    """The object key whose value holds byte ``position`` of ``raw``, as far as the bytes before it tell
    (the last key before it)."""
    match = _KEY_BEFORE.search(raw, max(0, position - 256), position)
    return match.group(1).decode("utf-8", "replace") if match else None


def _too_complex(what: str) -> GatewayError:
    return GatewayError("request_too_complex", f"The body holds {what}.")
