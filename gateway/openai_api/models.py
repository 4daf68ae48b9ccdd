"""Request bodies of the inference routes.

Only the fields the gateway reads or checks are declared; every other field is kept as sent
(``extra="allow"``) and forwarded, because vLLM accepts many extensions (``chat_template_kwargs``,
``top_k``, ``include_metrics``, ...). Field names are OpenAI's (API reference, "Create chat completion").
No number anywhere in a body may be ``NaN`` or ``Infinity``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError


class StreamOptions(BaseModel):
    """``stream_options``; ``continuous_usage_stats`` is vLLM's extension."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class ChatMessage(BaseModel):
    """One message of ``messages``; content may be a string, a list of parts or null (tool calls)."""

    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1)
    content: str | list[Any] | None = None


class InferenceRequest(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    #: strict: ``"yes"`` or ``1`` is a 400, not a stream the client may not expect
    stream: bool = Field(default=False, strict=True)
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)
    #: checked here so a negative value is refused before it takes a slot (vLLM refuses it too)
    temperature: float | None = Field(default=None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _finite_numbers(cls, data: Any) -> Any:
        """Refuse ``NaN``/``Infinity`` anywhere in the body, extra fields included.

        They are not JSON (RFC 8259), but pydantic's parser and Python's ``json`` (hence vLLM) accept
        them, and a ``NaN`` sampling parameter would reach the engine. The error is a
        ``ValidationError`` located at the offending value, so the 400 names it as ``param``.
        """
        path = non_finite_path(data)
        if path is not None:
            error = PydanticCustomError("finite_number", "NaN and Infinity are not valid JSON numbers")
            raise ValidationError.from_exception_data(
                cls.__name__, [{"type": error, "loc": path, "input": None}]
            )
        return data

    def upstream_payload(self) -> dict[str, Any]:
        """The JSON object to send upstream: what the client sent (unset fields stay unset)."""
        return self.model_dump(exclude_unset=True)


class ChatCompletionRequest(InferenceRequest):
    """``POST /v1/chat/completions`` body."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(InferenceRequest):
    """``POST /v1/completions`` body (legacy text completions)."""

    prompt: str | list[Any]


def non_finite_path(data: Any) -> tuple[str | int, ...] | None:
    """Where a non-finite float (``nan``, ``inf``) sits in parsed JSON ``data``, or None if there is none.

    Iterative (no nesting depth can exhaust the stack; pydantic's parser stops at ~255 levels anyway),
    and a path is built only for containers, so a long list of numbers costs no allocations.
    """
    if not isinstance(data, dict | list):
        return () if isinstance(data, float) and not math.isfinite(data) else None
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        path, container = stack.pop()
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in items:
            if isinstance(item, float):
                if not math.isfinite(item):
                    return (*path, key)
            elif isinstance(item, dict | list):
                stack.append(((*path, key), item))
    return None
