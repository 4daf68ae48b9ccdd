"""The gateway's errors: one exception type and one catalogue of error kinds. Pure: no web framework.

Each kind (:data:`CATALOGUE`, by its ``code``) has its HTTP status, its OpenAI error ``type`` and the
level its answers are logged at. How an error looks on the wire is the client's dialect's business
(:mod:`gateway.dialects`: OpenAI's ``{"error": {"message", "type", "param", "code"}}``, Anthropic's
``{"type": "error", "error": {...}}``); the HTTP edge renders it (:mod:`gateway.http.errors`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_INFO, _WARNING, _ERROR = logging.INFO, logging.WARNING, logging.ERROR


@dataclass(frozen=True, slots=True)
class ErrorKind:
    """One kind of error: HTTP ``status``, OpenAI error ``type`` (API reference, "Error codes") and the
    log level of its answers (a client's mistake is INFO, a backend fault WARNING, ours ERROR)."""

    status: int
    type: str
    log_level: int


_INVALID = "invalid_request_error"
_UPSTREAM = "upstream_error"

#: Every error the gateway answers with, by its ``code``.
CATALOGUE: Mapping[str, ErrorKind] = {
    # the request
    "invalid_request": ErrorKind(400, _INVALID, _INFO),
    "invalid_value": ErrorKind(400, _INVALID, _INFO),
    "context_length_exceeded": ErrorKind(400, _INVALID, _INFO),
    "not_found": ErrorKind(404, _INVALID, _INFO),
    "method_not_allowed": ErrorKind(405, _INVALID, _INFO),
    "request_too_large": ErrorKind(413, _INVALID, _INFO),
    "request_too_complex": ErrorKind(413, _INVALID, _INFO),  # too many JSON values or containers
    "request_timeout": ErrorKind(408, _INVALID, _INFO),  # the body stopped arriving
    "unsupported_field": ErrorKind(400, _INVALID, _INFO),  # a field this key may not set
    "request_headers_too_large": ErrorKind(431, _INVALID, _INFO),
    # OpenAI answers a full file storage quota 400 invalid_request_error ("You have exceeded your file
    # storage quota ... Please delete old files")
    "storage_quota_exceeded": ErrorKind(400, _INVALID, _INFO),
    # who is asking
    "invalid_api_key": ErrorKind(401, "authentication_error", _INFO),
    "invalid_metrics_token": ErrorKind(401, "authentication_error", _INFO),
    "admin_required": ErrorKind(403, "permission_error", _INFO),
    "metrics_local_only": ErrorKind(403, "permission_error", _INFO),
    "model_not_allowed": ErrorKind(403, "permission_error", _INFO),
    "model_not_found": ErrorKind(404, _INVALID, _INFO),
    "response_not_found": ErrorKind(404, _INVALID, _INFO),  # a stored response not the key's
    # the admin API
    "key_not_found": ErrorKind(404, _INVALID, _INFO),
    "key_exists": ErrorKind(409, _INVALID, _INFO),
    "key_revoked": ErrorKind(409, _INVALID, _INFO),
    "group_not_found": ErrorKind(404, _INVALID, _INFO),
    "group_exists": ErrorKind(409, _INVALID, _INFO),
    "group_in_use": ErrorKind(409, _INVALID, _INFO),
    # capacity
    "rate_limit_requests": ErrorKind(429, "rate_limit_error", _INFO),
    "rate_limit_tokens": ErrorKind(429, "rate_limit_error", _INFO),
    "quota_exceeded": ErrorKind(429, "rate_limit_error", _INFO),
    "rate_limit_address": ErrorKind(429, "rate_limit_error", _INFO),  # a public route, per client address
    "too_many_failed_authentications": ErrorKind(429, "rate_limit_error", _WARNING),
    "queue_full": ErrorKind(429, "rate_limit_error", _WARNING),
    "queue_timeout": ErrorKind(429, "rate_limit_error", _WARNING),
    "wait_too_long": ErrorKind(429, "rate_limit_error", _INFO),  # expected past its x-max-wait-s
    "create_in_progress": ErrorKind(429, "rate_limit_error", _INFO),  # one message batch create per key
    "draining": ErrorKind(503, "service_unavailable_error", _INFO),
    # a batch line whose slot an interactive request took back (GATEWAY_BATCH_PREEMPTION): sent again
    "preempted": ErrorKind(503, "service_unavailable_error", _INFO),
    "admission_unavailable": ErrorKind(503, "service_unavailable_error", _ERROR),  # Redis, when shared
    "limits_unavailable": ErrorKind(503, "service_unavailable_error", _ERROR),  # the limits' store
    "ledger_unavailable": ErrorKind(503, "service_unavailable_error", _ERROR),  # rows it can't write
    "database_unavailable": ErrorKind(503, "service_unavailable_error", _ERROR),  # a write refused
    "insufficient_storage": ErrorKind(507, "server_error", _ERROR),  # a disk (nearly) full
    # the backend
    "upstream_rejected": ErrorKind(400, _INVALID, _INFO),  # its own 4xx: status as it answered
    "upstream_error": ErrorKind(502, _UPSTREAM, _WARNING),  # its own 5xx: status as it answered
    "upstream_stream_error": ErrorKind(502, _UPSTREAM, _WARNING),
    "upstream_overran_cap": ErrorKind(502, _UPSTREAM, _WARNING),  # generated past the output cap it was sent
    "upstream_unavailable": ErrorKind(503, "service_unavailable_error", _WARNING),
    "upstream_timeout": ErrorKind(504, _UPSTREAM, _WARNING),
    # ours
    "internal_error": ErrorKind(500, "server_error", _ERROR),
    "http_error": ErrorKind(400, _INVALID, _INFO),  # the web framework's own refusals: their status
}

#: Codes whose status is given with each error (the backend's, the framework's), not the catalogue's.
_ANY_STATUS = frozenset({"upstream_rejected", "upstream_error", "http_error"})
#: Codes that stay out of the client's ``code`` field (their message says it all).
_UNNAMED = frozenset({"upstream_rejected", "http_error"})
#: OpenAI's error ``type`` by status, for errors whose status is not their kind's.
_TYPE_BY_STATUS: Mapping[int, str] = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    502: _UPSTREAM,
    503: "service_unavailable_error",
    504: _UPSTREAM,
}


class GatewayError(Exception):
    """An error the gateway answers with: a catalogue ``code``, a message for the client, the request
    field at fault (``param``) and extra response headers (``Retry-After``, ``WWW-Authenticate``).

    ``status`` overrides the catalogue's only for errors whose status is given (the backend's own,
    ``upstream_rejected`` and ``upstream_error``, keep the status it answered with; ``http_error``, the
    web framework's). Raises ``KeyError`` for an unknown code, ``ValueError`` for a status not allowed.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = CATALOGUE[code]
        if status is not None and code not in _ANY_STATUS:
            raise ValueError(f"{code} has the catalogue's status")
        self.status = status or self.kind.status
        self.code = None if code in _UNNAMED else code
        self.message = message
        self.param = param
        self.headers = dict(headers or {})

    @property
    def type(self) -> str:
        """OpenAI's error ``type``: the kind's, or by status for an error whose status was given."""
        if self.kind.status == self.status:
            return self.kind.type
        return _TYPE_BY_STATUS.get(self.status, "server_error" if self.status >= 500 else _INVALID)


def internal_error() -> GatewayError:
    """The 500 for a failure the gateway has no better answer for (the cause goes to the log only)."""
    return GatewayError("internal_error", "The gateway failed to handle this request.")


def invalid_request(errors: Sequence[Any]) -> GatewayError:
    """400 ``invalid_request`` from pydantic validation errors (``ValidationError.errors()``; the first
    one is reported, located as ``param`` in dotted form)."""
    first = errors[0] if errors and isinstance(errors[0], dict) else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "Invalid request"))
    return GatewayError("invalid_request", f"{param}: {msg}" if param else msg, param=param)


class MalformedResponseError(ValueError):
    """An upstream chunk or body that is not the shape its API promises (a client SDK would fail on it)."""


class ClientTooSlowError(Exception):
    """A stream's client read nothing for ``timeout_s`` while ``buffered`` bytes (its whole buffer)
    waited for it, or once its upstream had ended (``buffered`` None): it is cut, and its upstream
    aborted."""

    def __init__(self, timeout_s: float, buffered: int | None = None) -> None:
        waiting = f" with {buffered} bytes buffered" if buffered is not None else " after its answer ended"
        super().__init__(f"the client read nothing for {timeout_s:g} s{waiting}")
