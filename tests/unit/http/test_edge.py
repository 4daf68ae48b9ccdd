"""The web edge's one middleware (gateway/http/edge.py) around a tiny ASGI app, called in-process: a
request id of the gateway's own on every answer (refusals too), bad headers refused before the app
sees them, new requests refused while draining (health exempt), in-flight counted to the last byte,
HTTP metrics by status."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gateway.dialects.openai.dialect import OPENAI
from gateway.http.drain import Drain
from gateway.http.edge import EdgeMiddleware
from gateway.http.errors import render_error
from gateway.http.http_metrics import HttpMetrics


class App:
    """Answers 200 with the request id it was given; ``seen`` holds each scope's state."""

    def __init__(self, drain: Drain) -> None:
        self.drain = drain
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.seen.append({**scope["state"], "in_flight": self.drain.in_flight})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok", "more_body": False})


def edge() -> tuple[EdgeMiddleware, App, Drain, CollectorRegistry]:
    drain, registry = Drain(), CollectorRegistry()
    app = App(drain)
    return (
        EdgeMiddleware(app, drain, HttpMetrics(registry), lambda e, _path: render_error(e, OPENAI)),
        app,
        drain,
        registry,
    )


async def call(
    middleware: EdgeMiddleware, path: str = "/v1/models", headers: list[tuple[bytes, bytes]] | None = None
):
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "headers": [(b"host", b"gw")] if headers is None else headers,
        "state": {},
    }
    await middleware(scope, receive, send)
    head = dict(sent[0]["headers"])
    return sent[0]["status"], head, b"".join(m.get("body", b"") for m in sent[1:])


async def test_every_answer_has_the_gateways_own_request_id() -> None:
    middleware, app, drain, _ = edge()
    status, head, _ = await call(middleware, headers=[(b"host", b"gw"), (b"x-request-id", b"client-7")])
    assert status == 200 and head[b"x-request-id"].startswith(b"req-")
    assert head[b"x-content-type-options"] == b"nosniff"
    assert app.seen[0]["client_request_id"] == "client-7" and app.seen[0]["request_id"] != "client-7"
    assert app.seen[0]["in_flight"] == 1 and drain.in_flight == 0  # counted to its last byte


async def test_bad_headers_are_refused_before_the_app_sees_them() -> None:
    middleware, app, _, _ = edge()
    twice = [(b"host", b"gw"), (b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")]
    huge = [(b"host", b"gw"), (b"x-big", b"x" * 40_000)]
    for headers, expected in ((twice, 400), (huge, 431), ([], 400)):
        status, head, body = await call(middleware, headers=headers)
        assert status == expected and head[b"x-request-id"].startswith(b"req-")
        assert body.startswith(b'{"error":')
    assert app.seen == []


async def test_while_draining_new_requests_get_503_but_health_answers() -> None:
    middleware, app, drain, registry = edge()
    drain.begin()
    status, head, _ = await call(middleware)
    assert status == 503 and head[b"retry-after"] == b"5"
    assert (await call(middleware, "/health"))[0] == 200
    assert len(app.seen) == 1
    by_status = {
        status: registry.get_sample_value(
            "http_requests_total", {"method": "GET", "status": status, "handler": "none"}
        )
        for status in ("2xx", "5xx")
    }
    assert by_status == {"2xx": 1.0, "5xx": 1.0}
