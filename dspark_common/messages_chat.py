"""An Anthropic Messages body as the chat conversation vLLM renders for it, so that ``/tokenize`` can
count it and return its token ids (``/v1/messages/count_tokens`` returns a count only).

Mirrors ``AnthropicServingMessages.to_chat_completion_request`` (``vllm/entrypoints/anthropic/
serving.py``, vLLM 0.32):

- ``system``: a string as is; of a list, the ``text`` blocks joined with nothing between, a block
  starting ``x-anthropic-billing-header`` left out (Claude Code's attribution line, a per-request
  hash: ``_convert_system_message``). One system message, first.
- A message's string content as is. Of its blocks (``_convert_block``): ``text`` parts (one alone
  becomes the string), ``thinking`` joined into ``reasoning``, ``tool_use`` a tool call whose
  ``arguments`` are ``json.dumps(input)`` (Python's, default separators and ``ensure_ascii``),
  ``redacted_thinking`` and ``tool_reference`` nothing, and a user's ``tool_result`` a ``tool``
  message (its text items joined by newlines) placed before the rest of that user message; a user
  message left with nothing is dropped.
- A ``system`` message in ``messages``: in place, or joined to the first (:func:`chat_form`).
- ``tools``: ``{"type": "function", "function": {name, description, parameters: input_schema,
  strict, defer_loading}}`` (``_convert_tools``).

:class:`Unconverted` names what vLLM converts otherwise or what can't be counted by ids here: an
image (``image``); a tool change block, an assistant's
``tool_result``, a tool reference in a result, a tool of a server type, a block of a type this module
does not know (``unconverted``). Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: The system block vLLM leaves out (``_convert_system_message``).
BILLING_HEADER = "x-anthropic-billing-header"
#: Blocks vLLM accepts and renders as nothing (``_convert_block``).
_SILENT_BLOCKS = ("redacted_thinking", "tool_reference")


class Unconverted(Exception):
    """The body can't be turned into vLLM's chat messages here; ``reason`` (``image`` or
    ``unconverted``) is what the record says."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ChatForm:
    """The chat ``messages`` and ``tools`` (None: none) vLLM renders for a Messages body."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None


def has_inline_system(payload: dict[str, Any]) -> bool:
    """Whether ``messages`` holds a ``system`` message (Claude Code sends its environment as one)."""
    return any(isinstance(m, dict) and m.get("role") == "system" for m in payload.get("messages") or [])


def chat_form(payload: dict[str, Any], merge_inline_system: bool = False) -> ChatForm:
    """The chat form of a Messages ``payload``; raises :class:`Unconverted`. ``merge_inline_system``:
    the ``system`` messages of ``messages`` are joined to the first one (what vLLM does when the
    served template refuses a system message after the first turn, or is not a Jinja template, as
    DeepSeek-V4's renderer: ``_should_merge_inline_system``) instead of staying in place."""
    messages: list[dict[str, Any]] = []
    inline = [m for m in payload.get("messages") or [] if isinstance(m, dict) and m.get("role") == "system"]
    top = payload.get("system")
    system = top if isinstance(top, str) else _system_text(top)  # a string stays whole in vLLM
    if merge_inline_system:
        system += "".join(_system_text(m.get("content")) for m in inline)
    if system:
        messages.append({"role": "system", "content": system})
    for message in payload.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "system":
            text = "" if merge_inline_system else _system_text(message.get("content"))
            if text:
                messages.append({"role": "system", "content": text})
        else:
            _add_message(messages, message)
    return ChatForm(messages, _tools(payload.get("tools")))


def _system_text(system: Any) -> str:
    """A system prompt's text as vLLM takes it (``_convert_system_message``,
    ``_extract_system_text``): the string, or its text blocks joined, the billing header left out."""
    if isinstance(system, str):
        return "" if system.startswith(BILLING_HEADER) else system
    if not system:
        return ""
    if not isinstance(system, list):
        raise Unconverted("unconverted")
    return "".join(
        block["text"]
        for block in system
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"]
        and not block["text"].startswith(BILLING_HEADER)
    )


def _add_message(messages: list[dict[str, Any]], message: Any) -> None:
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise Unconverted("unconverted")
    content = message.get("content")
    if isinstance(content, str):
        messages.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise Unconverted("unconverted")
    chat: dict[str, Any] = {"role": role}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if block.get("text"):
                parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking":
            if block.get("thinking") is not None:
                reasoning.append(block["thinking"])
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind == "tool_result" and role == "user":
            call_id = block.get("tool_use_id") or ""
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _result_text(block)})
        elif kind == "image":
            raise Unconverted("image")
        elif kind not in _SILENT_BLOCKS:
            raise Unconverted("unconverted")
    if reasoning:
        chat["reasoning"] = "".join(reasoning)
    if calls:
        chat["tool_calls"] = calls
    if parts:
        chat["content"] = parts[0]["text"] if len(parts) == 1 else parts
    if role == "assistant" or "content" in chat:
        messages.append(chat)


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block as vLLM's tool call (``_convert_tool_use_block``); one without an id
    gets a time-stamped one there, unknowable here."""
    if not block.get("id"):
        raise Unconverted("unconverted")
    function = {"name": block.get("name") or "", "arguments": json.dumps(block.get("input") or {})}
    return {"id": block["id"], "type": "function", "function": function}


def _result_text(block: dict[str, Any]) -> str:
    """A user ``tool_result``'s content as the tool message's text (``_convert_user_tool_result``)."""
    content = block.get("content")
    if isinstance(content, str) or not content:
        return content or ""
    if not isinstance(content, list):
        raise Unconverted("unconverted")
    texts = []
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "text":
            texts.append(item.get("text", ""))
        elif kind == "image":
            raise Unconverted("image")
        elif kind is not None:  # a tool reference becomes a message of its own; other kinds: unknown
            raise Unconverted("unconverted")
    return "\n".join(texts)


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise Unconverted("unconverted")
    chat = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
            raise Unconverted("unconverted")  # a server tool (web_search_20250305, …)
        function = {"name": tool.get("name"), "description": tool.get("description")}
        function["parameters"] = tool.get("input_schema")
        for name in ("strict", "defer_loading"):
            if tool.get(name) is not None:
                function[name] = tool[name]
        chat.append({"type": "function", "function": function})
    return chat
