"""Request models for the simulated endpoints, parsed once at the edge.

Unknown fields are tolerated (vLLM ignores them with a warning), so clients may send anything the
OpenAI SDK or the gateway adds. Only what the simulator reads is modelled.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway import json_codec

from .errors import SimError

_OPEN = ConfigDict(extra="allow")


class StreamOptions(BaseModel):
    """``stream_options``: usage reporting in streams."""

    model_config = _OPEN
    include_usage: bool = False
    continuous_usage_stats: bool = False


class ChatMessage(BaseModel):
    """One chat message; ``content`` may be a string, a list of parts or null."""

    model_config = _OPEN
    role: str
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message's text: the string itself or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "\n".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")


class _GenerationRequest(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = _OPEN
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

    @property
    def token_limit(self) -> int | None:
        """Effective output cap, tokens (``max_completion_tokens`` wins, as in vLLM)."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def thinking(self) -> bool:
        """False when thinking was switched off (template kwarg or ``reasoning_effort: none``)."""
        kwargs = self.chat_template_kwargs or {}
        if kwargs.get("thinking") is False or kwargs.get("enable_thinking") is False:
            return False
        return self.reasoning_effort != "none"

    def last_user_text(self) -> str:
        """Text of the last ``user`` message ("" when there is none)."""
        for message in reversed(self.messages):
            if message.role == "user":
                return message.text()
        return ""


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


RequestT = TypeVar("RequestT", bound=_GenerationRequest)


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
