"""``create_sim_app(config)``: the simulator's FastAPI app, its route table and middleware.

All state is built here and kept on ``app.state.sim``; nothing is created at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import handlers
from .config import SimConfig
from .errors import SimError, SimulatedCrash, sim_error_handler
from .state import SimState

logger = logging.getLogger("gateway.sim")

SIMULATOR_HEADER = (b"x-dspark-simulator", b"1")

ROUTES = (
    ("/v1/chat/completions", handlers.chat_completions, ["POST"]),
    ("/v1/completions", handlers.completions, ["POST"]),
    ("/v1/models", handlers.list_models, ["GET"]),
    ("/health", handlers.health, ["GET"]),
    ("/version", handlers.version, ["GET"]),
    ("/metrics", handlers.metrics, ["GET"]),
)


def create_sim_app(config: SimConfig | None = None) -> FastAPI:
    """A new simulator app with its own engine, scheduler and metrics registry."""
    config = config or SimConfig()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
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
        try:
            yield
        finally:
            _app.state.sim.close()

    app = FastAPI(
        title="dspark-sim (vLLM simulator)",
        version=config.version,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.sim = SimState.build(config)
    for path, endpoint, methods in ROUTES:
        app.add_api_route(path, endpoint, methods=methods, include_in_schema=False)
    app.add_exception_handler(SimError, sim_error_handler)
    app.add_middleware(SimulatorMiddleware)
    return app


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
