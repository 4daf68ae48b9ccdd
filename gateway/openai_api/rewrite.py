"""Rewrite OpenAI-shaped upstream responses for the client: reasoning split and field policy, in one pass.

:class:`StreamRewriter` takes raw SSE events (``step(event) -> [events]``) and keeps one
:class:`~gateway.reasoning.policy.ChoiceSplit` per choice index; :func:`rewrite_body` does the same
for a whole non-stream response. Chat (``chat.completion[.chunk]``: ``delta``/``message``) and text
completions (``text_completion``: ``text``) are both handled. What each chunk carried goes to telemetry
as an :class:`~gateway.telemetry.observation.Observation` (:func:`observation`).

Invariants: events the policy does not change are forwarded byte for byte; ``id``, ``index``,
``finish_reason`` and ``logprobs`` stay as upstream sent them (except ``stop`` -> ``tool_calls`` when
DSML markup became tool calls); no empty delta is invented — a chunk whose only text was held back
(a possible marker) is dropped, and the text comes out with the next one. An event's SSE fields other
than ``data`` go on with it whether or not its data was rewritten; a dropped event's ``id`` and
``retry`` go on with the next event sent (:mod:`gateway.sse`). A client that asked for
``stream_options.include_usage`` gets OpenAI's closing ``choices: []`` usage chunk even from an
upstream that put usage only on chunks with choices (API reference, "Create chat completion": "an
additional chunk will be streamed before the data: [DONE] message ... the choices field will always
be an empty array"): it is made from the last usage seen, before ``[DONE]``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from gateway import json_codec
from gateway.errors import MalformedResponseError
from gateway.openai_api.client_view import ClientView
from gateway.reasoning import SplitDelta
from gateway.reasoning.policy import UPSTREAM_REASONING_FIELDS, ChoiceSplit, ReasoningPolicy
from gateway.sse import DONE, lasting_fields, with_data
from gateway.telemetry.observation import Observation
from gateway.traits import UpstreamTraits


def _tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class _ChoiceWriter:
    """Applies one choice's split to its JSON object (``delta``, ``message`` or a text choice)."""

    def __init__(self, policy: ReasoningPolicy, traits: UpstreamTraits) -> None:
        self.policy = policy
        self.split = ChoiceSplit(policy, traits)

    def rewrite(
        self, choice: dict[str, Any], slot: str | None, closing: bool = False
    ) -> tuple[bool, SplitDelta]:
        """Rewrite ``choice`` in place; ``slot`` is ``delta``/``message`` (chat) or None (``text``);
        ``closing``: the choice ends here even without a finish reason (the stream broke).

        Returns whether anything is left to send for this choice (False: its text is held back), and
        the split it released.
        """
        target: dict[str, Any] = choice
        if slot:
            target = choice.get(slot)  # type: ignore[assignment]  # _check_shape: a dict or None
            if not target:  # an empty or null delta/message still carries what a finish releases
                target = choice[slot] = {}
        text_key = "content" if slot else "text"
        upstream_reasoning = None
        for name in UPSTREAM_REASONING_FIELDS:
            if name in target:
                value = target.pop(name)
                if isinstance(value, str):
                    upstream_reasoning = (upstream_reasoning or "") + value
        text = target.get(text_key)
        out = self.split.take(upstream_reasoning, text)
        reason = choice.get("finish_reason")
        finished = closing or reason is not None
        if finished:
            tail = self.split.close(reason)
            out.reasoning += tail.reasoning
            out.content += tail.content
            out.tool_calls.extend(tail.tool_calls)
            out.tool_calls_dropped += tail.tool_calls_dropped
            if reason == "stop" and self.split.tool_calls_seen:
                choice["finish_reason"] = "tool_calls"
        whole = slot == "message"
        if self.policy.include_reasoning and (out.reasoning or whole):
            for name in self.policy.fields:
                target[name] = out.reasoning or None
        if out.content:
            target[text_key] = out.content
        elif slot is None or whole:
            target[text_key] = None if whole else ""  # a null message content; text is always a string
        elif text:
            del target[text_key]  # held back or moved to reasoning: no empty delta invented
        if out.tool_calls:
            self._write_tool_calls(target, out)
        if slot == "delta":
            return finished or bool(target) or choice.get("logprobs") is not None, out
        sent_text = bool(out.content or out.tool_calls or (out.reasoning and self.policy.include_reasoning))
        return finished or sent_text or whole or choice.get("logprobs") is not None, out

    def _write_tool_calls(self, target: dict[str, Any], out: SplitDelta) -> None:
        calls = target.get("tool_calls") or []
        start = self.split.tool_calls_seen - len(out.tool_calls)
        calls.extend(
            {
                "index": start + i,
                "id": _tool_call_id(),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for i, call in enumerate(out.tool_calls)
        )
        target["tool_calls"] = calls


#: Where a choice's text is, by the response's ``object``: chat ``delta``/``message``; else the choice
#: itself (``text_completion``, whose text is under ``text``).
_SLOTS = {"chat.completion.chunk": "delta", "chat.completion": "message"}
#: The choice fields that must be strings (or null), by the field the text is in.
_STRING_FIELDS = {key: (key, *UPSTREAM_REASONING_FIELDS) for key in ("content", "text")}


def _slot(obj: dict[str, Any]) -> str | None:
    kind = obj.get("object")
    return _SLOTS.get(kind) if isinstance(kind, str) else None  # any other JSON value: a text completion


#: The fields a chunk the gateway adds (closing usage, held text of a broken stream) copies from the
#: chunks before it.
_ENVELOPE = ("id", "object", "created", "model", "system_fingerprint")


def _event(obj: dict[str, Any]) -> bytes:
    """A chunk the gateway adds, as one SSE event."""
    return b"data: " + json_codec.dumps(obj) + b"\n\n"


def _rewritten(event: bytes, data: bytes, obj: dict[str, Any]) -> bytes:
    """``event`` (whose payload was ``data``) carrying ``obj`` instead, its other fields kept."""
    if len(event) == len(data) + 8:  # "data: " + data + a 2-byte end: its one line (vLLM's every event)
        return _event(obj)
    return with_data(event, json_codec.dumps(obj))


#: Where each chunk's :class:`Observation` goes (the request's telemetry recorder).
Observer = Callable[[Observation], None]
#: The text fields whose content counts as output (the first token), besides ``tool_calls``.
_OUTPUT_FIELDS = ("content", "text", "reasoning", "reasoning_content")


class MalformedChunkError(MalformedResponseError):
    """An upstream chunk or body whose choices don't have OpenAI's shape."""


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` parsed; :class:`MalformedChunkError` naming ``what`` unless it is a JSON object."""
    try:
        obj = json_codec.loads(data)
    except ValueError:
        raise MalformedChunkError(f"{what} is not JSON") from None
    if not isinstance(obj, dict):
        raise MalformedChunkError(f"{what} is not a JSON object")
    return obj


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
            output = any(part.get(name) for name in _OUTPUT_FIELDS) or bool(part.get("tool_calls"))
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


def _text_fields(target: dict[str, Any], text_key: str) -> tuple[Any, Any, Any]:
    """``target``'s text, ``reasoning`` and ``reasoning_content``; raise :class:`MalformedChunkError`
    if one is neither a string nor null. The one check of them, for the general path and the
    shortcut."""
    fields = target.get(text_key), target.get("reasoning"), target.get("reasoning_content")
    for name, value in zip(_STRING_FIELDS[text_key], fields, strict=True):
        if value is not None and not isinstance(value, str):
            raise MalformedChunkError(f"choice {name} is not a string")
    return fields


def _check_shape(choices: list[Any], slot: str | None) -> bool:
    """Raise :class:`MalformedChunkError` unless every choice is OpenAI-shaped (``slot`` as :func:`_slot`
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
        text = _text_fields(target, text_key)[0]
        touches = (
            touches
            or "reasoning" in target
            or "reasoning_content" in target
            or bool(text)
            or choice.get("finish_reason") is not None
        )
    return touches


class StreamRewriter:
    """One pass over an upstream SSE stream: ``step(raw event) -> raw events for the client``.

    Per chunk: parse once, split reasoning per choice, let ``observe`` (telemetry) see it, apply the
    client's :class:`ClientView`; re-encode only if something changed.
    """

    def __init__(
        self, policy: ReasoningPolicy, traits: UpstreamTraits, view: ClientView, observe: Observer
    ) -> None:
        self._policy = policy
        self._traits = traits
        self._view = view
        self._observe = observe
        self._passthrough = policy.passthrough
        self._choices: dict[int, _ChoiceWriter] = {}
        self._dropped = 0  # tool calls dropped in the chunk being rewritten
        self._carried = b""  # the id / retry lines of events not passed on, for the next one sent
        self._last: dict[str, Any] | None = None  # the last chunk with choices
        self._usage: dict[str, Any] | None = None  # the last usage seen on a chunk with choices
        self._closed = False  # the upstream sent its closing usage chunk (usage with choices: [])

    def step(self, event: bytes, data: bytes | None) -> list[bytes]:
        """Rewrite one whole SSE event (bytes including its blank-line terminator) whose ``data``
        payload is ``data`` (:func:`~gateway.sse.event_data`; None if it has none).

        Raises :class:`MalformedChunkError` for a ``data`` payload that is not a JSON object (a client
        SDK would fail on it with a parse error) or a chunk whose choices are not OpenAI-shaped.
        """
        out = self._rewrite(event, data)
        if not out:
            self._carried += lasting_fields(event)
        elif self._carried:
            out[0] = self._carried + out[0]
            self._carried = b""
        return out

    def _rewrite(self, event: bytes, data: bytes | None) -> list[bytes]:
        if data is None:
            return [event]
        if data == DONE:
            return self._closing() + [event]
        obj = json_object(data, "a data line")
        if "error" in obj:
            return [event]
        choices = obj.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise MalformedChunkError("choices is not a list")
        final = not choices  # vLLM's usage chunk: choices == []
        usage = obj.get("usage")
        if not final:
            self._last = obj
            if type(usage) is dict:
                self._usage = usage
        elif type(usage) is dict:
            self._closed = True
        self._dropped = 0
        changed, reasoning_chars, content_chars = self._split(obj, choices) if choices else (False, 0, 0)
        self._observe(
            observation(obj, obj.get("choices") or [], final, reasoning_chars, content_chars, self._dropped)
        )
        changed = self._view.apply_chunk(obj, final) or changed
        if not changed:
            return [event]
        if obj.get("choices"):
            return [_rewritten(event, data, obj)]
        if not final:
            return []  # its text is held back; its usage is cumulative and rides on the next chunk
        return [] if self._view.says_nothing(obj) else [_rewritten(event, data, obj)]

    def _envelope(self) -> dict[str, Any]:
        last = self._last or {}
        return {name: last[name] for name in _ENVELOPE if name in last}

    def _closing(self) -> list[bytes]:
        """The closing usage chunk an upstream that put its usage on chunks with choices did not send,
        as the client asked to see it (nothing when it asked for neither usage nor telemetry)."""
        if self._closed or self._usage is None:
            return []
        chunk = {**self._envelope(), "choices": [], "usage": self._usage}
        self._view.apply_chunk(chunk, True)
        return [] if self._view.says_nothing(chunk) else [_event(chunk)]

    def flush(self) -> list[bytes]:
        """What the split still holds when the stream ends without its last event (it broke): one
        chunk with each choice's held text — reasoning where a marker showed it, else answer —, or
        nothing when nothing is held."""
        if self._last is None or self._passthrough:
            return []
        slot = _slot(self._last)
        choices, reasoning_chars, content_chars = [], 0, 0
        for index, writer in self._choices.items():
            choice: dict[str, Any] = {"index": index, "finish_reason": None}
            if slot:
                choice[slot] = {}
            _, out = writer.rewrite(choice, slot, closing=True)
            target = choice[slot] if slot else choice
            if any(target.get(name) for name in ("content", "text", "tool_calls", *writer.policy.fields)):
                choices.append(choice)
            reasoning_chars += len(out.reasoning)
            content_chars += len(out.content)
        if not choices:
            return []
        chunk = {**self._envelope(), "choices": choices}
        self._observe(observation(chunk, choices, False, reasoning_chars, content_chars))
        return [_event(chunk)]

    def _split(self, obj: dict[str, Any], choices: list[Any]) -> tuple[bool, int, int]:
        kind = obj.get("object")  # _slot(obj), inline: it runs for every chunk
        slot = _SLOTS.get(kind) if isinstance(kind, str) else None
        if slot == "delta" and len(choices) == 1 and not self._passthrough:
            done = self._plain_delta(obj, choices[0])
            if done is not None:
                return done
        if not _check_shape(choices, slot) or self._passthrough:
            return False, 0, 0
        kept, reasoning_chars, content_chars = [], 0, 0
        writers = self._choices
        for choice in choices:
            index = choice.get("index", 0)
            writer = writers.get(index) or self._new_writer(index)
            keep, out = writer.rewrite(choice, slot)
            reasoning_chars += len(out.reasoning)
            content_chars += len(out.content)
            self._dropped += out.tool_calls_dropped
            if keep:
                kept.append(choice)
        obj["choices"] = kept
        return True, reasoning_chars, content_chars

    def _plain_delta(self, obj: dict[str, Any], choice: Any) -> tuple[bool, int, int] | None:
        """The general path's result for most chunks of a stream, in a fraction of its steps; None
        when this chunk is not one of them (the general path then takes it).

        Such a chunk has one choice, not finishing, whose non-empty delta has string (or null) text
        and reasoning fields, for a choice already seen whose split passes them through
        (:meth:`ChoiceSplit.passes_through`): the upstream's reasoning goes under the client's field
        names, the text stays. tests/unit/test_rewrite.py checks it against the general path on
        generated streams.
        """
        if type(choice) is not dict or choice.get("finish_reason") is not None:
            return None
        delta, index = choice.get("delta"), choice.get("index", 0)
        writer = self._choices.get(index) if type(index) is int else None
        if writer is None or type(delta) is not dict or not delta:
            return None
        try:
            text, reasoning, reasoning_content = _text_fields(delta, "content")
        except MalformedChunkError:
            return None  # the general path refuses it, with its own message
        has_fields = "reasoning" in delta or "reasoning_content" in delta
        upstream = reasoning is not None or reasoning_content is not None
        if not (has_fields or text) or not writer.split.passes_through(upstream, text):
            return None
        if has_fields:
            delta.pop("reasoning", None)
            delta.pop("reasoning_content", None)
        reasoning = (reasoning or "") + (reasoning_content or "")
        policy = writer.policy
        if reasoning and policy.include_reasoning:
            for name in policy.fields:
                delta[name] = reasoning
        if not delta and choice.get("logprobs") is None:
            obj["choices"] = []  # nothing left to send for it
        return True, len(reasoning), len(text or "")

    def _new_writer(self, index: int) -> _ChoiceWriter:
        writer = self._choices[index] = _ChoiceWriter(self._policy, self._traits)
        return writer


def rewrite_body(
    body: dict[str, Any], policy: ReasoningPolicy, traits: UpstreamTraits
) -> tuple[int, int, int]:
    """Apply the policy to a non-stream response in place; return its reasoning and answer characters
    and the tool calls dropped (no tools declared).

    Raises :class:`MalformedChunkError` if the choices are not OpenAI-shaped.
    """
    reasoning_chars = content_chars = dropped = 0
    choices = body.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise MalformedChunkError("choices is not a list")
    if choices:
        _check_shape(choices, _slot(body))
    if not policy.passthrough and choices:
        slot = _slot(body)
        for choice in choices:
            _, out = _ChoiceWriter(policy, traits).rewrite(choice, slot)
            reasoning_chars += len(out.reasoning)
            content_chars += len(out.content)
            dropped += out.tool_calls_dropped
    return reasoning_chars, content_chars, dropped
