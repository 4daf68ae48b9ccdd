"""How the backend counts a request's prompt in tokens, per client API, before admission.

vLLM counts for itself, exactly as it will render the prompt: ``POST /tokenize`` applies the chat
template to ``messages`` (with ``tools`` and the template's keyword arguments) or tokenizes a text
``prompt``, answering ``{"count", "max_model_len", "tokens"}``; ``POST /v1/messages/count_tokens``
converts an Anthropic body the way ``/v1/messages`` does, answering ``{"input_tokens"}``. Clients can't
reach either on the gateway's side of the door; the gateway asks them over loopback.

Each builder takes the body about to be sent (a dict) and returns the :class:`TokenCount` to make, or
None where the backend can't be asked faithfully (a list of prompts, a Responses request that
continues a stored one, an input item this module doesn't know): the caller then estimates.

Pure: no web framework, no HTTP client. The bodies share the request's values; nothing is copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dspark_common.messages_chat import Unconverted, chat_form, has_inline_system

#: Keyword arguments vLLM's chat completions merge into the template's from the request's own
#: fields (``ChatCompletionRequest.build_chat_params``, vLLM 0.32); ``/tokenize`` only merges its
#: ``chat_template_kwargs``, so they go there.
_CHAT_TEMPLATE_FIELDS = ("add_generation_prompt", "continue_final_message", "documents", "reasoning_effort")


#: Responses tool types vLLM's chat template never sees (``get_function_tools`` drops them: they are
#: hosted tools, run by the server if at all).
_UNRENDERED_TOOLS = ("web_search", "web_search_preview")

#: What joins a ``namespace`` tool's name to its functions' (``_NAMESPACE_TOOL_SEPARATOR``,
#: ``vllm/tool_parsers/utils.py``).
_NAMESPACE_SEPARATOR = "__"

#: Responses content parts that are text.
_TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True, slots=True)
class TokenCount:
    """POST ``body`` to ``path``; the prompt's tokens are the integer ``field`` of the answer.
    ``unmatched``: why the answer will hold no token ids to match the prefix cache with (``image``,
    ``unconverted``: :mod:`dspark_common.messages_chat`), None when it will."""

    path: str
    body: dict[str, Any]
    field: str
    unmatched: str | None = None


@dataclass(frozen=True, slots=True)
class EitherCount:
    """A prompt vLLM renders one of ``forms`` ways (``/tokenize`` counts), depending on its served
    template; ``check`` (vLLM's own count of the request, no ids) tells which: the form whose count
    equals it. None of them: the check's count, ``unconverted``."""

    forms: tuple[TokenCount, ...]
    check: TokenCount


def chat_count(payload: dict[str, Any]) -> TokenCount | None:
    """``/tokenize`` in its chat form for a chat completions body."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None
    kwargs = dict(payload.get("chat_template_kwargs") or {})
    effort = payload.get("reasoning_effort")
    if effort is not None and "enable_thinking" not in kwargs:
        kwargs["enable_thinking"] = effort != "none"
    kwargs.update({name: payload[name] for name in _CHAT_TEMPLATE_FIELDS if payload.get(name) is not None})
    return _tokenize_messages(payload.get("model"), messages, payload.get("tools"), kwargs)


def completion_count(payload: dict[str, Any]) -> TokenCount | None:
    """``/tokenize`` in its text form for a completions body with one text prompt."""
    prompt = payload.get("prompt")
    if not isinstance(prompt, str):
        return None
    body = {"model": payload.get("model"), "prompt": prompt}
    if isinstance(payload.get("add_special_tokens"), bool):
        body["add_special_tokens"] = payload["add_special_tokens"]
    return TokenCount("/tokenize", body, "count")


def messages_count(payload: dict[str, Any]) -> TokenCount | EitherCount:
    """``/tokenize`` in its chat form for an Anthropic Messages body turned into the chat vLLM renders
    for it (:func:`~dspark_common.messages_chat.chat_form`), so the answer holds its ids; where
    it can't be turned faithfully, vLLM's own ``/v1/messages/count_tokens`` (a count, no ids; it
    ignores the fields that are not counted: ``max_tokens``, ``stream``, sampling). A body with
    ``system`` messages in ``messages`` renders as vLLM decided for its template at start-up (merged
    into the first, or in place): both forms, told apart by ``count_tokens``, the merged one first
    (DeepSeek-V4's). A ``thinking`` of type ``disabled`` or an ``output_config.effort`` (vLLM maps
    them to a ``reasoning_effort`` by probing the template; the gateway's dialect replaces them with
    template kwargs before this) is counted by ``count_tokens`` only."""
    thinking = payload.get("thinking")
    output = payload.get("output_config")
    check = TokenCount("/v1/messages/count_tokens", payload, "input_tokens")
    kwargs = dict(payload.get("chat_template_kwargs") or {})
    try:
        if (isinstance(thinking, dict) and thinking.get("type") == "disabled") or (
            isinstance(output, dict) and output.get("effort") is not None
        ):
            raise Unconverted("unconverted")
        if not has_inline_system(payload):
            form = chat_form(payload)
            return _tokenize_messages(payload.get("model"), form.messages, form.tools, dict(kwargs))
        forms = (chat_form(payload, merge_inline_system=True), chat_form(payload))
    except Unconverted as why:
        return replace(check, unmatched=why.reason)
    counts = (_tokenize_messages(payload.get("model"), f.messages, f.tools, dict(kwargs)) for f in forms)
    return EitherCount(tuple(counts), replace(check, unmatched="unconverted"))


def responses_count(payload: dict[str, Any]) -> TokenCount | None:
    """``/tokenize`` in its chat form for a Responses body, its input turned into chat messages as
    vLLM's Responses API does (``construct_input_messages``, vLLM 0.32): ``instructions`` a system
    message, a string ``input`` a user message, each input item a message — function calls merged
    into the assistant message before them, their outputs tool messages, reasoning the assistant's
    ``reasoning``, other messages with their text parts. None for a request continuing a stored response (the
    gateway can't see its turns)."""
    if payload.get("previous_response_id") is not None or payload.get("conversation") is not None:
        return None
    messages: list[dict[str, Any]] = []
    if isinstance(payload.get("instructions"), str) and payload["instructions"]:
        messages.append({"role": "system", "content": payload["instructions"]})
    items = payload.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list):
        for item in items:
            if not isinstance(item, dict) or not _add_item(messages, item):
                return None
    else:
        return None
    chat_tools = _chat_tools(payload.get("tools"))
    if chat_tools is None:
        return None
    kwargs = dict(payload.get("chat_template_kwargs") or {})
    reasoning = payload.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is not None:
        kwargs.setdefault("enable_thinking", effort != "none")
        kwargs["reasoning_effort"] = effort
    return _tokenize_messages(payload.get("model"), messages, chat_tools, kwargs)


def _tokenize_messages(model: Any, messages: list[Any], tools: Any, kwargs: dict[str, Any]) -> TokenCount:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if isinstance(tools, list) and tools:
        body["tools"] = tools
    if kwargs.get("continue_final_message"):
        kwargs.setdefault("add_generation_prompt", False)
    for name in ("add_generation_prompt", "continue_final_message"):
        if name in kwargs:
            body[name] = kwargs.pop(name)
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    return TokenCount("/tokenize", body, "count")


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any]) -> bool:
    """Append (or merge) one Responses input item as chat messages; False for an item of a kind this
    module does not convert."""
    kind = item.get("type", "message")
    previous = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    role = item.get("role")
    if kind == "message" and role == "assistant":
        content = _first_text(item.get("content"))
        if content is None:
            return False
        if previous is not None and previous.get("content") is None:
            previous["content"] = content
        else:
            messages.append({"role": "assistant", "content": content})
        return True
    if kind == "message" and isinstance(role, str):
        parts = _chat_content(item.get("content"))
        if parts is None:
            return False
        messages.append({"role": role, "content": parts})
        return True
    if kind == "function_call":
        name = item.get("name")
        if item.get("namespace"):  # named as its tool was shown (``_construct_message_from_response_item``)
            name = f"{item['namespace']}{_NAMESPACE_SEPARATOR}{name}"
        function = {"name": name, "arguments": item.get("arguments")}
        call = {"id": item.get("call_id"), "type": "function", "function": function}
        if previous is not None:
            previous.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "tool_calls": [call]})
        return True
    if kind == "function_call_output":
        messages.append({"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")})
        return True
    if kind == "reasoning":
        parts = item.get("content") or item.get("summary") or []
        text = parts[0].get("text", "") if parts and isinstance(parts[0], dict) else ""
        if previous is not None and previous.get("reasoning") is None:
            previous["reasoning"] = text
        else:
            messages.append({"role": "assistant", "reasoning": text})
        return True
    return False


def _chat_content(content: Any) -> str | list[dict[str, str]] | None:
    """A Responses message's content as chat content: the string, or its text parts
    (``input_text``, ``output_text``) as chat ``text`` parts, which vLLM renders alike; None for
    content with other parts (images, files)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = []
    for part in content:
        if (
            not isinstance(part, dict)
            or part.get("type") not in _TEXT_PARTS
            or not isinstance(part.get("text"), str)
        ):
            return None
        parts.append({"type": "text", "text": part["text"]})
    return parts


def _first_text(content: Any) -> str | None:
    """An assistant message's text as vLLM takes it: the string, or its first part's ``text``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


def _chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """A Responses ``tools`` list as the chat tools vLLM renders for it (``get_function_tools`` in
    ``vllm/tool_parsers/utils.py``, then ``convert_tool_responses_to_completions_format``, vLLM 0.32),
    in request order: a ``function`` tool as one chat function; a ``namespace`` tool's functions each
    as one named ``<namespace>__<name>`` (``flat_namespace_tool_name``); a hosted tool vLLM never
    renders (``web_search``: Codex sends it) as none. Rendered whatever ``tool_choice`` says (vLLM's
    default). None for a tool of another type (``custom``, ``mcp``, …: not converted here)."""
    if not isinstance(tools, list):
        return []
    chat: list[dict[str, Any]] = []
    for tool in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            chat.append(_chat_function(tool, tool.get("name")))
        elif kind == "namespace" and isinstance(tool.get("tools"), list):
            for inner in tool["tools"]:
                if not isinstance(inner, dict) or inner.get("type") != "function":
                    return None
                chat.append(_chat_function(inner, f"{tool['name']}{_NAMESPACE_SEPARATOR}{inner.get('name')}"))
        elif kind not in _UNRENDERED_TOOLS:
            return None
    return chat


def _chat_function(tool: dict[str, Any], name: Any) -> dict[str, Any]:
    """A Responses function ``{type, name, description, parameters, strict}`` as a chat tool named
    ``name``."""
    function = {k: v for k, v in tool.items() if k != "type"}
    function["name"] = name
    return {"type": "function", "function": function}
