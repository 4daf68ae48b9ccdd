"""Rewrite upstream responses for the client: reasoning split and field policy, in one pass.

:class:`StreamRewriter` takes raw SSE events (``step(event) -> [events]``) and keeps one
:class:`~gateway.reasoning.policy.ChoiceSplit` per choice index; :func:`rewrite_body` does the same
for a whole non-stream response. Chat (``chat.completion[.chunk]``: ``delta``/``message``) and text
completions (``text_completion``: ``text``) are both handled.

Invariants: events the policy does not change are forwarded byte for byte; ``id``, ``index``,
``finish_reason`` and ``logprobs`` stay as upstream sent them (except ``stop`` -> ``tool_calls`` when
DSML markup became tool calls); no empty delta is invented — a chunk whose only text was held back
(a possible marker) is dropped, and the text comes out with the next one.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.proxy.sse import DONE, event_data
from gateway.reasoning import SplitDelta
from gateway.reasoning.policy import UPSTREAM_REASONING_FIELDS, ChoiceSplit, ReasoningPolicy, UpstreamTraits


def _tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _encode(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class _ChoiceWriter:
    """Applies one choice's split to its JSON object (``delta``, ``message`` or a text choice)."""

    def __init__(self, policy: ReasoningPolicy, traits: UpstreamTraits) -> None:
        self.policy = policy
        self.split = ChoiceSplit(policy, traits)

    def rewrite(self, choice: dict[str, Any], slot: str | None) -> bool:
        """Rewrite ``choice`` in place; ``slot`` is ``delta``/``message`` (chat) or None (``text``).

        Returns False if nothing is left to send for this choice (its text is held back).
        """
        target: dict[str, Any] = (choice.setdefault(slot, {}) or {}) if slot else choice
        text_key = "content" if slot else "text"
        upstream_reasoning = None
        for name in UPSTREAM_REASONING_FIELDS:
            value = target.pop(name, None)
            if isinstance(value, str):
                upstream_reasoning = (upstream_reasoning or "") + value
        had_text = bool(target.get(text_key))
        out = self.split.take(upstream_reasoning, target.get(text_key))
        finished = choice.get("finish_reason") is not None
        if finished:
            tail = self.split.close()
            out.reasoning += tail.reasoning
            out.content += tail.content
            out.tool_calls.extend(tail.tool_calls)
            if choice["finish_reason"] == "stop" and self.split.tool_calls_seen:
                choice["finish_reason"] = "tool_calls"
        self._write_reasoning(target, out.reasoning, whole=slot == "message")
        self._write_text(target, text_key, out.content, had_text, whole=slot == "message")
        self._write_tool_calls(target, out)
        sent_text = bool(out.content or out.tool_calls or (out.reasoning and self.policy.include_reasoning))
        if slot == "delta":
            return finished or bool(target) or choice.get("logprobs") is not None
        return finished or sent_text or slot == "message" or choice.get("logprobs") is not None

    def _write_reasoning(self, target: dict[str, Any], reasoning: str, whole: bool) -> None:
        if not self.policy.include_reasoning:
            return
        if reasoning or whole:
            for name in self.policy.fields:
                target[name] = reasoning or None

    @staticmethod
    def _write_text(target: dict[str, Any], key: str, content: str, had_text: bool, whole: bool) -> None:
        if key == "text":
            target[key] = content  # text completions always carry a string
        elif content:
            target[key] = content
        elif whole:
            target[key] = None  # OpenAI: null content when the message has none
        elif had_text:
            del target[key]  # held back or moved to reasoning: no empty delta invented

    def _write_tool_calls(self, target: dict[str, Any], out: SplitDelta) -> None:
        if not out.tool_calls:
            return
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


def _slot(obj: dict[str, Any]) -> str | None:
    kind = obj.get("object", "")
    if kind == "chat.completion.chunk":
        return "delta"
    if kind == "chat.completion":
        return "message"
    return None


class StreamRewriter:
    """One pass over an upstream SSE stream: ``step(raw event) -> raw events for the client``."""

    def __init__(self, policy: ReasoningPolicy, traits: UpstreamTraits) -> None:
        self._policy = policy
        self._traits = traits
        self._choices: dict[int, _ChoiceWriter] = {}

    def step(self, event: bytes) -> list[bytes]:
        """Rewrite one whole SSE event (bytes including its blank-line terminator)."""
        data = event_data(event)
        if self._policy.passthrough or data is None or data == DONE:
            return [event]
        try:
            obj = json.loads(data)
        except ValueError:
            return [event]
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if not choices or not isinstance(choices, list):
            return [event]
        if not self._changes(obj, choices):
            return [event]
        slot = _slot(obj)
        kept = [c for c in choices if self._writer(c.get("index", 0)).rewrite(c, slot)]
        if not kept and obj.get("usage") is None:
            return []
        obj["choices"] = kept
        return [_encode(obj)]

    def _writer(self, index: int) -> _ChoiceWriter:
        writer = self._choices.get(index)
        if writer is None:
            writer = self._choices[index] = _ChoiceWriter(self._policy, self._traits)
        return writer

    def _changes(self, obj: dict[str, Any], choices: list[Any]) -> bool:
        """Cheap check: could the policy change this chunk? (Otherwise it is forwarded as is.)"""
        slot = _slot(obj)
        for choice in choices:
            target = (choice.get(slot) or {}) if slot else choice
            if any(name in target for name in UPSTREAM_REASONING_FIELDS):
                return True
            if target.get("content" if slot else "text") or choice.get("finish_reason") is not None:
                return True
        return False


def rewrite_body(body: dict[str, Any], policy: ReasoningPolicy, traits: UpstreamTraits) -> dict[str, Any]:
    """Apply the policy to a non-stream response (``chat.completion`` or ``text_completion``), in place."""
    if policy.passthrough or not isinstance(body.get("choices"), list):
        return body
    slot = _slot(body)
    for choice in body["choices"]:
        _ChoiceWriter(policy, traits).rewrite(choice, slot)
    return body
