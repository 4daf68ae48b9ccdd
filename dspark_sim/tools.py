"""Scripted tool calls, the same in every dialect (chat, Responses, Anthropic Messages).

The directive ``#sim:call NAME {JSON object}`` in the text of the last user message (the JSON runs to
the end of that line) makes the model call the function tool NAME with those arguments instead of
answering, if NAME is one it may call (declared as a function tool and not ruled out by
``tool_choice``); a directive naming any other tool is ignored and the model answers as usual. Bad
JSON, or JSON that is not an object, is a 400, so a typo never silently passes.

A conversation that ends with a tool's result (chat ``role: tool``, Responses ``function_call_output``,
Anthropic ``tool_result``) is answered by quoting it: see :func:`result_answer`.

Call ids are vLLM's: ``chatcmpl-tool-<16 hex>`` (``make_tool_call_id`` in
vllm/renderers/chat_utils.py), the same id whatever the dialect: vLLM's Anthropic and Responses
layers pass on the chat layer's id.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from .errors import SimError

RESULT_QUOTE_CHARS = 200
"""Characters of a tool's result the answer quotes."""

_CALL = re.compile(r"#sim:call[ \t]+([^\s{]+)[ \t]*(.*)$", re.M)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model makes."""

    name: str
    arguments: str
    """The arguments, a JSON object as text (``json.dumps`` spacing, like vLLM's DeepSeek parsers)."""


def scripted_call(text: str, callable_tools: frozenset[str]) -> ToolCall | None:
    """The call the first ``#sim:call`` directive in ``text`` asks for, or None (no directive, or it
    names a tool outside ``callable_tools``). Raises a 400 ``SimError`` when its arguments are not a
    JSON object."""
    match = _CALL.search(text)
    if match is None:
        return None
    name, raw = match.group(1), match.group(2).strip()
    try:
        arguments = json.loads(raw)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise SimError(400, f"#sim:call {name}: the arguments must be a JSON object, got {raw!r}")
    if name not in callable_tools:
        return None
    return ToolCall(name, json.dumps(arguments, ensure_ascii=False))


def result_answer(result: str) -> str:
    """The answer to a conversation ending with a tool's ``result``: it quotes the result's start."""
    return f"Tool result: {result[:RESULT_QUOTE_CHARS]}"


def new_call_id() -> str:
    """A fresh call id, shaped like vLLM's."""
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"
