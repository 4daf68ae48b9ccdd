"""Route handlers: parse at the edge, validate, inject faults, run, return.

Generation handlers run under :func:`until_disconnect`, so a client that goes away while its request
stalls, waits for a slot or decodes (non-stream) cancels the work; once a stream's response has
started, ``ClosingStreamingResponse`` takes over that job.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Coroutine
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from gateway import json_codec
from gateway.asgi import ClientDisconnectedError, ClosingStreamingResponse, unless_disconnected

from . import render, streams
from .config import SimConfig
from .engine import Sequence
from .errors import SimError
from .faults import Faults, parse_faults
from .protocol import ChatRequest, CompletionRequest, parse_body
from .state import SimState
from .text import THINK_START, Output, build_output, derive_seed, estimate_prompt_tokens

SSE_MEDIA_TYPE = "text/event-stream"


class FastJSONResponse(JSONResponse):
    """``JSONResponse`` encoded by :mod:`gateway.json_codec` (orjson): the same compact UTF-8 bytes as
    Starlette's ``json.dumps`` up to float spelling (a NaN would be ``null`` where Starlette refuses
    it; the simulator writes none), several times faster on a completion body."""

    def render(self, content: Any) -> bytes:
        """``content`` as compact JSON bytes."""
        return json_codec.dumps(content)


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    try:
        body = parse_body(await request.body(), ChatRequest)
    except ClientDisconnect:  # gone before its body arrived: nothing to run, nothing to log
        return Response(status_code=499)
    return await until_disconnect(request, _chat(request, body))


async def completions(request: Request) -> Response:
    """``POST /v1/completions`` (raw text, no reasoning split, as in vLLM)."""
    try:
        body = parse_body(await request.body(), CompletionRequest)
    except ClientDisconnect:
        return Response(status_code=499)
    return await until_disconnect(request, _completion(request, body))


async def list_models(request: Request) -> JSONResponse:
    """``GET /v1/models`` in vLLM's shape."""
    sim: SimState = request.app.state.sim
    config = sim.config
    card = {
        "id": config.served_model_name,
        "object": "model",
        "created": sim.started,
        "owned_by": "dspark-sim",
        "root": config.model_root,
        "parent": None,
        "max_model_len": config.max_model_len,
    }
    return JSONResponse({"object": "list", "data": [card]})


async def health(_request: Request) -> Response:
    """``GET /health``: 200, empty body."""
    return Response(status_code=200)


async def version(request: Request) -> JSONResponse:
    """``GET /version``."""
    return JSONResponse({"version": request.app.state.sim.config.version})


async def metrics(request: Request) -> Response:
    """``GET /metrics``: Prometheus text with vLLM's metric names."""
    return Response(request.app.state.sim.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def _chat(request: Request, body: ChatRequest) -> Response:
    sim: SimState = request.app.state.sim
    config = sim.config
    model = _check_model(config, body.model)
    texts = [message.text() for message in body.messages]
    prompt_tokens = estimate_prompt_tokens(texts)
    limit = _check_length(config, prompt_tokens, body.token_limit, "messages")
    faults = parse_faults(body.last_user_text())
    await _apply_faults(faults)
    key = json.dumps([[message.role, text] for message, text in zip(body.messages, texts, strict=True)])
    output = build_output(
        seed=derive_seed(config.seed, body.seed),
        request_key=key,
        instruction=body.last_user_text(),
        thinking=body.thinking,
        max_tokens=limit,
        ignore_eos=body.ignore_eos,
        reasoning_tokens=config.reasoning_tokens,
        content_tokens=config.content_tokens,
    )
    gen = _generation(
        sim,
        request,
        "chatcmpl",
        model,
        key,
        prompt_tokens,
        output,
        body,
        faults,
        split=config.reasoning_parser,
    )
    if body.stream:
        return _stream(streams.chat_events(sim.engine, gen), faults)
    await streams.run_to_end(sim.engine, gen)
    return FastJSONResponse(
        render.chat_response(
            gen.envelope,
            output,
            split=gen.split_reasoning,
            prompt_tokens=prompt_tokens,
            metrics=gen.metrics(),
        )
    )


async def _completion(request: Request, body: CompletionRequest) -> Response:
    sim: SimState = request.app.state.sim
    config = sim.config
    model = _check_model(config, body.model)
    prompt = body.prompt_text
    prompt_tokens = estimate_prompt_tokens([prompt], per_message=0, fixed=1)
    limit = _check_length(config, prompt_tokens, body.token_limit, "prompt")
    faults = parse_faults(prompt)
    await _apply_faults(faults)
    output = build_output(
        seed=derive_seed(config.seed, body.seed),
        request_key=prompt,
        instruction=prompt,
        thinking=prompt.rstrip().endswith(THINK_START),  # a raw prompt thinks only inside an open <think>
        max_tokens=limit,
        ignore_eos=body.ignore_eos,
        reasoning_tokens=config.reasoning_tokens,
        content_tokens=config.content_tokens,
    )
    gen = _generation(sim, request, "cmpl", model, prompt, prompt_tokens, output, body, faults, split=False)
    if body.stream:
        return _stream(streams.completion_events(sim.engine, gen), faults)
    await streams.run_to_end(sim.engine, gen)
    return FastJSONResponse(
        render.completion_response(gen.envelope, output, prompt_tokens=prompt_tokens, metrics=gen.metrics())
    )


def _generation(
    sim: SimState,
    request: Request,
    prefix: str,
    model: str,
    key: str,
    prompt_tokens: int,
    output: Output,
    body: ChatRequest | CompletionRequest,
    faults: Faults,
    *,
    split: bool,
) -> streams.Generation:
    """Build the envelope and engine sequence for one request."""
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
    envelope = render.Envelope(id=f"{prefix}-{request_id}", created=int(time.time()), model=model)
    step_seed = derive_seed(sim.config.seed, body.seed, "steps", key, body.token_limit)
    seq = Sequence(
        request_id=f"{prefix}-{request_id}-{uuid.uuid4().hex[:8]}",
        prompt_tokens=prompt_tokens,
        output_tokens=len(output),
        finish_reason=output.finish_reason,
        rng=random.Random(step_seed),
        decode_tps=faults.decode_tps,
    )
    return streams.Generation(
        envelope=envelope,
        seq=seq,
        output=output,
        split_reasoning=split,
        include_usage=body.include_usage,
        continuous_usage=body.continuous_usage,
        include_metrics=sim.config.per_request_metrics,  # like vLLM 0.32: the server flag decides
        k=sim.config.k,
    )


def _stream(events: streams.Events, faults: Faults) -> Response:
    """SSE response for ``events``, cut short when ``#sim:die_after`` asks for it."""
    frames = streams.sse_frames(events)
    if faults.die_after is not None:
        frames = streams.cut_after(frames, faults.die_after)
    return ClosingStreamingResponse(frames, media_type=SSE_MEDIA_TYPE)


def _check_model(config: SimConfig, requested: str | None) -> str:
    """The served name, or a 404 like vLLM's for any other model."""
    if requested is None or requested == config.served_model_name:
        return config.served_model_name
    raise SimError(404, f"The model `{requested}` does not exist.", param="model")


def _check_length(config: SimConfig, prompt_tokens: int, max_tokens: int | None, param: str) -> int:
    """400 (vLLM's wording) when the prompt leaves no room in the context, or prompt + max_tokens
    exceeds it; returns the effective output cap, tokens (vLLM's default: what is left)."""
    window = config.max_model_len
    if prompt_tokens >= window:
        raise SimError(
            400,
            f"This model's maximum context length is {window} tokens. However, your request "
            f"has {prompt_tokens} input tokens. Please reduce the length of the input.",
            param=param,
        )
    if max_tokens is not None and prompt_tokens + max_tokens > window:
        raise SimError(
            400,
            f"This model's maximum context length is {window} tokens. However, you "
            f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the input, "
            f"{max_tokens} in the completion). Please reduce the length of the input or "
            "completion.",
            param="max_tokens",
        )
    return max_tokens if max_tokens is not None else window - prompt_tokens


async def _apply_faults(faults: Faults) -> None:
    """Stall, then fail with the requested status (both before the request reaches the engine)."""
    if faults.stall_s:
        await asyncio.sleep(faults.stall_s)
    if faults.status is not None:
        raise SimError(faults.status, f"simulated failure (#sim:status={faults.status})")


async def until_disconnect(request: Request, work: Coroutine[Any, Any, Response]) -> Response:
    """Run ``work``; if the client disconnects first, cancel it (its ``finally`` blocks free the
    queue place or slot) and return a 499 nobody will read."""
    try:
        return await unless_disconnected(request.receive, lambda: work)
    except ClientDisconnectedError:
        return Response(status_code=499)
