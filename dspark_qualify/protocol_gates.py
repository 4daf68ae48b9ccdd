"""Gates on the wire protocol and reasoning: model listed, SSE framing, thinking on and off."""

from __future__ import annotations

import json
from typing import Any

from dspark_qualify.result import GateResult, ProofContext, Status, unsupported
from dspark_qualify.stream import reasoning_of
from dspark_qualify.urls import api_url

__all__ = [
    "gate_model_listed",
    "gate_reasoning_off",
    "gate_reasoning_on",
    "gate_stream_done_usage",
    "list_models",
]


def list_models(ctx: ProofContext) -> list[str]:
    """Ids from ``GET /models`` (raises on a non-2xx answer)."""
    response = ctx.http.get(api_url(ctx.base_url, "/models"), headers=ctx.auth)
    response.raise_for_status()
    return [m["id"] for m in response.json().get("data", [])]


def gate_model_listed(ctx: ProofContext) -> GateResult:
    """PASS when ``GET /models`` lists the model (or, with no ``--model``, lists one, which is then used)."""
    ids = list_models(ctx)
    if ctx.model is None:
        if not ids:
            return GateResult("model_listed", Status.FAIL, "GET /models lists no model")
        ctx.model = ids[0]
        return GateResult(
            "model_listed", Status.PASS, f"using the first listed model {ids[0]!r}", {"ids": ids}
        )
    if ctx.model in ids:
        return GateResult("model_listed", Status.PASS, f"{ctx.model!r} is listed", {"ids": ids})
    return GateResult("model_listed", Status.FAIL, f"{ctx.model!r} not in {ids}", {"ids": ids})


def gate_stream_done_usage(ctx: ProofContext) -> GateResult:
    """Raw SSE (httpx): PASS when the stream ends with ``data: [DONE]``, nothing after it, no error
    event, some text, and exactly one chunk carries ``usage`` (``stream_options.include_usage``)."""
    body = {
        "model": ctx.model,
        "messages": [{"role": "user", "content": "Count from 1 to 10."}],
        "max_tokens": min(ctx.max_tokens, 64),
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events: list[str] = []
    with ctx.http.stream(
        "POST", api_url(ctx.base_url, "/chat/completions"), json=body, headers=ctx.auth
    ) as r:
        if r.status_code != 200:
            r.read()
            return GateResult("stream_done_usage", Status.FAIL, f"HTTP {r.status_code}: {r.text[:300]}")
        events = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    problems: list[str] = []
    if not events or events[-1] != "[DONE]":
        problems.append(f"last event is {events[-1][:80] if events else 'missing'!r}, not [DONE]")
    if events.count("[DONE]") != 1:
        problems.append(f"{events.count('[DONE]')} [DONE] events")
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    usage = [c["usage"] for c in chunks if c.get("usage")]
    errors = [c["error"] for c in chunks if c.get("error")]
    text = "".join(_delta_text(c) for c in chunks)
    if len(usage) != 1:
        problems.append(f"{len(usage)} usage blocks (want exactly 1)")
    if errors:
        problems.append(f"error event: {errors[0]}")
    if not text:
        problems.append("no reasoning or content text")
    details = {"events": len(events), "usage": usage[-1] if usage else None}
    if problems:
        return GateResult("stream_done_usage", Status.FAIL, "; ".join(problems), details)
    return GateResult(
        "stream_done_usage", Status.PASS, f"{len(events)} events, one usage block, [DONE] last", details
    )


def _delta_text(chunk: dict[str, Any]) -> str:
    return "".join(
        (c.get("delta") or {}).get("content") or reasoning_of(c.get("delta"))
        for c in chunk.get("choices") or []
    )


def _reasoning_probe(ctx: ProofContext, effort: str) -> tuple[str, str]:
    """(reasoning, content) of a non-stream answer at ``reasoning_effort=effort``."""
    assert ctx.model is not None
    reply = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "What is 17 * 23 - 5? Give the final number."}],
        max_tokens=ctx.max_tokens,
        temperature=0,
        extra_body={"reasoning_effort": effort},
    )
    message = reply.choices[0].message
    return reasoning_of(message.model_extra), message.content or ""


def gate_reasoning_on(ctx: ProofContext) -> GateResult:
    """``reasoning_effort: low`` -> PASS when the answer carries non-empty reasoning."""
    try:
        reasoning, content = _reasoning_probe(ctx, "low")
    except Exception as exc:
        if (na := unsupported(exc, "reasoning_on")) is not None:
            return na
        raise
    details = {"reasoning_chars": len(reasoning), "content_chars": len(content)}
    if reasoning.strip():
        return GateResult("reasoning_on", Status.PASS, f"{len(reasoning)} characters of reasoning", details)
    return GateResult("reasoning_on", Status.FAIL, "no reasoning with reasoning_effort=low", details)


def gate_reasoning_off(ctx: ProofContext) -> GateResult:
    """``reasoning_effort: none`` -> PASS when there is no reasoning and the content is non-empty."""
    try:
        reasoning, content = _reasoning_probe(ctx, "none")
    except Exception as exc:
        if (na := unsupported(exc, "reasoning_off")) is not None:
            return na
        raise
    details = {"reasoning_chars": len(reasoning), "content_chars": len(content)}
    if reasoning.strip():
        return GateResult("reasoning_off", Status.FAIL, f"{len(reasoning)} characters of reasoning", details)
    if not content.strip():
        return GateResult("reasoning_off", Status.FAIL, "no reasoning but no content either", details)
    return GateResult(
        "reasoning_off", Status.PASS, f"no reasoning, {len(content)} characters of content", details
    )
