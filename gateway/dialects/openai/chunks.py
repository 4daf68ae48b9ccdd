"""Reading an OpenAI-shaped upstream chunk or body (parsed by :func:`~gateway.dialects.wire.json_object`):
its choices checked (:func:`check_shape`: chat ``delta``/``message`` or a ``text_completion`` choice,
text fields strings or null) and observed for telemetry (:func:`observation`). Pure: no I/O, no web
framework."""

from __future__ import annotations

from typing import Any

from gateway.dialects.wire import MalformedChunkError
from gateway.reasoning.policy import UPSTREAM_REASONING_FIELDS
from gateway.telemetry.observation import Observation

#: Where a choice's text is, by the response's ``object``: chat ``delta``/``message``; else the choice
#: itself (``text_completion``, whose text is under ``text``).
SLOTS = {"chat.completion.chunk": "delta", "chat.completion": "message"}
#: The choice fields that must be strings (or null), by the field the text is in.
STRING_FIELDS = {key: (key, *UPSTREAM_REASONING_FIELDS) for key in ("content", "text")}


def slot_of(obj: dict[str, Any]) -> str | None:
    """Where ``obj``'s choices hold their text: ``delta``, ``message`` or None (the choice itself)."""
    kind = obj.get("object")
    return SLOTS.get(kind) if isinstance(kind, str) else None  # any other JSON value: a text completion


#: The text fields whose content counts as output (the first token), besides ``tool_calls``.
OUTPUT_FIELDS = ("content", "text", "reasoning", "reasoning_content")


def observation(
    obj: dict[str, Any],
    choices: list[Any],
    final: bool,
    reasoning_chars: int,
    content_chars: int,
    tool_calls_dropped: int = 0,
) -> Observation:
    """What telemetry needs of one OpenAI chunk or body (``choices`` after the split, ``final``: the
    stream's closing usage chunk): its indices, first finish reason, whether it carried output
    (released reasoning or answer, or, when nothing was split, any text field or a tool call), usage
    and vLLM's per-request ``metrics``."""
    output = bool(reasoning_chars or content_chars)
    finish_reason, indices = None, []
    for choice in choices:
        if type(choice) is not dict:
            continue
        indices.append(choice.get("index", 0))
        reason = choice.get("finish_reason")
        if finish_reason is None and isinstance(reason, str):
            finish_reason = reason
        if not output:
            delta = choice.get("delta")
            part = delta if type(delta) is dict else choice.get("message")
            part = part if type(part) is dict else choice
            output = any(part.get(name) for name in OUTPUT_FIELDS) or bool(part.get("tool_calls"))
    usage, metrics = obj.get("usage"), obj.get("metrics")
    return Observation(
        output=output,
        reasoning_chars=reasoning_chars,
        content_chars=content_chars,
        finish_reason=finish_reason,
        usage=usage if type(usage) is dict else None,
        final=final,
        metrics=metrics if type(metrics) is dict else None,
        indices=tuple(indices),
        tool_calls_dropped=tool_calls_dropped,
    )


def text_fields(target: dict[str, Any], text_key: str) -> tuple[Any, Any, Any]:
    """``target``'s text, ``reasoning`` and ``reasoning_content``; raise :class:`MalformedChunkError`
    if one is neither a string nor null. The one check of them, for the general path and the
    shortcut."""
    fields = target.get(text_key), target.get("reasoning"), target.get("reasoning_content")
    for name, value in zip(STRING_FIELDS[text_key], fields, strict=True):
        if value is not None and not isinstance(value, str):
            raise MalformedChunkError(f"choice {name} is not a string")
    return fields


def check_shape(choices: list[Any], slot: str | None) -> bool:
    """Raise :class:`MalformedChunkError` unless every choice is OpenAI-shaped (``slot`` as :func:`slot_of`
    says); return whether the reasoning policy could change any of them (a reasoning field, text, or
    a finish reason), so a chunk it can't change is left as is."""
    text_key = "content" if slot else "text"
    touches = False
    for choice in choices:
        if not isinstance(choice, dict) or not isinstance(choice.get("index", 0), int):
            raise MalformedChunkError("a choice is not an object with an integer index")
        target = choice.get(slot) if slot else choice
        if target is None:
            touches = touches or choice.get("finish_reason") is not None
            continue
        if not isinstance(target, dict):
            raise MalformedChunkError(f"choice {slot} is not an object")
        text = text_fields(target, text_key)[0]
        touches = (
            touches
            or "reasoning" in target
            or "reasoning_content" in target
            or bool(text)
            or choice.get("finish_reason") is not None
        )
    return touches
