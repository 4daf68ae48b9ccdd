"""Anthropic Messages: ``POST /v1/messages`` (Claude Code, the Anthropic SDKs), forwarded to vLLM's own
Messages route (vLLM 0.32, ``vllm/entrypoints/anthropic``), which renders the chat template and runs
its reasoning and tool parsers: the answer comes back as ``thinking``, ``text`` and ``tool_use``
blocks and is relayed unchanged.

- Credentials: ``x-api-key`` (what the Anthropic SDKs send), else ``Authorization: Bearer``.
- Errors (Anthropic API reference, "Errors"): ``{"type": "error", "error": {"type", "message"}}``,
  the type by HTTP status; after a stream started, the same object as ``event: error``.
- Keep-alive: Anthropic's own ``event: ping`` (the SDKs skip it).
- Thinking: ``thinking`` ``{"type": "enabled", "budget_tokens"}`` / ``{"type": "adaptive"}`` (on) or
  ``{"type": "disabled"}`` (off), ``output_config.effort`` (the level), ``chat_template_kwargs``
  (wins), else the key's default: written as DeepSeek-V4's ``chat_template_kwargs``
  (:mod:`gateway.dialects.thinking`). An enabled ``thinking`` stays, so vLLM caps the reasoning at
  ``budget_tokens``; a disabled one and ``output_config.effort`` are replaced by the template's
  controls (vLLM would send the template an effort DeepSeek-V4 does not know).
- Telemetry: the first ``content_block_delta`` is the first token; usage from ``message_start``
  (``input_tokens``) and ``message_delta`` (``output_tokens``, cumulative).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dspark_common import json_codec
from gateway.auth.authenticator import unauthorized
from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.dialects.base import Answer, Context, Parsed, Prepared, Step, text_length
from gateway.dialects.fields import check_fields
from gateway.dialects.prompt_count import messages_count
from gateway.dialects.sse import event_name
from gateway.dialects.thinking import as_level, resolve_thinking, set_template_thinking
from gateway.dialects.wire import bearer_token, json_object
from gateway.errors import GatewayError, invalid_request
from gateway.reasoning.policy import ReasoningShown
from gateway.telemetry.observation import Observation

#: Anthropic's error ``type`` by HTTP status (API reference, "Errors"); anything else 5xx: ``api_error``.
ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: Anthropic ``stop_reason`` -> OpenAI ``finish_reason`` (the ledger's names).
FINISH_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
#: Anthropic's keep-alive event (API reference, "Streaming messages": "ping events").
PING = b'event: ping\ndata: {"type": "ping"}\n\n'
#: The request headers forwarded to vLLM (the API version and beta features the client speaks).
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta")
#: What a forwarded Anthropic header may hold: comma-separated names (``2023-06-01``;
#: ``interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14``), at most 1 KiB — a
#: few dozen betas; Claude Code sends a handful.
FORWARDED_VALUE = re.compile(r"[A-Za-z0-9._\-]+(?: *, *[A-Za-z0-9._\-]+)*")
FORWARDED_MAX_BYTES = 1024
#: The largest ``thinking.budget_tokens``: DeepSeek-V4's context window (1M tokens); a budget past it
#: can never be spent, and one past a backend's integers (2**63) would fail in it, not here.
BUDGET_TOKENS_MAX = 1 << 20


def error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP ``status``."""
    return ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_body(error: GatewayError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": error_type(error.status), "message": error.message}}


class ThinkingConfig(BaseModel):
    """``thinking``: ``enabled`` (with ``budget_tokens``), ``adaptive`` or ``disabled``."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1, le=BUDGET_TOKENS_MAX)


class OutputConfig(BaseModel):
    """``output_config``; ``effort`` is the thinking level."""

    model_config = ConfigDict(extra="ignore")

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None


class CountTokensRequest(BaseModel):
    """``POST /v1/messages/count_tokens`` body: the fields the gateway reads."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: list[Any] = Field(min_length=1)
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages`` body (API reference, "Messages"): the fields the gateway reads; the rest
    is forwarded as sent."""

    max_tokens: int = Field(ge=1)
    stream: bool = Field(default=False, strict=True)
    temperature: float | None = Field(default=None, ge=0)


class AnthropicDialect:
    """The Anthropic API's credentials, errors and keep-alive (``/v1/messages/count_tokens`` too)."""

    route = "/v1/messages/count_tokens"
    upstream_path = "/v1/messages/count_tokens"
    api = "messages"
    keep_alive = PING
    request_model: type[CountTokensRequest] = CountTokensRequest

    def credentials(self, headers: Mapping[str, str]) -> str:
        """``x-api-key``, else ``Authorization: Bearer``; 401 when neither is there, or when both are
        and name different secrets (which one counts would be a guess: the caller may mean the other)."""
        key = headers.get("x-api-key")
        authorization = headers.get("authorization")
        if key is None:
            if not authorization:
                raise unauthorized("Missing API key: send 'x-api-key: <key>'.")
            return bearer_token(authorization)
        key = key.strip(" \t")
        if not key:
            raise unauthorized("Empty x-api-key header.")
        if authorization is not None and bearer_token(authorization) != key:
            raise unauthorized("x-api-key and Authorization name different keys: send one of them.")
        return key

    def error_body(self, error: GatewayError) -> dict[str, Any]:
        return error_body(error)

    def parse(self, body: dict[str, Any]) -> Parsed:
        """``body`` validated by :attr:`request_model`; 400 naming the first bad field."""
        try:
            request = self.request_model.model_validate(body)
        except ValidationError as exc:
            raise invalid_request(exc.errors()) from None
        return Parsed(request.model, bool(getattr(request, "stream", False)), request, body)

    def prepare(self, parsed: Parsed, context: Context) -> Prepared:
        raise NotImplementedError  # count_tokens takes no slot: it is no exchange

    def forwarded(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The client's Anthropic headers that go on to vLLM; 400 for one that is not a short list of
        names (:data:`FORWARDED_VALUE`, :data:`FORWARDED_MAX_BYTES`)."""
        sent = {name: headers[name].strip(" \t") for name in FORWARDED_HEADERS if name in headers}
        for name, value in sent.items():
            if len(value) > FORWARDED_MAX_BYTES or not FORWARDED_VALUE.fullmatch(value):
                raise GatewayError(
                    "invalid_request",
                    f"The {name} header must be comma-separated names, {FORWARDED_MAX_BYTES} bytes at most.",
                    param=name,
                )
        return sent

    def normalize(self, parsed: Parsed, principal: Principal, settings: Settings) -> dict[str, Any]:
        """The body with thinking written as DeepSeek-V4's template controls, under the field policy."""
        request: CountTokensRequest = parsed.request
        payload = parsed.body
        check_fields(payload, principal, settings, self.api)
        default = as_level(principal.default_thinking or settings.default_thinking)
        thinking = request.thinking
        output = payload.get("output_config")
        effort = request.output_config.effort if request.output_config else None
        resolved = resolve_thinking(
            {
                "chat_template_kwargs": payload.get("chat_template_kwargs"),
                "thinking": None if thinking is None else {"type": _on_off(thinking.type)},
                "reasoning_effort": effort,
            },
            default,
        )
        if isinstance(output, dict) and "effort" in output:
            payload["output_config"] = {k: v for k, v in output.items() if k != "effort"}
        if thinking is not None and thinking.type == "disabled":
            del payload["thinking"]
        set_template_thinking(payload, resolved)
        return payload


def _on_off(kind: str) -> str:
    return "disabled" if kind == "disabled" else "enabled"


class Messages(AnthropicDialect):
    """The Messages dialect."""

    route = "/v1/messages"
    upstream_path = "/v1/messages"
    request_model = MessagesRequest

    def prepare(self, parsed: Parsed, context: Context) -> Prepared:
        request: MessagesRequest = parsed.request
        payload = self.normalize(parsed, context.principal, context.settings)
        translator = MessagesTranslator()
        return Prepared(
            json_codec.dumps_kept(payload),
            request.stream,
            request.max_tokens,
            "max_tokens",
            1,
            translator,
            count=messages_count(payload),
        )


class MessagesTranslator:
    """:class:`~gateway.dialects.base.Translator` of Messages responses: relayed unchanged, observed."""

    def __init__(self) -> None:
        self._usage: dict[str, Any] = {}

    def knowing(self, shown: ReasoningShown) -> None:
        """Nothing to know: vLLM's Messages route splits the reasoning itself."""

    def ends(self, event: bytes, data: bytes | None) -> bool:
        """``event: message_stop``."""
        return event_name(event) == b"message_stop"

    def error_event(self, error: GatewayError, telemetry: dict[str, Any] | None = None) -> Step:
        """``event: error`` with the error object (the Anthropic SDKs raise it)."""
        return Step([b"event: error\ndata: " + json_codec.dumps(error_body(error)) + b"\n\n"])

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step:
        """One event, unchanged, with its facts."""
        if data is None:
            return Step([event])
        obj = json_object(data, "a Messages event")
        kind = obj.get("type")
        if kind == "content_block_delta":
            reasoning, content = _chars(obj.get("delta"), DELTA_TEXT)
            return Step([event], Observation(output=True, reasoning_chars=reasoning, content_chars=content))
        if kind == "message_start":
            message = obj.get("message")
            self._merge(message.get("usage") if isinstance(message, dict) else None)
            return Step([event], Observation(usage=dict(self._usage), final=True))
        if kind == "message_delta":
            delta = obj.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            self._merge(obj.get("usage"))
            return Step(
                [event], Observation(finish_reason=_finish(reason), usage=dict(self._usage), final=True)
            )
        return Step([event])

    def answer(self, body: bytes) -> Answer:
        """A whole message, unchanged, with its usage, stop reason and block sizes."""
        obj = json_object(body, "the response")
        reasoning = content = 0
        for block in obj.get("content") or ():
            r, c = _chars(block, BLOCK_TEXT)
            reasoning, content = reasoning + r, content + c
        self._merge(obj.get("usage"))
        seen = Observation(
            output=bool(reasoning or content),
            reasoning_chars=reasoning,
            content_chars=content,
            finish_reason=_finish(obj.get("stop_reason")),
            usage=dict(self._usage),
            final=True,
        )
        return Answer(body, seen)

    def _merge(self, usage: Any) -> None:
        """Anthropic usage (``input_tokens`` + cache reads and writes, ``output_tokens``) merged into
        OpenAI form: ``message_start`` has the input, ``message_delta`` the output so far."""
        if not isinstance(usage, dict):
            return
        inputs = [
            usage.get(name)
            for name in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        ]
        if any(isinstance(n, int) for n in inputs):
            self._usage["prompt_tokens"] = sum(n for n in inputs if isinstance(n, int))
            cached = usage.get("cache_read_input_tokens")
            if isinstance(cached, int):
                self._usage["prompt_tokens_details"] = {"cached_tokens": cached}
        output = usage.get("output_tokens")
        if isinstance(output, int):
            self._usage["completion_tokens"] = output


def _finish(reason: Any) -> str | None:
    return FINISH_REASONS.get(reason, reason) if isinstance(reason, str) else None


#: Where a ``content_block_delta``'s ``delta`` and a whole message's content block keep their text,
#: by ``type``, and whether it is reasoning.
DELTA_TEXT: Mapping[str, tuple[str, bool]] = {
    "thinking_delta": ("thinking", True),
    "text_delta": ("text", False),
    "input_json_delta": ("partial_json", False),
}
BLOCK_TEXT: Mapping[str, tuple[str, bool]] = {"thinking": ("thinking", True), "text": ("text", False)}


def _chars(part: Any, where: Mapping[str, tuple[str, bool]]) -> tuple[int, int]:
    """(reasoning, answer) characters of a delta or content block; a whole ``tool_use`` block counts
    its input as JSON."""
    if not isinstance(part, dict):
        return 0, 0
    kind = part.get("type")
    if kind == "tool_use" and where is BLOCK_TEXT:
        return 0, len(json_codec.dumps(part.get("input")))
    field, reasoning = where.get(kind, ("", False)) if isinstance(kind, str) else ("", False)
    chars = text_length(part.get(field))
    return (chars, 0) if reasoning else (0, chars)


COUNT_TOKENS = AnthropicDialect()
MESSAGES = Messages()
