"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` bodies (Anthropic Messages, as vLLM 0.32
takes them), parsed once at the edge.

Shapes from vllm/entrypoints/anthropic/protocol.py; what the model reads follows vLLM's conversion to
a chat request (``to_chat_completion_request`` in serving.py): the ``system`` string or text blocks
joined, Claude Code's ``x-anthropic-billing-header`` block left out (it changes every request);
``tool_result`` blocks of a user message become tool messages (text or text blocks joined by
newlines); ``tool_use`` blocks are the assistant's calls; ``thinking`` blocks sent back (with their
signature), ``redacted_thinking`` and ``image`` blocks are accepted and read as nothing. Tools are
``{"name", "description", "input_schema"}``; a tool with a ``type`` other than "custom" (a server
tool, e.g. ``web_search_20250305``) is accepted and ignored, where vLLM would refuse it.
``thinking`` ``{"type": "disabled"}`` switches thinking off (vLLM maps it to ``reasoning_effort:
none``); "enabled" needs ``budget_tokens`` >= 1024 and below ``max_tokens``, as in vLLM (the
simulated reasoning is far shorter than any budget). Unknown fields and block types are tolerated.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from dspark_common import json_codec
from dspark_common.messages_chat import Unconverted, chat_form

from .protocol import OPEN, ChatMessage, Prompt, callable_tools, thinking_on, with_tools

BILLING_HEADER = "x-anthropic-billing-header"


class Block(BaseModel):
    """One content block; only the fields the simulator reads."""

    model_config = OPEN
    type: str
    text: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None
    """A ``tool_result``'s result: a string or blocks."""

    def result_text(self) -> str:
        """A ``tool_result``'s text, as vLLM reads it: the string, or its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        texts = (item.get("text", "") for item in self.content or () if item.get("type") == "text")
        return "\n".join(map(str, texts))


class Message(BaseModel):
    """One message of ``messages``."""

    model_config = OPEN
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]

    def text(self) -> str:
        """The message's text: the string, or its text blocks joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(block.text or "" for block in self.content if block.type == "text")

    def results(self) -> list[Block]:
        """The message's ``tool_result`` blocks."""
        return [] if isinstance(self.content, str) else [b for b in self.content if b.type == "tool_result"]

    def turns(self) -> list[tuple[str, str]]:
        """``(role, text)`` as vLLM's conversion renders the message: one tool message per result,
        then the message itself (its text and calls) unless it has neither."""
        if isinstance(self.content, str):
            return [(self.role, self.content)]
        turns = [("tool", block.result_text()) for block in self.results()]
        calls = "".join(
            json_codec.dumps_text({"name": block.name, "input": block.input or {}})
            for block in self.content
            if block.type == "tool_use"
        )
        text = self.text()
        if text or calls:
            turns.append((self.role, text + calls))
        return turns


class ToolChoice(BaseModel):
    """``tool_choice``: auto, any, none, or one ``tool`` by name."""

    model_config = OPEN
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice.name is required when type is 'tool'")
        return self


class Thinking(BaseModel):
    """``thinking``: enabled (with a budget), disabled or adaptive."""

    model_config = OPEN
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1024)

    @model_validator(mode="after")
    def _budget(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("thinking.budget_tokens is required when type is 'enabled'")
        return self


class _Conversation(BaseModel):
    """Fields ``messages`` and ``count_tokens`` share: everything that makes the prompt."""

    model_config = OPEN
    model: str = Field(min_length=1)
    messages: list[Message]
    system: str | list[Block] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def to_prompt(self) -> Prompt:
        """The conversation as the model reads it; it ends with a tool result when the last message
        carries ``tool_result`` blocks (the last one is quoted)."""
        users = [message for message in self.messages if message.role == "user"]
        results = self.messages[-1].results() if self.messages else []
        tools = [tool for tool in self.tools or () if tool.get("type", "custom") == "custom"]
        choice = self.tool_choice
        off = choice is not None and choice.type == "none"
        effort = "none" if self.thinking is not None and self.thinking.type == "disabled" else None
        return Prompt.of_messages(
            self._rendered(tools),
            instruction=users[-1].text() if users else "",
            thinking=thinking_on(self.chat_template_kwargs, effort),
            tool_result=results[-1].result_text() if results else None,
            tools=callable_tools(
                (str(tool.get("name")) for tool in tools),
                "none" if off else None,
                choice.name if choice is not None and choice.type == "tool" else None,
            ),
        )

    def _rendered(self, tools: list[dict[str, Any]]) -> list[tuple[str, str]]:
        """The ``(role, text)`` pairs the model reads: the chat conversation vLLM converts the body to
        (:func:`~dspark_common.messages_chat.chat_form`, inline system messages in place) as the
        chat route renders it, so ``/tokenize`` of that conversation counts what this route does;
        a body it can't convert (an image, a server tool), read here block by block."""
        try:
            form = chat_form(self.model_dump(exclude_none=True))
        except Unconverted:
            system = self._system_text()
            turns = [("system", system)] if system else []
            for message in self.messages:
                turns += message.turns()
            return with_tools(turns, tools)
        chat = [(m["role"], ChatMessage.model_validate(m).prompt_text()) for m in form.messages]
        return with_tools(chat, form.tools or [])

    def _system_text(self) -> str:
        if isinstance(self.system, str):
            return self.system
        texts = (block.text or "" for block in self.system or () if block.type == "text")
        return "".join(text for text in texts if not text.startswith(BILLING_HEADER))


class MessagesRequest(_Conversation):
    """``POST /v1/messages`` body."""

    max_tokens: int = Field(ge=1)
    stream: bool | None = False

    @model_validator(mode="after")
    def _budget_below_max(self) -> MessagesRequest:
        budget = self.thinking.budget_tokens if self.thinking is not None else None
        if budget is not None and budget >= self.max_tokens:
            raise ValueError("thinking.budget_tokens must be less than max_tokens")
        return self


class CountTokensRequest(_Conversation):
    """``POST /v1/messages/count_tokens`` body."""
