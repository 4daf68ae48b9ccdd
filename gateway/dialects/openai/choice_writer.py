"""One choice's reasoning split written into its OpenAI JSON object (a stream's ``delta``, a body's
``message``, or a ``text_completion`` choice): reasoning under the policy's field names, the answer
in ``content``/``text``, DSML tool calls as OpenAI ``tool_calls`` with ids of their own."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.reasoning import SplitDelta
from gateway.reasoning.policy import UPSTREAM_REASONING_FIELDS, ChoiceSplit, ReasoningPolicy, ReasoningShown


def tool_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class ChoiceWriter:
    """Applies one choice's split to its JSON object (``delta``, ``message`` or a text choice)."""

    def __init__(self, policy: ReasoningPolicy, known: ReasoningShown) -> None:
        self.policy = policy
        self.split = ChoiceSplit(policy, known)

    def rewrite(
        self, choice: dict[str, Any], slot: str | None, closing: bool = False
    ) -> tuple[bool, SplitDelta]:
        """Rewrite ``choice`` in place; ``slot`` is ``delta``/``message`` (chat) or None (``text``);
        ``closing``: the choice ends here even without a finish reason (the stream broke).

        Returns whether anything is left to send for this choice (False: its text is held back), and
        the split it released.
        """
        target = _target(choice, slot)
        text_key = "content" if slot else "text"
        text = target.get(text_key)
        out = self.split.take(_upstream_reasoning(target), text)
        finished = closing or choice.get("finish_reason") is not None
        if finished:
            self._finish(choice, out)
        self._write(target, slot, text_key, text, out)
        if slot == "delta":
            return finished or bool(target) or choice.get("logprobs") is not None, out
        sent_text = bool(out.content or out.tool_calls or (out.reasoning and self.policy.include_reasoning))
        whole = slot == "message"
        return finished or sent_text or whole or choice.get("logprobs") is not None, out

    def _finish(self, choice: dict[str, Any], out: SplitDelta) -> None:
        """The choice ends: what the split still held joins ``out``, less a marker ``max_tokens`` cut
        in two (:meth:`~gateway.reasoning.Markers.cut`); a stop after DSML tool calls is OpenAI's
        ``tool_calls`` finish."""
        reason = choice.get("finish_reason")
        tail = self.split.close(reason)
        out.reasoning += tail.reasoning
        out.content += tail.content
        out.tool_calls.extend(tail.tool_calls)
        out.tool_calls_dropped += tail.tool_calls_dropped
        if reason == "length":  # the output ends with the last text released: answer, else reasoning
            if out.content:
                out.content = self.policy.markers.cut(out.content)
            else:
                out.reasoning = self.policy.markers.cut(out.reasoning)
        if reason == "stop" and self.split.tool_calls_seen:
            choice["finish_reason"] = "tool_calls"

    def _write(
        self, target: dict[str, Any], slot: str | None, text_key: str, text: Any, out: SplitDelta
    ) -> None:
        """``out`` into ``target``: reasoning under the policy's fields, the answer under ``text_key``
        (``text`` what it held before), tool calls."""
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

    def _write_tool_calls(self, target: dict[str, Any], out: SplitDelta) -> None:
        calls = target.get("tool_calls") or []
        start = self.split.tool_calls_seen - len(out.tool_calls)
        calls.extend(
            {
                "index": start + i,
                "id": tool_call_id(),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for i, call in enumerate(out.tool_calls)
        )
        target["tool_calls"] = calls


def _target(choice: dict[str, Any], slot: str | None) -> dict[str, Any]:
    """The object ``choice`` holds its text in: its ``slot`` (made if empty or null: it still carries
    what a finish releases), or the choice itself (a text completion)."""
    if not slot:
        return choice
    target = choice.get(slot)
    if not target:
        target = choice[slot] = {}
    return target  # type: ignore[no-any-return]  # check_shape: a dict


def _upstream_reasoning(target: dict[str, Any]) -> str | None:
    """The reasoning the backend split itself (vLLM's ``reasoning``/``reasoning_content``), taken out
    of ``target``: the policy decides where it is written."""
    reasoning = None
    for name in UPSTREAM_REASONING_FIELDS:
        if name in target:
            value = target.pop(name)
            if isinstance(value, str):
                reasoning = (reasoning or "") + value
    return reasoning
