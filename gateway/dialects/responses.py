"""The OpenAI Responses API: ``POST /v1/responses`` (Codex CLI, the OpenAI Agents SDK), forwarded to
vLLM's own Responses route (vLLM 0.32, ``vllm/entrypoints/openai/responses``), which runs its
reasoning and tool parsers: the answer comes back as ``reasoning``, ``message`` and
``function_call`` output items and is relayed unchanged.

- Credentials and errors: OpenAI's (``Authorization: Bearer``; ``{"error": {...}}``). After a stream
  started, an ``event: error`` (API reference, "Streaming events": ``{"type": "error", "code",
  "message", "param", "sequence_number"}``) and ``response.failed``.
- Thinking: ``reasoning.effort`` (``none`` .. ``xhigh``), ``chat_template_kwargs`` (wins), else the
  key's default, written as DeepSeek-V4's ``chat_template_kwargs``; ``reasoning.effort`` itself is
  taken out (vLLM would hand the template an effort DeepSeek-V4 does not know).
- ``background: true`` is refused: the backend would go on generating after the request ends, outside
  the slots the gateway counts.
- Stored responses: the id of a response the backend may store (``store`` not false) is claimed for
  the caller's key (:mod:`gateway.storage.response_owners`); every id a request refers to —
  ``previous_response_id``, ``conversation`` (an id or ``{"id"}``), ``input`` items of type
  ``item_reference`` — must be one the key owns, else 404 (another key's is not found, as an unknown
  one). The gateway records response ids only (vLLM has no Conversations API and does not resolve
  item references), so the last two are found for no key: nothing unchecked reaches the backend.
- Telemetry: the first ``*.delta`` event of output is the first token; usage from
  ``response.completed`` (or ``.incomplete`` / ``.failed``), ``input_tokens`` / ``output_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dspark_common import json_codec
from gateway.dialects.base import Answer, Context, Parsed, Prepared, Step, text_length
from gateway.dialects.fields import check_fields
from gateway.dialects.openai.dialect import OpenAIDialect
from gateway.dialects.prompt_count import responses_count
from gateway.dialects.sse import event_name
from gateway.dialects.thinking import as_level, resolve_thinking, set_template_thinking
from gateway.dialects.wire import json_object
from gateway.errors import GatewayError
from gateway.reasoning.policy import ReasoningShown
from gateway.telemetry.observation import Observation

#: The events a Responses stream ends with (API reference, "Streaming events").
LAST_EVENTS = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})
#: Delta events that carry output, and whether it is reasoning.
OUTPUT_DELTAS: Mapping[str, bool] = {
    "response.output_text.delta": False,
    "response.refusal.delta": False,
    "response.function_call_arguments.delta": False,
    "response.reasoning_text.delta": True,
    "response.reasoning_summary_text.delta": True,
}


#: The longest id a request may refer to (the owners' table holds 128 characters).
MAX_ID_CHARS = 128


class Reasoning(BaseModel):
    """``reasoning``: its ``effort`` is the thinking level."""

    model_config = ConfigDict(extra="ignore")

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` body (API reference, "Create a model response"): the fields the
    gateway reads; the rest is forwarded as sent."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str | list[Any] | None = None
    stream: bool = Field(default=False, strict=True)
    max_output_tokens: int | None = Field(default=None, ge=1)
    reasoning: Reasoning | None = None
    store: bool | None = None
    previous_response_id: str | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    background: bool | None = None
    temperature: float | None = Field(default=None, ge=0)


class Responses(OpenAIDialect):
    """The Responses API dialect."""

    route = "/v1/responses"
    upstream_path = "/v1/responses"
    api = "responses"
    request_model = ResponsesRequest  # type: ignore[assignment]

    def prepare(self, parsed: Parsed, context: Context) -> Prepared:
        request: ResponsesRequest = parsed.request
        payload = parsed.body
        check_fields(payload, context.principal, context.settings, self.api)
        if request.background:
            message = "background responses are not served here: the gateway must see every sequence end."
            raise GatewayError("unsupported_field", message, param="background")
        default = as_level(context.principal.default_thinking or context.settings.default_thinking)
        effort = request.reasoning.effort if request.reasoning else None
        thinking = resolve_thinking(
            {"chat_template_kwargs": payload.get("chat_template_kwargs"), "reasoning_effort": effort}, default
        )
        reasoning = payload.get("reasoning")
        if isinstance(reasoning, dict) and "effort" in reasoning:
            payload["reasoning"] = {k: v for k, v in reasoning.items() if k != "effort"}
        set_template_thinking(payload, thinking)
        translator = ResponsesTranslator(stored=request.store is not False)
        budget = request.max_output_tokens
        return Prepared(
            json_codec.dumps_kept(payload),
            request.stream,
            budget,
            "max_output_tokens",
            1,
            translator,
            references(request, payload),
            responses_count(payload),
        )


def references(request: ResponsesRequest, payload: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """What the request refers to that the backend would look up by id, ``(param, id)``:
    ``previous_response_id``, ``conversation`` and ``input[i]`` items of type ``item_reference``;
    400 for a reference without a string id."""
    found: list[tuple[str, str]] = []
    if request.previous_response_id is not None:
        found.append(("previous_response_id", request.previous_response_id))
    conversation = payload.get("conversation")
    if conversation is not None:
        found.append(("conversation", _reference_id(conversation, "conversation", bare=True)))
    items = payload.get("input")
    for index, item in enumerate(items if isinstance(items, list) else ()):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            found.append((f"input[{index}].id", _reference_id(item, f"input[{index}]", bare=False)))
    return tuple(found)


def _reference_id(value: Any, param: str, bare: bool) -> str:
    """The id of a reference: ``{"id": str}``, or (``bare``) the string itself; 400 otherwise."""
    ref = value if bare and isinstance(value, str) else value.get("id") if isinstance(value, dict) else None
    if not isinstance(ref, str) or not 0 < len(ref) <= MAX_ID_CHARS:
        raise GatewayError(
            "invalid_request", f"{param} needs an id of 1 to {MAX_ID_CHARS} characters.", param=param
        )
    return ref


class ResponsesTranslator:
    """:class:`~gateway.dialects.base.Translator` of Responses API responses: relayed unchanged,
    observed; a response the backend may store is claimed for the caller (``stored``)."""

    def __init__(self, stored: bool) -> None:
        self._stored = stored
        self._sequence = -1  # the last event's sequence_number
        self._response_id: str | None = None  # from response.created

    def knowing(self, shown: ReasoningShown) -> None:
        """Nothing to know: vLLM's Responses route splits the reasoning itself."""

    def ends(self, event: bytes, data: bytes | None) -> bool:
        """``response.completed``, ``response.incomplete`` or ``response.failed``."""
        return event_name(event) in LAST_EVENTS

    def error_event(self, error: GatewayError, telemetry: dict[str, Any] | None = None) -> Step:
        """``event: error`` numbered after the last event relayed, then ``response.failed`` with the
        same error: the stream's last event (Codex CLI shows ``response.failed``'s message and retries;
        it takes a bare ``error`` event for a stream that was cut)."""
        code = error.code or error.type
        first = self._sequence + 1
        failed: dict[str, Any] = {"id": self._response_id, "object": "response", "status": "failed"}
        failed["error"] = {"code": code, "message": error.message}
        events: tuple[tuple[bytes, dict[str, Any]], ...] = (
            (b"error", {"type": "error", "code": code, "message": error.message, "param": error.param}),
            (b"response.failed", {"type": "response.failed", "response": failed}),
        )
        return Step(
            [
                b"event: "
                + name
                + b"\ndata: "
                + json_codec.dumps({**body, "sequence_number": first + i})
                + b"\n\n"
                for i, (name, body) in enumerate(events)
            ]
        )

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step:
        """One event, unchanged, with its facts."""
        if data is None:
            return Step([event])
        obj = json_object(data, "a Responses event")
        sequence = obj.get("sequence_number")
        if isinstance(sequence, int):
            self._sequence = sequence
        kind = obj.get("type")
        reasoning = OUTPUT_DELTAS.get(kind) if isinstance(kind, str) else None
        if reasoning is not None:
            chars = text_length(obj.get("delta"))
            seen = Observation(
                output=True,
                reasoning_chars=chars if reasoning else 0,
                content_chars=0 if reasoning else chars,
            )
            return Step([event], seen)
        if kind == "response.created":
            return Step([event], claimed=self._claim(obj.get("response")))
        if isinstance(kind, str) and kind.encode() in LAST_EVENTS:
            response = obj.get("response")
            if isinstance(response, dict):
                return Step(
                    [event], Observation(finish_reason=_finish(response), usage=_usage(response), final=True)
                )
        return Step([event])

    def answer(self, body: bytes) -> Answer:
        """A whole response, unchanged, with its usage, status and output sizes."""
        obj = json_object(body, "the response")
        reasoning = content = 0
        for item in obj.get("output") or ():
            if isinstance(item, dict):
                r, c = _item_chars(item)
                reasoning, content = reasoning + r, content + c
        seen = Observation(
            output=bool(reasoning or content),
            reasoning_chars=reasoning,
            content_chars=content,
            finish_reason=_finish(obj),
            usage=_usage(obj),
            final=True,
        )
        return Answer(body, seen, claimed=self._claim(obj))

    def _claim(self, response: Any) -> str | None:
        """The response's id, to be claimed for the caller when the backend may store it (else None)."""
        if isinstance(response, dict) and isinstance(response.get("id"), str):
            self._response_id = response["id"]
            if self._stored:
                return self._response_id
        return None


def _usage(response: dict[str, Any]) -> dict[str, Any] | None:
    """The Responses API's usage in OpenAI chat form (``input_tokens`` -> ``prompt_tokens`` ...)."""
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    return {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "prompt_tokens_details": {"cached_tokens": inputs.get("cached_tokens")}
        if isinstance(inputs, dict)
        else None,
        "completion_tokens_details": (
            {"reasoning_tokens": outputs.get("reasoning_tokens")} if isinstance(outputs, dict) else None
        ),
    }


def _finish(response: dict[str, Any]) -> str | None:
    """OpenAI's finish reason of a response: ``tool_calls`` when it calls a function, ``length`` when
    ``max_output_tokens`` cut it, its status otherwise (``completed`` -> ``stop``)."""
    status = response.get("status")
    output = response.get("output")
    if isinstance(output, list) and any(
        isinstance(i, dict) and i.get("type") == "function_call" for i in output
    ):
        return "tool_calls"
    if status == "completed":
        return "stop"
    details = response.get("incomplete_details")
    if status == "incomplete" and isinstance(details, dict) and details.get("reason") == "max_output_tokens":
        return "length"
    return status if isinstance(status, str) else None


def _item_chars(item: dict[str, Any]) -> tuple[int, int]:
    """(reasoning, answer) characters of one output item of a whole response."""
    kind = item.get("type")
    if kind == "function_call":
        return 0, text_length(item.get("arguments"))
    parts = item.get("content") if kind in ("message", "reasoning") else None
    chars = (
        sum(text_length(p.get("text")) for p in parts if isinstance(p, dict))
        if isinstance(parts, list)
        else 0
    )
    return (chars, 0) if kind == "reasoning" else (0, chars)


RESPONSES = Responses()
