"""The paging of the list routes of files and batches, as OpenAI's and Anthropic's lists page: a
``limit`` query parameter, and a page of objects with its first and last ids and ``has_more``."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from gateway.errors import GatewayError


def page_limit(request: Request, maximum: int, default: int) -> int:
    """The ``limit`` query parameter: 1 to ``maximum``, ``default`` when absent (400 otherwise)."""
    raw = request.query_params.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= maximum:
        raise GatewayError("invalid_value", f"'limit' must be an integer in 1..{maximum}.", param="limit")
    return int(raw)


def page(objects: list[dict[str, Any]], more: bool, openai: bool = True) -> dict[str, Any]:
    """A page of ``objects``: ``{"object": "list", "data", "first_id", "last_id", "has_more"}`` (without
    ``object`` for Anthropic's, ``openai`` False)."""
    shown = {
        "data": objects,
        "first_id": objects[0]["id"] if objects else None,
        "last_id": objects[-1]["id"] if objects else None,
        "has_more": more,
    }
    return {"object": "list", **shown} if openai else shown
