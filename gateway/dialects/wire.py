"""What every dialect reads off the wire alike: the client's Bearer token, and a backend's body or
chunk as a JSON object. Pure: no I/O, no web framework."""

from __future__ import annotations

from typing import Any

from dspark_common import json_codec
from gateway.auth.authenticator import unauthorized
from gateway.errors import MalformedResponseError


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization`` header value.

    The scheme is case-insensitive (RFC 7235) and separated from the token by spaces (RFC 6750
    ``1*SP``); only SP and HTAB count as whitespace around the token (RFC 9110 OWS), not everything
    :meth:`str.strip` removes (e.g. a no-break space, which a latin-1 header can carry).
    Raises :class:`GatewayError` 401 when the header is missing or not ``Bearer <token>``.
    """
    if not header:
        raise unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    scheme, _, token = header.partition(" ")
    token = token.strip(" \t")
    if scheme.lower() != "bearer" or not token:
        raise unauthorized("Malformed Authorization header: expected 'Bearer <key>'.")
    return token


class MalformedChunkError(MalformedResponseError):
    """An upstream chunk or body whose choices don't have OpenAI's shape."""


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` parsed; :class:`MalformedChunkError` naming ``what`` unless it is a JSON object."""
    try:
        obj = json_codec.loads(data)
    except ValueError:
        raise MalformedChunkError(f"{what} is not JSON") from None
    if not isinstance(obj, dict):
        raise MalformedChunkError(f"{what} is not a JSON object")
    return obj
