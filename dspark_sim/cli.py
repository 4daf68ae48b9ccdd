"""``dspark-gateway sim``: the simulator's command in the one command line (``python -m dspark_sim``
takes every :class:`~dspark_sim.config.SimConfig` field as a flag; this one the common few)."""

from __future__ import annotations

from typing import Annotated

import typer


def sim(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port")] = 8000,
    host: Annotated[str, typer.Option(help="Bind address")] = "127.0.0.1",
    slots: Annotated[int, typer.Option(help="Simulated --max-num-seqs")] = 2,
    decode_tps: Annotated[float, typer.Option(help="Decode rate per sequence, tokens/s")] = 90.0,
    k: Annotated[int, typer.Option(help="Speculative draft tokens per step (DSpark K)")] = 5,
    acceptance: Annotated[float, typer.Option(help="Per-position draft acceptance probability")] = 0.7,
    seed: Annotated[int, typer.Option(help="RNG seed (output is deterministic per seed)")] = 0,
    served_model: Annotated[str, typer.Option(help="Served model name")] = "deepseek-v4-flash-0731",
    prefix_caching: Annotated[bool, typer.Option(help="Keep a prefix cache")] = True,
    block_size: Annotated[int, typer.Option(min=1, help="Tokens per KV block")] = 256,
    kv_cache_layout: Annotated[
        str, typer.Option(help="KV cache groups: single, or deepseek_v4 (DeepSeek-V4's hybrid layout)")
    ] = "single",
    kv_events_endpoint: Annotated[
        str | None, typer.Option(help="Publish KV cache events on this ZMQ endpoint (bound)")
    ] = None,
    kv_events_replay_endpoint: Annotated[
        str | None, typer.Option(help="Replay KV cache events on this ZMQ endpoint (bound)")
    ] = None,
) -> None:
    """Run the DeepSeek-V4 vLLM simulator (no model: scripted text, vLLM-shaped API and /metrics)."""
    from dspark_sim import SimConfig, run_sim

    config = SimConfig(
        served_model_name=served_model,
        slots=slots,
        decode_tps=decode_tps,
        k=k,
        acceptance=acceptance,
        seed=seed,
        prefix_caching=prefix_caching,
        block_size=block_size,
        kv_cache_layout=kv_cache_layout,
        kv_events_endpoint=kv_events_endpoint,
        kv_events_replay_endpoint=kv_events_replay_endpoint,
    )
    run_sim(config, host=host, port=port)
