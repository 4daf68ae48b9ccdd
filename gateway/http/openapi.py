"""OpenAPI for routes whose handlers read their bodies themselves (after authentication): the request
body's schema, generated from the pydantic model that validates it, for ``/docs`` and schema-driven
clients and fuzzers. The docs pages' JavaScript and CSS are served by the gateway, under
:data:`DOCS_ASSETS` (public, as ``/docs`` is), as FastAPI's "Self-hosting JavaScript and CSS for docs"
describes — the files from the ``fastapi-offline`` package."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

#: Where Swagger UI's and ReDoc's files are served (``swagger-ui-bundle.js``, ``swagger-ui.css``,
#: ``redoc.standalone.js``, ``favicon.png``).
DOCS_ASSETS = "/docs/assets"


def request_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema (``model_json_schema``), self-contained: pydantic's ``#/$defs/...`` refs
    would resolve against the OpenAPI document's root, so the definitions are inlined (these request
    models are not recursive)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    inlined: dict[str, Any] = inline(schema)
    return inlined


def documented(model: type[BaseModel], *, required: bool = True, streams: bool = False) -> dict[str, Any]:
    """The ``openapi_extra`` of a route whose body ``model`` validates; with ``streams``, a 200 is JSON,
    or server-sent events when the body asks for ``stream``."""
    extra: dict[str, Any] = {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": request_schema(model)}},
        }
    }
    if streams:
        extra["responses"] = {
            "200": {
                "description": "The completion, or with `stream: true` server-sent events",
                "content": {"application/json": {}, "text/event-stream": {}},
            }
        }
    return extra
