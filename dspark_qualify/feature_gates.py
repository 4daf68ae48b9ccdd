"""Gates on model features: native tool call, tool-result continuation, strict JSON schema, retrieval."""

from __future__ import annotations

import json
from typing import Any

from dspark_qualify.haystack import build_haystack
from dspark_qualify.result import GateResult, ProofContext, Status, unsupported
from dspark_qualify.schema import schema_errors

__all__ = [
    "WEATHER_SCHEMA",
    "WEATHER_TOOL",
    "gate_json_schema",
    "gate_retrieval",
    "gate_tool_call",
    "gate_tool_result",
]

WEATHER_TOOL: Any = {  # Any: the SDK's TypedDicts add nothing to a literal
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "temperature_c": {"type": "number"},
        "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow"]},
    },
    "required": ["city", "temperature_c", "conditions"],
    "additionalProperties": False,
}
_ASK_WEATHER: Any = {
    "role": "user",
    "content": "What is the weather in Paris right now? Use the get_weather tool.",
}
#: What the tool "returns" in the continuation gate; the answer must quote the temperature.
_TOOL_RESULT = {"city": "Paris", "temperature_c": 17, "conditions": "sleet"}


def _model(ctx: ProofContext) -> str:
    assert ctx.model is not None, "the model gate runs first"
    return ctx.model


def gate_tool_call(ctx: ProofContext) -> GateResult:
    """tools=[get_weather], tool_choice=auto -> PASS on a ``get_weather`` call whose arguments are a JSON
    object with a string ``city``."""
    try:
        reply = ctx.client.chat.completions.create(
            model=_model(ctx),
            messages=[_ASK_WEATHER],
            tools=[WEATHER_TOOL],
            tool_choice="auto",
            max_tokens=ctx.max_tokens,
            temperature=0,
        )
    except Exception as exc:
        if (na := unsupported(exc, "tool_call")) is not None:
            return na
        raise
    message = reply.choices[0].message
    calls = [c for c in message.tool_calls or [] if c.type == "function"]
    if not calls:
        return GateResult(
            "tool_call",
            Status.FAIL,
            f"no tool call (finish_reason={reply.choices[0].finish_reason!r})",
            {"content": (message.content or "")[:200]},
        )
    call = calls[0]
    try:
        args = json.loads(call.function.arguments)
    except json.JSONDecodeError:
        return GateResult(
            "tool_call", Status.FAIL, f"arguments are not JSON: {call.function.arguments[:200]!r}"
        )
    details = {"name": call.function.name, "arguments": args, "id": call.id}
    if (
        call.function.name != "get_weather"
        or not isinstance(args, dict)
        or not isinstance(args.get("city"), str)
    ):
        return GateResult("tool_call", Status.FAIL, f"unexpected call {call.function.name}({args})", details)
    return GateResult("tool_call", Status.PASS, f"get_weather({json.dumps(args)})", details)


def gate_tool_result(ctx: ProofContext) -> GateResult:
    """Send an assistant tool call and its result back -> PASS when the answer is content (no new tool
    call) that quotes the tool's temperature (17). The call is synthetic, so this gate does not depend
    on the tool-call gate."""
    call = {
        "id": "call_qualify_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    messages: Any = [
        _ASK_WEATHER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(_TOOL_RESULT)},
    ]
    try:
        reply = ctx.client.chat.completions.create(
            model=_model(ctx),
            messages=messages,
            tools=[WEATHER_TOOL],
            max_tokens=ctx.max_tokens,
            temperature=0,
        )
    except Exception as exc:
        if (na := unsupported(exc, "tool_result")) is not None:
            return na
        raise
    message = reply.choices[0].message
    content = message.content or ""
    details = {"content": content[:300], "tool_calls": len(message.tool_calls or [])}
    if message.tool_calls:
        return GateResult("tool_result", Status.FAIL, "answered with another tool call", details)
    if "17" not in content and "seventeen" not in content.lower():
        return GateResult("tool_result", Status.FAIL, "content does not use the tool result (17 °C)", details)
    return GateResult("tool_result", Status.PASS, "content answer quoting the tool result", details)


def gate_json_schema(ctx: ProofContext) -> GateResult:
    """``response_format`` json_schema strict -> PASS when the content parses and matches the schema."""
    try:
        reply = ctx.client.chat.completions.create(
            model=_model(ctx),
            messages=[{"role": "user", "content": "Paris: 18 degrees Celsius, cloudy. Report it as JSON."}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "weather_report", "strict": True, "schema": WEATHER_SCHEMA},
            },
            max_tokens=ctx.max_tokens,
            temperature=0,
        )
    except Exception as exc:
        if (na := unsupported(exc, "json_schema")) is not None:
            return na
        raise
    content = reply.choices[0].message.content or ""
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return GateResult("json_schema", Status.FAIL, f"content is not JSON: {content[:120]!r}")
    errors = schema_errors(value, WEATHER_SCHEMA)
    if errors:
        return GateResult("json_schema", Status.FAIL, "; ".join(errors)[:300], {"value": value})
    return GateResult(
        "json_schema", Status.PASS, "parseable JSON matching the strict schema", {"value": value}
    )


def gate_retrieval(ctx: ProofContext) -> GateResult:
    """A haystack of ~``context_tokens`` tokens hiding one random key -> PASS when the answer's content
    contains the key verbatim. Any HTTP error (e.g. context too long) is a FAIL, not NOT-APPLICABLE."""
    hay = build_haystack(ctx.context_tokens, ctx.seed)
    reply = ctx.client.chat.completions.create(
        model=_model(ctx),
        messages=[{"role": "user", "content": hay.prompt}],
        max_tokens=ctx.max_tokens,
        temperature=0,
    )
    content = reply.choices[0].message.content or ""
    usage = reply.usage.model_dump() if reply.usage else {}
    details_cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    details = {
        "key": hay.key,
        "depth": round(hay.depth, 3),
        "estimated_tokens": hay.estimated_tokens,
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": details_cached,
        "answer": content[:200],
    }
    where = f"at {usage.get('prompt_tokens')} prompt tokens"
    if hay.key in content:
        exact = content.strip().strip("`'\".").strip() == hay.key
        return GateResult(
            "retrieval", Status.PASS, f"key found {where}{' (exact answer)' if exact else ''}", details
        )
    return GateResult("retrieval", Status.FAIL, f"key {hay.key} not in the answer {where}", details)
