"""``dspark-gateway serve``: the gateway, with the built-in simulator beside it when no upstream is set.

Flags override ``GATEWAY_*`` environment variables (they are passed to :class:`Settings` directly).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
import uvloop
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.cli.local import on_database
from gateway.cli.options import DatabaseOpt
from gateway.cli.settings import settings


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (GATEWAY_HOST)")] = None,
    port: Annotated[int | None, typer.Option(min=1, max=65535, help="Port (GATEWAY_PORT)")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="vLLM base URL (GATEWAY_UPSTREAM); none: built-in simulator")
    ] = None,
    served_model: Annotated[str | None, typer.Option(help="Served model name (GATEWAY_SERVED_MODEL)")] = None,
    slots: Annotated[int | None, typer.Option(help="Upstream slots = vLLM --max-num-seqs")] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Run the gateway. Without an upstream, starts the built-in simulator on loopback and says so."""
    config = settings(
        host=host,
        port=port,
        upstream=upstream,
        served_model=served_model,
        slots=slots,
        database_url=database_url,
    )
    # named, and opened once before anything starts: an unreachable database, or one at another
    # schema (`db upgrade`), is the command's one-line failure as for every local command
    on_database(config, _opened, create=True)
    from gateway.cli.serve import run_gateway  # the whole gateway: imported once the database opened

    uvloop.run(run_gateway(config, _simulator))  # libuv's loop: the relay's per-chunk socket work costs less


async def _opened(engine: AsyncEngine) -> None:
    """Nothing more to do with a database that opened."""


def _simulator(served_model: str, kv_events: str, kv_events_replay: str) -> Any:
    """The simulator's ASGI app serving ``served_model``, publishing its KV events on ``kv_events``
    (replayed on ``kv_events_replay``); its defaults otherwise."""
    from dspark_sim import SimConfig, create_sim_app

    return create_sim_app(
        SimConfig(
            served_model_name=served_model,
            kv_events_endpoint=kv_events,
            kv_events_replay_endpoint=kv_events_replay,
        )
    )
