"""Request models for chat and text completions, parsed once at the edge, and what every dialect's
request model reduces to: a :class:`Prompt`.

Unknown fields are tolerated (vLLM ignores them with a warning), so clients may send anything the
OpenAI SDK or the gateway adds. Only what the simulator reads is modelled.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dspark_common import json_codec

from .errors import SimError
from .text import THINK_START, estimate_prompt_tokens
from .tokens import Ids, chat_ids, raw_ids

OPEN = ConfigDict(extra="allow")


@dataclass(frozen=True, slots=True)
class Prompt:
    """A request's input as the simulated model reads it, whatever the dialect."""

    key: str
    """Everything that identifies the request's content: seeds its text and its engine steps."""
    tokens: int
    """Estimated prompt tokens (``estimate_prompt_tokens``)."""
    instruction: str
    """Text of the last user message (or the raw prompt): searched for "count ..." and ``#sim:``."""
    thinking: bool
    tool_result: str | None = None
    """The output of the tool call the conversation ends with, if it ends with one."""
    tools: frozenset[str] = frozenset()
    """Function tools the model may call: declared, and not ruled out by ``tool_choice``."""
    parts: tuple[tuple[str, str], ...] | None = None
    """``(role, text)`` pairs of a chat prompt as the template renders them; None: a raw prompt
    (its text is ``key``)."""

    def token_ids(self) -> Ids:
        """The prompt's ids (:mod:`dspark_sim.tokens`): as many as :attr:`tokens`."""
        return raw_ids(self.key) if self.parts is None else chat_ids(self.parts)

    @classmethod
    def of_messages(
        cls,
        messages: list[tuple[str, str]],
        *,
        instruction: str,
        thinking: bool,
        tool_result: str | None = None,
        tools: frozenset[str] = frozenset(),
    ) -> Prompt:
        """From ``(role, text)`` pairs in the order a chat template renders them (tool definitions
        included, see :func:`with_tools`): each counts as one message of the estimate."""
        return cls(
            key=json.dumps(messages),
            tokens=estimate_prompt_tokens([text for _, text in messages]),
            instruction=instruction,
            thinking=thinking,
            tool_result=tool_result,
            tools=tools,
            parts=tuple(messages),
        )


def thinking_on(template_kwargs: dict[str, Any] | None, effort: str | None) -> bool:
    """False when thinking was switched off: ``chat_template_kwargs`` ``thinking`` (DeepSeek's
    templates) or ``enable_thinking`` false, or a reasoning effort of "none"."""
    kwargs = template_kwargs or {}
    if kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False:
        return False
    return effort != "none"


def with_tools(turns: list[tuple[str, str]], tools: Iterable[Any]) -> list[tuple[str, str]]:
    """``turns`` with one ``("tools", <compact JSON>)`` pair per tool definition where DeepSeek-V4
    renders them: in the first system message (``_DeepseekV4Tokenizer.apply_chat_template``,
    ``vllm/tokenizers/deepseek_v4.py``: the tools attach to it, or to one made first), so they count
    towards the prompt's size and a conversation's next turn extends its prefix, tools and all."""
    first = next((i + 1 for i, (role, _) in enumerate(turns) if role == "system"), 0)
    return turns[:first] + [("tools", json_codec.dumps_text(tool)) for tool in tools] + turns[first:]


def callable_tools(declared: Iterable[str], choice: str | None, forced: str | None) -> frozenset[str]:
    """The declared function tools that ``tool_choice`` leaves callable: none for "none", only the
    named one when one is ``forced``."""
    names = frozenset(declared)
    if choice == "none":
        return frozenset()
    return names & {forced} if forced is not None else names


class StreamOptions(BaseModel):
    """``stream_options``: usage reporting in streams."""

    model_config = OPEN
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatMessage(BaseModel):
    """One chat message; ``content`` may be a string, a list of parts or null."""

    model_config = OPEN
    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    """An assistant message's calls, sent back with the results (``role: tool``) that follow it."""

    def text(self) -> str:
        """The message's text: the string itself or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")

    def prompt_text(self) -> str:
        """What the template renders of the message: its text, then its calls (as JSON)."""
        text = self.text()
        return text + json_codec.dumps_text(self.tool_calls) if self.tool_calls else text


class _GenerationRequest(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = OPEN
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int = 1
    seed: int | None = None
    ignore_eos: bool = False

    @model_validator(mode="after")
    def _check(self) -> _GenerationRequest:
        if self.n != 1:
            raise ValueError("the simulator only supports n=1")
        if self.stream_options is not None and not self.stream:
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return self

    @property
    def include_usage(self) -> bool:
        """Whether a final usage chunk is wanted (streams)."""
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        """Whether every chunk carries cumulative usage (needs ``include_usage`` too, as in vLLM)."""
        return bool(self.include_usage and self.stream_options and self.stream_options.continuous_usage_stats)


class ChatRequest(_GenerationRequest):
    """``POST /v1/chat/completions`` body."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    tools: list[dict[str, Any]] | None = None
    """``{"type": "function", "function": {"name", "description", "parameters"}}`` each."""
    tool_choice: str | dict[str, Any] | None = None
    """"none", "auto", "required" or ``{"type": "function", "function": {"name": ...}}``."""

    @property
    def token_limit(self) -> int | None:
        """Effective output cap, tokens (``max_completion_tokens`` wins, as in vLLM)."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def thinking(self) -> bool:
        """False when thinking was switched off (template kwarg or ``reasoning_effort: none``)."""
        return thinking_on(self.chat_template_kwargs, self.reasoning_effort)

    @property
    def forced_tool(self) -> str | None:
        """The function a named ``tool_choice`` forces, if any (vLLM then finishes with "stop",
        not "tool_calls")."""
        choice = self.tool_choice
        function = choice.get("function") if isinstance(choice, dict) else None
        return str(function.get("name")) if isinstance(function, dict) else None

    def last_user_text(self) -> str:
        """Text of the last ``user`` message ("" when there is none)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text()
        return ""

    def to_prompt(self) -> Prompt:
        """The conversation as the model reads it; it ends with a tool result after ``role: tool``."""
        tools = self.tools or []
        declared = (
            str(tool["function"].get("name"))
            for tool in tools
            if tool.get("type", "function") == "function" and isinstance(tool.get("function"), dict)
        )
        last = self.messages[-1]
        choice = self.tool_choice if isinstance(self.tool_choice, str) else None
        return Prompt.of_messages(
            with_tools([(message.role, message.prompt_text()) for message in self.messages], tools),
            instruction=self.last_user_text(),
            thinking=self.thinking,
            tool_result=last.text() if last.role == "tool" else None,
            tools=callable_tools(declared, choice, self.forced_tool),
        )


class CompletionRequest(_GenerationRequest):
    """``POST /v1/completions`` body; ``max_tokens`` defaults to 16 as in vLLM and OpenAI."""

    prompt: str | list[str]
    max_tokens: int | None = Field(default=16, ge=1)

    @model_validator(mode="after")
    def _one_prompt(self) -> CompletionRequest:
        if isinstance(self.prompt, list) and len(self.prompt) != 1:
            raise ValueError("the simulator only supports a single prompt string")
        return self

    @property
    def prompt_text(self) -> str:
        """The prompt as one string."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def token_limit(self) -> int | None:
        """Output cap, tokens."""
        return self.max_tokens

    def to_prompt(self) -> Prompt:
        """The raw prompt: one text, no template overhead; it thinks only inside an open ``<think>``."""
        text = self.prompt_text
        return Prompt(
            key=text,
            tokens=estimate_prompt_tokens([text], per_message=0, fixed=1),
            instruction=text,
            thinking=text.rstrip().endswith(THINK_START),
        )


class TokenizeRequest(BaseModel):
    """``POST /tokenize`` body (vLLM's chat form, ``messages`` with the chat template applied, or its
    text form, ``prompt``); counted as the chat and completions routes count their prompts."""

    model_config = OPEN
    model: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[dict[str, Any]] | None = None
    prompt: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TokenizeRequest:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("give either messages or prompt")
        return self

    def to_prompt(self) -> Prompt:
        """The prompt the same chat or completion request has (its ids, its ``usage.prompt_tokens``)."""
        if self.messages is not None:
            return ChatRequest(messages=self.messages, tools=self.tools).to_prompt()
        return CompletionRequest(prompt=self.prompt or "").to_prompt()


RequestT = TypeVar("RequestT", bound=BaseModel)


def parse_body(raw: bytes, model: type[RequestT]) -> RequestT:
    """Decode JSON and validate it into ``model``; any failure is a 400 ``SimError``."""
    try:
        data = json_codec.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SimError(400, f"Invalid JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise SimError(400, "Request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first.get("loc", ())) or None
        raise SimError(400, _describe(exc), param=param) from None


def _describe(exc: ValidationError) -> str:
    """Short human-readable summary of validation errors."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{loc}: {error['msg']}" if loc else error["msg"])
    return "; ".join(parts)
