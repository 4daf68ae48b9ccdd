"""JSON objects the simulator sends, shaped like vLLM 0.32's (pure builders, no I/O).

Chat stream chunks carry only the delta fields that are set, like vLLM (``exclude_unset``). With the
reasoning parser, a step that crosses ``</think>`` yields one delta with both ``reasoning`` and
``content`` (as vLLM's deepseek parsers do); a step whose only token is ``</think>`` yields
``{"content": ""}`` so that every engine step is exactly one chunk (vLLM would skip that chunk).
A tool call streams as vLLM's parser engine sends it (``_emit_name_delta`` and ``_handle_arg_chunk``
in vllm/parser/engine/parser_engine.py, one delta per index): the step holding its first token
carries ``{"id", "type": "function", "index": 0, "function": {"name", "arguments"}}``, later steps
``{"index": 0, "function": {"arguments"}}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspark_common import json_codec

from .sequence import Sequence, Step
from .text import Output

ROLE_DELTA = {"role": "assistant", "content": ""}


@dataclass(frozen=True, slots=True)
class Envelope:
    """Fields every object of one response repeats."""

    id: str
    created: int
    """Unix time, s."""
    model: str


def sse(payload: dict[str, Any] | str) -> bytes:
    """One SSE event: ``data: <compact json>\\n\\n`` (or the literal string, for ``[DONE]``)."""
    if isinstance(payload, str):
        return f"data: {payload}\n\n".encode()
    return b"data: " + json_codec.dumps(payload) + b"\n\n"


def sse_event(payload: dict[str, Any]) -> bytes:
    """One SSE event named after the payload's ``type``: ``event: <type>\ndata: <json>\n\n``, as
    vLLM's Responses (``_convert_stream_to_sse_events``) and Anthropic (``wrap_data_with_event``)
    routers frame them."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + json_codec.dumps(payload) + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI usage object, tokens (``cached_tokens``: of the prompt, found in the prefix cache)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def chat_delta(output: Output, step: Step, *, split: bool, call_id: str | None = None) -> dict[str, Any]:
    """The delta for one engine step: split into reasoning/content by the parser (or raw content),
    the call's part as ``tool_calls``."""
    span = output.span(step.start, step.end, split=split)
    delta: dict[str, Any] = {}
    if span.reasoning:
        delta["reasoning"] = span.reasoning
    if span.content or not (span.reasoning or span.arguments):
        delta["content"] = span.content
    if output.call is not None and span.arguments:
        if span.opens_call:
            function = {"name": output.call.name, "arguments": span.arguments}
            delta["tool_calls"] = [{"id": call_id, "type": "function", "index": 0, "function": function}]
        else:
            delta["tool_calls"] = [{"index": 0, "function": {"arguments": span.arguments}}]
    return delta


def chat_finish_reason(output: Output, *, forced: bool) -> str:
    """What chat reports: the engine's reason, but "tool_calls" for a call that ``tool_choice`` did
    not force (vLLM: "tool_calls" for auto or required, "stop" for a named function)."""
    if output.call is not None and output.finish_reason == "stop" and not forced:
        return "tool_calls"
    return output.finish_reason


def chat_chunk(
    env: Envelope,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage_: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice (``usage`` only with continuous usage stats)."""
    chunk: dict[str, Any] = {
        "id": env.id,
        "object": "chat.completion.chunk",
        "created": env.created,
        "model": env.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage_ is not None:
        chunk["usage"] = usage_
    return chunk


def completion_chunk(
    env: Envelope, text: str, finish_reason: str | None = None, usage_: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A streamed ``text_completion`` object with one choice."""
    chunk: dict[str, Any] = {
        "id": env.id,
        "object": "text_completion",
        "created": env.created,
        "model": env.model,
        "choices": [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        ],
    }
    if usage_ is not None:
        chunk["usage"] = usage_
    return chunk


def usage_chunk(
    env: Envelope, object_: str, usage_: dict[str, Any], metrics: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The final stream chunk: ``choices: []`` + usage (+ per-request ``metrics`` when asked)."""
    chunk: dict[str, Any] = {
        "id": env.id,
        "object": object_,
        "created": env.created,
        "model": env.model,
        "choices": [],
        "usage": usage_,
    }
    if metrics is not None:
        chunk["metrics"] = metrics
    return chunk


def chat_response(
    env: Envelope,
    output: Output,
    *,
    split: bool,
    prompt_tokens: int,
    finish_reason: str,
    call_id: str | None = None,
    metrics: dict[str, Any] | None = None,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """A non-streamed ``chat.completion``; ``content`` is null when the parser left none."""
    span = output.span(split=split)
    message: dict[str, Any] = {"role": "assistant", "content": span.content or None}
    message["reasoning"] = span.reasoning or None
    if not (span.reasoning or span.content or output.call):
        message["content"] = ""
    message["tool_calls"] = []
    if output.call is not None:
        function = {"name": output.call.name, "arguments": span.arguments}
        message["tool_calls"] = [{"id": call_id, "type": "function", "function": function}]
    body: dict[str, Any] = {
        "id": env.id,
        "object": "chat.completion",
        "created": env.created,
        "model": env.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": usage(prompt_tokens, len(output), cached_tokens),
        "prompt_logprobs": None,
    }
    if metrics is not None:
        body["metrics"] = metrics
    return body


def completion_response(
    env: Envelope,
    output: Output,
    *,
    prompt_tokens: int,
    metrics: dict[str, Any] | None = None,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """A non-streamed ``text_completion``: raw text, ``</think>`` included."""
    body: dict[str, Any] = {
        "id": env.id,
        "object": "text_completion",
        "created": env.created,
        "model": env.model,
        "choices": [
            {
                "index": 0,
                "text": output.raw(),
                "logprobs": None,
                "finish_reason": output.finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
        ],
        "usage": usage(prompt_tokens, len(output), cached_tokens),
    }
    if metrics is not None:
        body["metrics"] = metrics
    return body


def request_metrics(seq: Sequence, k: int) -> dict[str, Any]:
    """vLLM 0.32's per-request ``metrics`` object for a finished sequence.

    Times in ms, as vLLM 0.32 computes them (``vllm/entrypoints/generate/base/serving.py``):
    ``queue_time_ms`` arrival -> scheduled, ``time_to_first_token_ms`` scheduled -> first token (the
    queue not included), ``generation_time_ms`` first -> last token, ``mean_itl_ms`` mean gap between
    engine steps, ``tokens_per_second`` completion_tokens / (scheduled -> last token). Speculative
    counts cover the drafting steps (all but the prefill step); ``mean_acceptance_length`` = 1 +
    accepted / spec steps; ``acceptance_histogram[i]`` = spec steps that accepted exactly i drafts.
    """
    arrival = seq.arrival
    first = seq.first_token if seq.first_token is not None else arrival
    last = seq.last_token if seq.last_token is not None else first
    scheduled = seq.scheduled if seq.scheduled is not None else arrival
    gaps = [b - a for a, b in zip(seq.step_times, seq.step_times[1:], strict=False)]
    generation_s, inference_s = last - first, last - scheduled
    spec = [step for step in seq.steps if step.drafted]
    accepted = sum(step.accepted for step in spec)
    drafted = sum(step.drafted for step in spec)
    histogram = [0] * (k + 1)
    for step in spec:
        histogram[min(step.accepted, k)] += 1
    return {
        "time_to_first_token_ms": round((first - scheduled) * 1000, 3),
        "generation_time_ms": round(generation_s * 1000, 3),
        "queue_time_ms": round((scheduled - arrival) * 1000, 3),
        "mean_itl_ms": round(sum(gaps) / len(gaps) * 1000, 3) if gaps else 0.0,
        "tokens_per_second": round(seq.generated / inference_s, 3) if inference_s > 0 else 0.0,
        "speculative_decoding": {
            "mean_acceptance_length": round(1 + accepted / len(spec), 4) if spec else 1.0,
            "draft_acceptance_rate": round(accepted / drafted, 4) if drafted else 0.0,
            "acceptance_histogram": histogram,
            "num_spec_steps": len(spec),
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": drafted,
            "num_spec_tokens": k,
            "per_step_accepted": [step.accepted for step in spec],
            "per_step_drafted": [step.drafted for step in spec],
        },
    }
