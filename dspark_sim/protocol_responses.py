"""``POST /v1/responses`` request body (OpenAI Responses API, as vLLM 0.32 takes it), parsed once.

Shapes from ``ResponsesRequest`` in vllm/entrypoints/openai/responses/protocol.py. ``input`` is a
string (one user message) or a list of items: ``message`` (``type`` may be left out, as in the SDK's
easy input messages; ``content`` a string or ``input_text``/``output_text`` parts), ``function_call``,
``function_call_output`` (``output`` a string or parts), ``reasoning`` items sent back from an
earlier turn (read as nothing: the template drops past reasoning) and any other item type (ignored).
Function tools are ``{"type": "function", "name", "description", "parameters", "strict"}``; tools of
other types (``custom``, ``web_search``, ``local_shell``...) are accepted and never called. Unknown
fields are tolerated; what the simulator does not model (``temperature``, ``text``...) is only
echoed in the response object, as vLLM does.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from .protocol import OPEN, Prompt, callable_tools, thinking_on, with_tools

_CALL_OUTPUTS = ("function_call_output", "custom_tool_call_output")


class InputItem(BaseModel):
    """One ``input`` item; only the fields the simulator reads."""

    model_config = OPEN
    type: str = "message"
    role: str = "user"
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """A message's text: the string, or its parts' ``text`` joined by newlines."""
        return _text(self.content)

    def turn(self) -> tuple[str, str] | None:
        """``(role, text)`` as the chat template renders the item, or None if it renders nothing."""
        if self.type == "message":
            return self.role, self.text()
        if self.type == "function_call":
            return "assistant", f"{self.name}{self.arguments or ''}"
        if self.type in _CALL_OUTPUTS:
            return "tool", _text(self.output)
        return None


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` body."""

    model_config = OPEN
    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    reasoning: dict[str, Any] | None = None
    """``{"effort", "summary"}``; effort "none" switches thinking off."""
    chat_template_kwargs: dict[str, Any] | None = None
    store: bool = True
    background: bool = False
    previous_response_id: str | None = None
    stream: bool = False
    seed: int | None = None
    ignore_eos: bool = False
    request_id: str | None = None
    """vLLM's own field: the response's id (default ``resp_<16 hex>``)."""

    @property
    def thinking(self) -> bool:
        """False when thinking was switched off (template kwarg or ``reasoning.effort: none``)."""
        effort = (self.reasoning or {}).get("effort")
        return thinking_on(self.chat_template_kwargs, effort)

    @property
    def echoed_tool_choice(self) -> str | dict[str, Any]:
        """``tool_choice`` as vLLM reports it: "auto" without tools becomes "none"
        (``check_tool_usage``)."""
        if not self.tools and self.tool_choice == "auto":
            return "none"
        return self.tool_choice

    def items(self) -> list[InputItem]:
        """``input`` as items (a string is one user message)."""
        if isinstance(self.input, str):
            return [InputItem(content=self.input)]
        return self.input

    def to_prompt(self) -> Prompt:
        """The conversation as the model reads it: ``instructions`` first (as the system message), it
        ends with a tool result when the last item is a call's output."""
        items = self.items()
        turns = [("system", self.instructions)] if self.instructions else []
        turns += [turn for item in items if (turn := item.turn()) is not None]
        users = [item for item in items if item.type == "message" and item.role == "user"]
        last = items[-1] if items else None
        function_tools = [tool for tool in self.tools if tool.get("type") == "function"]
        choice = self.tool_choice
        forced = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
        return Prompt.of_messages(
            with_tools(turns, function_tools),
            instruction=users[-1].text() if users else "",
            thinking=self.thinking,
            tool_result=_text(last.output) if last is not None and last.type in _CALL_OUTPUTS else None,
            tools=callable_tools(
                (str(tool.get("name")) for tool in function_tools),
                choice if isinstance(choice, str) else None,
                str(forced) if forced is not None else None,
            ),
        )


def _text(content: str | list[dict[str, Any]] | None) -> str:
    """A string as it is, or the ``text`` of each part (``input_text``, ``output_text``...) joined by
    newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(str(part["text"]) for part in content or () if "text" in part)
