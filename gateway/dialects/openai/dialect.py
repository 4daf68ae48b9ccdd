"""What the OpenAI dialects (chat completions, text completions) share: Bearer credentials, OpenAI's
error shape, usage always asked for, and the translator over OpenAI-shaped responses.

Error shape (OpenAI API reference, "Error codes"): ``{"error": {"message", "type", "param", "code"}}``;
after a stream has started, the same object as one ``data:`` event (what the OpenAI SDKs raise on).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dspark_common import json_codec
from gateway.dialects.base import Answer, Context, Parsed, Prepared, Step
from gateway.dialects.fields import sequences
from gateway.dialects.openai.chunks import observation
from gateway.dialects.openai.client_view import ClientView
from gateway.dialects.openai.models import InferenceRequest
from gateway.dialects.openai.normalize import Normalized
from gateway.dialects.openai.rewrite import StreamRewriter, rewrite_body
from gateway.dialects.prompt_count import TokenCount
from gateway.dialects.sse import DONE, KEEP_ALIVE_COMMENT
from gateway.dialects.wire import bearer_token, json_object
from gateway.errors import GatewayError, invalid_request
from gateway.reasoning import Markers
from gateway.reasoning.policy import ReasoningPolicy, ReasoningShown, SplitMode


def error_body(error: GatewayError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": error.message, "type": error.type, "param": error.param, "code": error.code}}


class OpenAIDialect:
    """The OpenAI API's credentials, errors and request parsing; subclasses add the body's normalisation
    (:meth:`prepare`) for their route."""

    route = ""
    upstream_path = ""
    api = "openai"
    keep_alive = KEEP_ALIVE_COMMENT
    request_model: type[InferenceRequest] = InferenceRequest

    def credentials(self, headers: Mapping[str, str]) -> str:
        """``Authorization: Bearer <key or JWT>``."""
        return bearer_token(headers.get("authorization"))

    def error_body(self, error: GatewayError) -> dict[str, Any]:
        return error_body(error)

    def forwarded(self, headers: Mapping[str, str]) -> dict[str, str]:
        """No request header goes on to vLLM (it is sent ``x-request-id`` only)."""
        return {}

    def parse(self, body: dict[str, Any]) -> Parsed:
        """``body`` validated by :attr:`request_model`; 400 ``invalid_request`` naming the first bad field."""
        try:
            request = self.request_model.model_validate(body)
        except ValidationError as exc:
            raise invalid_request(exc.errors()) from None
        return Parsed(request.model, request.stream, request, body)

    def prepare(self, parsed: Parsed, context: Context) -> Prepared:
        raise NotImplementedError


def finish(
    request: InferenceRequest,
    payload: dict[str, Any],
    normalized: Normalized,
    mode: SplitMode,
    context: Context,
    output: tuple[int | None, str],
    count: TokenCount | None,
) -> Prepared:
    """The :class:`Prepared` of an OpenAI request whose ``payload`` (the body to send, as a dict) is
    normalised (``normalized``), its reasoning split by ``mode``: usage asked for on every stream
    chunk (telemetry needs it, whatever the client asked; :class:`ClientView` gives the client what
    it asked for), vLLM's per-request ``metrics`` shown only to a client that sent
    ``include_metrics: true``. ``output``: the output budget and the name of its field; ``count``:
    how the backend counts the prompt."""
    if mode == "off" and not normalized.include_reasoning:
        payload["include_reasoning"] = False  # untouched passthrough: let vLLM drop it
    policy = ReasoningPolicy(
        mode=mode,
        thinking=normalized.thinking.on,
        fields=context.settings.reasoning_fields,
        include_reasoning=normalized.include_reasoning,
        tools=callable_tools(payload),
        markers=Markers(context.settings.reasoning_start, context.settings.reasoning_end),
        opened=normalized.opened,
        structured=normalized.structured,
    )
    asks = sequences(payload, context.settings.max_n)
    include_metrics = payload.pop("include_metrics", False) is True
    asked = payload.get("stream_options") or {}
    if request.stream:
        payload["stream_options"] = {**asked, "include_usage": True, "continuous_usage_stats": True}
    view = ClientView(
        include_usage=asked.get("include_usage") is True,
        continuous_usage=asked.get("continuous_usage_stats") is True,
        include_metrics=include_metrics,
        telemetry=context.telemetry,
    )
    budget, param = output
    translator = OpenAITranslator(policy, view)
    return Prepared(
        json_codec.dumps_kept(payload), request.stream, budget, param, asks, translator, count=count
    )


#: No function may be called (one object for every such request: each ``frozenset()`` is a new one).
NO_TOOLS: frozenset[str] = frozenset()


def callable_tools(payload: dict[str, Any]) -> frozenset[str]:
    """The functions the model may call for this request: those ``tools`` declares, unless
    ``tool_choice`` is ``"none"`` (OpenAI API reference, "tool_choice"); none on a text completion."""
    tools = payload.get("tools")
    if payload.get("tool_choice") == "none" or not isinstance(tools, list):
        return NO_TOOLS
    functions = (tool.get("function") for tool in tools if isinstance(tool, dict))
    names = (function.get("name") for function in functions if isinstance(function, dict))
    return frozenset(name for name in names if isinstance(name, str))


class OpenAITranslator:
    """:class:`~gateway.dialects.base.Translator` of OpenAI-shaped responses (chat and text completions)."""

    def __init__(self, policy: ReasoningPolicy, view: ClientView) -> None:
        self._policy = policy
        self._view = view
        self._known = ReasoningShown()
        self._stream: StreamRewriter | None = None

    def knowing(self, shown: ReasoningShown) -> None:
        """What the answering backend showed of its reasoning output before (read at the first event)."""
        self._known = shown

    def _rewriter(self) -> StreamRewriter:
        """The stream's rewriter, made at its first event: the backend answering is known by then."""
        if self._stream is None:
            self._stream = StreamRewriter(self._policy, self._known, self._view)
        return self._stream

    def ends(self, event: bytes, data: bytes | None) -> bool:
        """``data: [DONE]``."""
        return data == DONE

    def error_event(self, error: GatewayError, telemetry: dict[str, Any] | None = None) -> Step:
        """What the stream still held (:meth:`StreamRewriter.flush`: text, the usage chunk with
        ``telemetry``), then OpenAI's error object as one ``data:`` event (what the OpenAI SDKs raise on)."""
        step = self._stream.flush(telemetry) if self._stream is not None else Step([])
        step.events.append(b"data: " + json_codec.dumps(error_body(error)) + b"\n\n")
        return step

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step:
        """One upstream SSE event: :meth:`StreamRewriter.step`."""
        return self._rewriter().step(event, data, telemetry)

    def answer(self, body: bytes) -> Answer:
        """A non-stream body: split, observed, shown as the client asked (a JSON object: it takes the
        telemetry object when asked)."""
        obj = json_object(body, "the response")
        reasoning_chars, content_chars, dropped, shown = rewrite_body(obj, self._policy, self._known)
        seen = observation(obj, obj.get("choices") or [], True, reasoning_chars, content_chars, dropped)
        self._view.apply_body(obj)
        return Answer(obj, seen, shown if shown is not self._known else None)


#: The OpenAI dialect of the routes that are not inference (the admin API, ``/v1/models``, health):
#: Bearer credentials and OpenAI's error shape.
OPENAI = OpenAIDialect()
