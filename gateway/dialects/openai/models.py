"""Request bodies of the inference routes: the fields the gateway reads or checks.

A body is parsed once, by orjson (:mod:`gateway.body.json_limits`: bounded, and no ``NaN`` / ``Infinity``),
and these models validate the fields the gateway reads; everything else stays in the parsed object
as the client sent it and is forwarded (vLLM accepts many extensions: ``chat_template_kwargs``,
``top_k``, ``include_metrics``, ...), subject to the field policy (:mod:`gateway.dialects.fields`).
Field names are OpenAI's (API reference, "Create chat completion").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    """``stream_options``; ``continuous_usage_stats`` is vLLM's extension."""

    model_config = ConfigDict(extra="ignore")

    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class ChatMessage(BaseModel):
    """One message of ``messages``; content may be a string, a list of parts or null (tool calls)."""

    model_config = ConfigDict(extra="ignore")

    role: str = Field(min_length=1)
    content: str | list[Any] | None = None


class InferenceRequest(BaseModel):
    """Fields shared by chat and text completions."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    #: strict: ``"yes"`` or ``1`` is a 400, not a stream the client may not expect
    stream: bool = Field(default=False, strict=True)
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)
    #: checked here so a negative value is refused before it takes a slot (vLLM refuses it too)
    temperature: float | None = Field(default=None, ge=0)

    def payload(self, body: dict[str, Any]) -> dict[str, Any]:
        """The object to send upstream: the parsed ``body`` this model was validated from, with the
        scalar fields it declares as validated (``"8"`` sent as ``max_tokens`` goes on as ``8``)."""
        for name in self.model_fields_set & _SCALARS:
            body[name] = getattr(self, name)
        return body


class ChatCompletionRequest(InferenceRequest):
    """``POST /v1/chat/completions`` body."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(InferenceRequest):
    """``POST /v1/completions`` body (legacy text completions)."""

    prompt: str | list[Any]


#: The scalar fields the models declare: written back into the forwarded body as validated.
_SCALARS = frozenset({"model", "stream", "max_tokens", "n", "temperature", "max_completion_tokens"})
