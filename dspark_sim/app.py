"""``create_sim_app(config)``: the simulator's ASGI app, its route table and middleware.

A plain Starlette app: the handlers take a ``Request`` and return a ``Response``, so FastAPI's routing and
dependency layers would only add per-request work, and that work sits in the slot idle gap the benchmark
(``bench/queue_scale.py``'s direct floor) measures. Unknown routes and wrong methods still answer FastAPI's
(and so vLLM's) ``{"detail": ...}`` JSON.

All state is built here and kept on ``app.state.sim``; nothing is created at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import handlers
from .config import SimConfig
from .errors import SimError, SimulatedCrash, sim_error_handler
from .state import SimState

logger = logging.getLogger("dspark_sim")

SIMULATOR_HEADER = (b"x-dspark-simulator", b"1")

ROUTES = (
    ("/v1/chat/completions", handlers.chat_completions, ["POST"]),
    ("/v1/completions", handlers.completions, ["POST"]),
    ("/v1/responses", handlers.responses, ["POST"]),
    ("/v1/responses/{response_id}", handlers.stored_response, ["GET"]),
    ("/v1/responses/{response_id}/cancel", handlers.stored_response, ["POST"]),
    ("/v1/messages", handlers.messages, ["POST"]),
    ("/v1/messages/count_tokens", handlers.count_tokens, ["POST"]),
    ("/tokenize", handlers.tokenize, ["POST"]),
    ("/v1/models", handlers.list_models, ["GET"]),
    ("/health", handlers.health, ["GET"]),
    ("/version", handlers.version, ["GET"]),
    ("/metrics", handlers.metrics, ["GET"]),
)


def create_sim_app(config: SimConfig | None = None) -> Starlette:
    """A new simulator app with its own engine, scheduler and metrics registry."""
    config = config or SimConfig()

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        logger.info(
            "dspark-sim: SIMULATOR, not a real vLLM (no GPU, no model) serving %r as vLLM %s: slots=%d "
            "decode_tps=%g k=%d acceptance=%g prefill_tps=%g reasoning_parser=%s seed=%d",
            config.served_model_name,
            config.version,
            config.slots,
            config.decode_tps,
            config.k,
            config.acceptance,
            config.prefill_tps,
            config.reasoning_parser,
            config.seed,
        )
        if config.trace_file:
            logger.info("dspark-sim: tracing every sequence to %s", config.trace_file)
        if _app.state.sim.publisher is not None:
            _app.state.sim.publisher.start()
        try:
            yield
        finally:
            _app.state.sim.close()

    app = Starlette(
        routes=[
            _route(path, endpoint, methods)
            for path, endpoint, methods in ROUTES
            if config.tokenize_route or path != "/tokenize"
        ],
        middleware=[Middleware(SimulatorMiddleware)],
        exception_handlers={SimError: sim_error_handler, HTTPException: http_error_handler},
        lifespan=lifespan,
    )
    app.state.sim = SimState.build(config)
    return app


def _route(path: str, endpoint: Callable[[Request], Awaitable[Response]], methods: list[str]) -> Route:
    """A route answering exactly ``methods``, as FastAPI's (and vLLM's) do: Starlette's ``Route`` adds
    HEAD to every GET route, so ``HEAD /health`` would answer 200 where vLLM answers 405."""
    route = Route(path, endpoint, methods=methods)
    route.methods = set(methods)
    return route


async def http_error_handler(_request: Request, exc: Exception) -> Response:
    """Router errors (404 unknown path, 405 wrong method) as FastAPI renders them, which is what vLLM
    sends: ``{"detail": "Not Found"}`` with the exception's headers (``Allow`` on a 405)."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


class SimulatorMiddleware:
    """Pure ASGI: labels every response ``x-dspark-simulator: 1``; a ``SimulatedCrash`` ends the
    request without completing the response, so the server closes the connection mid-body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_labelled(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), SIMULATOR_HEADER]}
            await send(message)

        try:
            await self.app(scope, receive, send_labelled)
        except SimulatedCrash as exc:
            logger.warning("dspark-sim: cutting the connection as asked (%s)", exc)
        except BaseExceptionGroup as group:
            crash, rest = group.split(SimulatedCrash)
            if rest is not None:
                raise
            logger.warning("dspark-sim: cutting the connection as asked (%s)", crash)
