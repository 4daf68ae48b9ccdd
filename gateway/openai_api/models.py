"""Request bodies of the inference routes.

Only the fields the gateway reads are declared; every other field is kept as sent (``extra="allow"``)
and forwarded, because vLLM accepts many extensions (``chat_template_kwargs``, ``top_k``,
``include_metrics``, ...). Field names are OpenAI's (API reference, "Create chat completion").
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)

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
