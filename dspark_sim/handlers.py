"""Route handlers: parse at the edge, validate, inject faults, run, return.

Generation handlers run under :func:`until_disconnect`, so a client that goes away while its request
stalls, waits for a slot or decodes (non-stream) cancels the work; once a stream's response has
started, ``ClosingStreamingResponse`` takes over that job.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from dspark_common import json_codec
from dspark_common.asgi import ClientDisconnectedError, unless_disconnected
from dspark_sim.closing import ClosingStreamingResponse

from . import render, render_messages, render_responses, streams
from .config import SimConfig
from .errors import SimError
from .faults import Faults, parse_faults
from .protocol import ChatRequest, CompletionRequest, Prompt, TokenizeRequest, parse_body
from .protocol_messages import CountTokensRequest, MessagesRequest
from .protocol_responses import ResponsesRequest
from .sequence import Sequence
from .state import SimState
from .text import build_output, derive_seed
from .tools import new_call_id, scripted_call

SSE_MEDIA_TYPE = "text/event-stream"
#: ``owned_by`` of every model card: how a client (``dspark-gateway proof``/``bench``) tells the
#: simulator from a real vLLM (``"vllm"``), directly or through the gateway, which passes cards on.
SIMULATOR_OWNED_BY = "dspark-sim"
#: The longest ``cache_salt`` vLLM takes (vLLM 0.32 ``validate_cache_salt``).
MAX_SALT = 128


class FastJSONResponse(JSONResponse):
    """``JSONResponse`` encoded by :mod:`dspark_common.json_codec` (orjson): the same compact UTF-8 bytes as
    Starlette's ``json.dumps`` up to float spelling (a NaN would be ``null`` where Starlette refuses
    it; the simulator writes none), several times faster on a completion body."""

    def render(self, content: Any) -> bytes:
        """``content`` as compact JSON bytes."""
        return json_codec.dumps(content)


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    return await _answer(request, ChatRequest, _chat)


async def completions(request: Request) -> Response:
    """``POST /v1/completions`` (raw text, no reasoning split, as in vLLM)."""
    return await _answer(request, CompletionRequest, _completion)


async def responses(request: Request) -> Response:
    """``POST /v1/responses`` (OpenAI Responses API)."""
    return await _answer(request, ResponsesRequest, _responses)


async def messages(request: Request) -> Response:
    """``POST /v1/messages`` (Anthropic Messages; any query string, e.g. Claude Code's
    ``?beta=true``). A body that fails validation answers vLLM's app-wide OpenAI-shaped 400; errors
    after that are Anthropic-shaped, as vLLM's router renders them."""
    return await _answer(request, MessagesRequest, _anthropic(_messages))


async def stored_response(request: Request) -> Response:
    """``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``: the stored answer (a finished
    response: cancel changes nothing), else 404."""
    sim: SimState = request.app.state.sim
    response_id = request.path_params["response_id"]
    if response_id not in sim.stored:
        raise _not_stored(response_id)
    return Response(sim.stored[response_id], media_type="application/json")


async def count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the prompt estimate ``/v1/messages`` would report."""
    return await _answer(request, CountTokensRequest, _anthropic(_count_tokens))


async def _count_tokens(request: Request, body: CountTokensRequest) -> Response:
    sim: SimState = request.app.state.sim
    config = sim.config
    _check_model(config, body.model)
    prompt = body.to_prompt()
    _check_length(config, prompt.tokens, None)
    async with _counting(sim, prompt.tokens):
        return FastJSONResponse(render_messages.count_tokens_body(prompt.tokens))


async def tokenize(request: Request) -> Response:
    """``POST /tokenize``: ``{"count", "max_model_len", "tokens"}`` (the simulated tokenizer's ids,
    :mod:`dspark_sim.tokens`)."""
    return await _answer(request, TokenizeRequest, _tokenize)


async def _tokenize(request: Request, body: TokenizeRequest) -> Response:
    sim: SimState = request.app.state.sim
    config = sim.config
    _check_model(config, body.model)
    ids = body.to_prompt().token_ids()
    async with _counting(sim, len(ids)):
        answer = {"count": len(ids), "max_model_len": config.max_model_len, "tokens": ids}
        data = orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)  # the ids' array, as JSON numbers
        return Response(data, media_type="application/json")


def _priority(body: BaseModel) -> Any:
    """The request's ``priority`` (vLLM's field; 0 when absent), as sent: :func:`_prepare` checks it."""
    return (body.model_extra or {}).get("priority", 0)


def _cache_salt(body: BaseModel) -> Any:
    """The request's ``cache_salt`` (vLLM's field; None when absent), as sent: :func:`_prepare` checks it."""
    return (body.model_extra or {}).get("cache_salt")


def _counting(sim: SimState, tokens: int) -> contextlib.AbstractAsyncContextManager[None]:
    """A prompt count of ``tokens`` as the metrics see it, taking the tokenizer's time."""
    tps = sim.config.tokenize_tps
    return sim.metrics.counting(tokens / tps if tps else 0.0)


BodyT = TypeVar("BodyT", bound=BaseModel)
Work = Callable[[Request, BodyT], Coroutine[Any, Any, Response]]


async def _answer(request: Request, model: type[BodyT], work: Work[BodyT]) -> Response:
    """The body parsed into ``model`` (400 otherwise), then ``work`` run until the client leaves; a
    client gone before its body arrived gets a 499 (nothing to run, nothing to log)."""
    try:
        body = parse_body(await request.body(), model)
    except ClientDisconnect:
        return Response(status_code=499)
    return await until_disconnect(request, work(request, body))


def _anthropic(work: Work[BodyT]) -> Work[BodyT]:
    """``work`` whose errors answer in Anthropic's shape, as vLLM's Anthropic router renders them."""

    async def answered(request: Request, body: BodyT) -> Response:
        try:
            return await work(request, body)
        except SimError as exc:
            return FastJSONResponse(render_messages.error_body(exc), status_code=exc.status)

    return answered


async def list_models(request: Request) -> JSONResponse:
    """``GET /v1/models`` in vLLM's shape."""
    sim: SimState = request.app.state.sim
    config = sim.config
    card = {
        "id": config.served_model_name,
        "object": "model",
        "created": sim.started,
        "owned_by": SIMULATOR_OWNED_BY,
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
    model = _check_model(sim.config, body.model)
    gen, faults = await _prepare(
        request,
        body.to_prompt(),
        envelope_id=f"chatcmpl-{_request_id(request)}",
        model=model,
        max_tokens=body.token_limit,
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        priority=_priority(body),
        cache_salt=_cache_salt(body),
        include_usage=body.include_usage,
        continuous_usage=body.continuous_usage,
    )
    finish_reason = render.chat_finish_reason(gen.output, forced=body.forced_tool is not None)
    if body.stream:
        return _stream(streams.sse_frames(streams.chat_events(sim.engine, gen, finish_reason)), faults)
    await streams.run_to_end(sim.engine, gen)
    return FastJSONResponse(
        render.chat_response(
            gen.envelope,
            gen.output,
            split=gen.split_reasoning,
            prompt_tokens=gen.seq.prompt_tokens,
            finish_reason=finish_reason,
            call_id=gen.call_id,
            metrics=gen.metrics(),
            cached_tokens=gen.seq.cached_tokens,
        )
    )


async def _completion(request: Request, body: CompletionRequest) -> Response:
    sim: SimState = request.app.state.sim
    model = _check_model(sim.config, body.model)
    gen, faults = await _prepare(
        request,
        body.to_prompt(),
        envelope_id=f"cmpl-{_request_id(request)}",
        model=model,
        max_tokens=body.token_limit,
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        priority=_priority(body),
        cache_salt=_cache_salt(body),
        include_usage=body.include_usage,
        continuous_usage=body.continuous_usage,
        prompt_param="prompt",
        split=False,
    )
    if body.stream:
        return _stream(streams.sse_frames(streams.completion_events(sim.engine, gen)), faults)
    await streams.run_to_end(sim.engine, gen)
    return FastJSONResponse(
        render.completion_response(
            gen.envelope,
            gen.output,
            prompt_tokens=gen.seq.prompt_tokens,
            metrics=gen.metrics(),
            cached_tokens=gen.seq.cached_tokens,
        )
    )


async def _responses(request: Request, body: ResponsesRequest) -> Response:
    sim: SimState = request.app.state.sim
    model = _check_model(sim.config, body.model)
    if body.background and body.store:
        raise SimError(
            400,
            "This vLLM engine does not support `store=True` and therefore does not support the "
            "background mode. To enable these features, set the environment variable "
            "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.",
            param="background",
            type_="invalid_request_error",
        )
    if body.previous_response_id is not None and body.previous_response_id not in sim.stored:
        raise _not_stored(body.previous_response_id)
    gen, faults = await _prepare(
        request,
        body.to_prompt(),
        envelope_id=body.request_id or render_responses.new_response_id(),
        model=model,
        max_tokens=body.max_output_tokens,
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        priority=_priority(body),
        cache_salt=_cache_salt(body),
        prompt_param="input",
        limit_param="max_output_tokens",
    )
    base = render_responses.skeleton(body, gen.envelope, gen.max_tokens)
    if body.stream:
        events = streams.dialect_events(sim.engine, gen, render_responses.ResponsesStream(base, gen))
        return _stream(streams.named_sse_frames(events), faults)
    await streams.run_to_end(sim.engine, gen)
    answer = FastJSONResponse(render_responses.finished(base, gen, render_responses.output_items(gen)))
    if body.store and sim.config.responses_store:
        sim.stored[gen.envelope.id] = bytes(answer.body)
    return answer


async def _messages(request: Request, body: MessagesRequest) -> Response:
    sim: SimState = request.app.state.sim
    model = _check_model(sim.config, body.model)
    gen, faults = await _prepare(
        request,
        body.to_prompt(),
        envelope_id=f"chatcmpl-{_request_id(request)}",  # vLLM answers with the chat completion's id
        model=model,
        max_tokens=body.max_tokens,
        seed=None,
        ignore_eos=False,
        cache_salt=_cache_salt(body),
    )
    if body.stream:
        events = streams.dialect_events(sim.engine, gen, render_messages.MessagesStream(gen))
        return _stream(streams.named_sse_frames(events), faults)
    await streams.run_to_end(sim.engine, gen)
    return FastJSONResponse(render_messages.message_body(gen))


async def _prepare(
    request: Request,
    prompt: Prompt,
    *,
    envelope_id: str,
    model: str,
    max_tokens: int | None,
    seed: int | None,
    ignore_eos: bool,
    include_usage: bool = False,
    continuous_usage: bool = False,
    prompt_param: str = "messages",
    limit_param: str = "max_tokens",
    split: bool | None = None,
    priority: Any = 0,
    cache_salt: Any = None,
) -> tuple[streams.Generation, Faults]:
    """What every generation route does once its body is read: check the length, read the
    directives, stall or fail as they ask, script the output and build its engine sequence.
    ``split`` (reasoning into its own field) defaults to the server's reasoning parser."""
    sim: SimState = request.app.state.sim
    config = sim.config
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise SimError(400, "priority must be an integer", param="priority")
    if priority != 0 and config.scheduling_policy != "priority":
        raise SimError(400, "priority other than 0 needs --scheduling-policy priority", param="priority")
    if cache_salt is not None and not (isinstance(cache_salt, str) and 0 < len(cache_salt) <= MAX_SALT):
        # vLLM 0.32 validate_cache_salt
        raise SimError(400, f"cache_salt must be a string of 1 to {MAX_SALT} characters", param="cache_salt")
    limit = _check_length(config, prompt.tokens, max_tokens, prompt_param, limit_param)
    faults = parse_faults(prompt.instruction)
    if faults.ignore_max_tokens:
        limit = config.max_model_len - prompt.tokens
    call = scripted_call(prompt.instruction, prompt.tools)
    await _apply_faults(faults)
    output = build_output(
        seed=derive_seed(config.seed, seed),
        request_key=prompt.key,
        instruction=prompt.instruction,
        thinking=prompt.thinking,
        max_tokens=limit,
        ignore_eos=ignore_eos,
        reasoning_tokens=config.reasoning_tokens,
        content_tokens=config.content_tokens,
        call=call,
        tool_result=prompt.tool_result,
        end_marker=config.reasoning_end,
    )
    envelope = render.Envelope(id=envelope_id, created=int(time.time()), model=model)
    step_seed = derive_seed(config.seed, seed, "steps", prompt.key, max_tokens)
    seq = Sequence(
        request_id=f"{envelope_id}-{uuid.uuid4().hex[:8]}",
        prompt_tokens=prompt.tokens,
        prompt_ids=prompt.token_ids() if config.prefix_caching else None,
        output_tokens=len(output),
        finish_reason=output.finish_reason,
        rng=random.Random(step_seed),
        decode_tps=faults.decode_tps,
        priority=priority,
        cache_salt=cache_salt,
    )
    gen = streams.Generation(
        envelope=envelope,
        seq=seq,
        output=output,
        split_reasoning=config.reasoning_parser if split is None else split,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        include_metrics=config.per_request_metrics,  # like vLLM 0.32: the server flag decides
        k=config.k,
        max_tokens=limit,
        call_id=new_call_id() if output.call is not None else None,
    )
    return gen, faults


def _not_stored(response_id: str) -> SimError:
    """vLLM's answer for a response id it has not stored: with its store off (the default, no
    ``VLLM_ENABLE_RESPONSES_API_STORE``) that is every id, ``store: true`` or not."""
    return SimError(
        404,
        f"Response with id '{response_id}' not found.",
        param="response_id",
        type_="invalid_request_error",
    )


def _request_id(request: Request) -> str:
    """The client's ``x-request-id``, or a fresh one (vLLM's ``_base_request_id``)."""
    return request.headers.get("x-request-id") or uuid.uuid4().hex


def _stream(frames: streams.Frames, faults: Faults) -> Response:
    """SSE response for ``frames``, cut short when ``#sim:die_after`` asks for it."""
    if faults.die_after is not None:
        frames = streams.cut_after(frames, faults.die_after)
    return ClosingStreamingResponse(frames, media_type=SSE_MEDIA_TYPE)


def _check_model(config: SimConfig, requested: str | None) -> str:
    """The served name, or a 404 like vLLM's for any other model."""
    if requested is None or requested == config.served_model_name:
        return config.served_model_name
    raise SimError(404, f"The model `{requested}` does not exist.", param="model")


def _check_length(
    config: SimConfig,
    prompt_tokens: int,
    max_tokens: int | None,
    param: str = "messages",
    limit_param: str = "max_tokens",
) -> int:
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
            param=limit_param,
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
