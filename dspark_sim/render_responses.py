"""Responses API objects as vLLM 0.32 sends them (pure builders and the stream's state machine).

Sources, all in vllm/entrypoints/openai/responses/: the response object is ``ResponsesResponse``
(``from_request`` in protocol.py, dumped whole: unset fields are null), its usage is built in
``responses_full_generator`` (serving.py: ``reasoning_tokens`` is 0, the DeepSeek parsers count
none; the per-turn lists are empty for a single turn), non-stream output items come from
``build_response_output_items`` (utils.py) and stream events from ``SimpleStreamingEventProcessor``
(streaming_events.py): one item per run of reasoning, text or call, each opened
(``output_item.added``, ``content_part.added``), filled by deltas and closed (``...done``,
``content_part.done``, ``output_item.done``); every event has a ``sequence_number`` from 0. The
stream starts with ``response.created`` and ``response.in_progress`` before any token and ends with
``response.completed``, whose ``output`` is the items as streamed (same ids). A response cut by
``max_output_tokens`` has status "incomplete" and ``incomplete_details.reason`` "max_output_tokens".
Field sets and order are those of the openai 3.57 types vLLM dumps (``phase``, ``namespace``...).
"""

from __future__ import annotations

import uuid
from typing import Any

from .protocol_responses import ResponsesRequest
from .render import Envelope
from .sequence import Step
from .streams import Generation


def new_response_id() -> str:
    """A response id shaped like vLLM's default ``request_id``."""
    return f"resp_{uuid.uuid4().hex[:16]}"


def skeleton(req: ResponsesRequest, env: Envelope, max_output_tokens: int) -> dict[str, Any]:
    """The response object before generation: what vLLM echoes from the request, status
    "in_progress", no output, no usage (``max_output_tokens`` is the effective cap)."""
    return {
        "id": env.id,
        "created_at": env.created,
        "incomplete_details": None,
        "instructions": req.instructions,
        "metadata": _extra(req, "metadata"),
        "model": env.model,
        "object": "response",
        "output": [],
        "parallel_tool_calls": _extra(req, "parallel_tool_calls", True),
        "temperature": _extra(req, "temperature", 1.0),
        "tool_choice": req.echoed_tool_choice,
        "tools": req.tools,
        "top_p": _extra(req, "top_p", 1.0),
        "background": req.background,
        "max_output_tokens": max_output_tokens,
        "max_tool_calls": _extra(req, "max_tool_calls"),
        "previous_response_id": req.previous_response_id,
        "prompt": None,
        "reasoning": req.reasoning,
        "service_tier": _extra(req, "service_tier", "auto"),
        "status": "in_progress",
        "text": _extra(req, "text"),
        "top_logprobs": None,
        "truncation": _extra(req, "truncation", "disabled"),
        "usage": None,
        "user": _extra(req, "user"),
        "presence_penalty": _extra(req, "presence_penalty", 0.0),
        "frequency_penalty": _extra(req, "frequency_penalty", 0.0),
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }


def finished(base: dict[str, Any], gen: Generation, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The response object once generation is over: its items, status and usage (and vLLM's
    per-request ``metrics`` when the server enables them)."""
    cut = gen.output.finish_reason == "length"
    body = {
        **base,
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": items,
        "status": "incomplete" if cut else "completed",
        "usage": usage(gen.seq.prompt_tokens, gen.seq.generated, gen.seq.cached_tokens),
    }
    metrics = gen.metrics()
    if metrics is not None:
        body["metrics"] = metrics
    return body


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """Responses usage, tokens (``cached_tokens``: of the input, found in the prefix cache)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + output_tokens,
    }


def output_items(gen: Generation) -> list[dict[str, Any]]:
    """Non-stream ``output``: a reasoning item, a message, a function call, each only if present."""
    output = gen.output
    span = output.span(split=gen.split_reasoning)
    items = []
    if span.reasoning:
        items.append(_reasoning_item(f"rs_{_hex()}", span.reasoning, None))
    if span.content:
        items.append(_message_item(f"msg_{_hex()}", span.content, "completed"))
    if output.call is not None:
        items.append(_call_item(f"fc_{_hex()}", gen.call_id, output.call.name, span.arguments, "completed"))
    return items


class ResponsesStream:
    """The Responses stream of one generation (a ``streams.Dialect``)."""

    def __init__(self, base: dict[str, Any], gen: Generation) -> None:
        self._base = base
        self._gen = gen
        self._sequence = 0
        self._index = 0  # output_index of the open item
        self._kind: str | None = None  # "reasoning", "text" or "call": the open item's
        self._item_id = ""
        self._text = ""  # the open item's text so far
        self._items: list[dict[str, Any]] = []  # closed items, as streamed

    def opening(self) -> list[dict[str, Any]]:
        """``response.created`` and ``response.in_progress``."""
        return [
            self._event("response.created", response=self._base),
            self._event("response.in_progress", response=self._base),
        ]

    def step(self, step: Step) -> list[dict[str, Any]]:
        """Each part of the step in vLLM's order (``split_delta``: reasoning, text, call), closing the
        open item and opening another when the kind changes."""
        span = self._gen.output.span(step.start, step.end, split=self._gen.split_reasoning)
        events: list[dict[str, Any]] = []
        for kind, delta in (("reasoning", span.reasoning), ("text", span.content), ("call", span.arguments)):
            if not delta:
                continue
            if kind != self._kind:
                events += self._close()
                events += self._open(kind)
            events.append(self._delta(delta))
        return events

    def closing(self) -> list[dict[str, Any]]:
        """The open item's done events, then ``response.completed``."""
        events = self._close()
        response = finished(self._base, self._gen, self._items)
        return [*events, self._event("response.completed", response=response)]

    def _event(self, type_: str, *, name: str | None = None, **fields: Any) -> dict[str, Any]:
        """An event with the next ``sequence_number``, its keys in the openai types' order
        (alphabetical; ``name``, added to ``function_call_arguments.done`` later, last)."""
        fields.update(sequence_number=self._sequence, type=type_)
        self._sequence += 1
        event = dict(sorted(fields.items()))
        if name is not None:
            event["name"] = name
        return event

    def _open(self, kind: str) -> list[dict[str, Any]]:
        self._kind, self._text = kind, ""
        where: dict[str, Any] = {"output_index": self._index}
        call = self._gen.output.call
        if kind == "call":
            assert call is not None
            self._item_id = f"fc_{_hex()}"
            item = _call_item(self._item_id, self._gen.call_id, call.name, "", "in_progress")
            return [self._event("response.output_item.added", item=item, **where)]
        part: dict[str, Any]
        if kind == "reasoning":
            self._item_id = f"rs_{_hex()}"
            item = {**_reasoning_item(self._item_id, "", "in_progress"), "content": None}
            part = {"text": "", "type": "reasoning_text"}
        else:
            self._item_id = f"msg_{_hex()}"
            item = {**_message_item(self._item_id, "", "in_progress"), "content": []}
            part = {**_text_part(""), "logprobs": []}
        return [
            self._event("response.output_item.added", item=item, **where),
            self._event(
                "response.content_part.added", content_index=0, item_id=self._item_id, part=part, **where
            ),
        ]

    def _delta(self, delta: str) -> dict[str, Any]:
        self._text += delta
        where: dict[str, Any] = {"item_id": self._item_id, "output_index": self._index}
        if self._kind == "call":
            return self._event("response.function_call_arguments.delta", delta=delta, **where)
        if self._kind == "reasoning":
            return self._event("response.reasoning_text.delta", content_index=0, delta=delta, **where)
        return self._event("response.output_text.delta", content_index=0, delta=delta, logprobs=[], **where)

    def _close(self) -> list[dict[str, Any]]:
        if self._kind is None:
            return []
        text = self._text
        where: dict[str, Any] = {"item_id": self._item_id, "output_index": self._index}
        call = self._gen.output.call
        events = []
        if self._kind == "call":
            assert call is not None
            item = _call_item(self._item_id, self._gen.call_id, call.name, text, "completed")
            events.append(
                self._event("response.function_call_arguments.done", name=call.name, arguments=text, **where)
            )
        elif self._kind == "reasoning":
            item = _reasoning_item(self._item_id, text, "completed")
            part = {"text": text, "type": "reasoning_text"}
            events.append(self._event("response.reasoning_text.done", content_index=0, text=text, **where))
            events.append(self._event("response.content_part.done", content_index=0, part=part, **where))
        else:
            item = _message_item(self._item_id, text, "completed")
            done: dict[str, Any] = {"content_index": 0, "logprobs": [], "text": text}
            events.append(self._event("response.output_text.done", **done, **where))
            events.append(
                self._event("response.content_part.done", content_index=0, part=_text_part(text), **where)
            )
        events.append(self._event("response.output_item.done", item=item, output_index=self._index))
        self._items.append(item)
        self._index += 1
        self._kind = None
        return events


def _reasoning_item(item_id: str, text: str, status: str | None) -> dict[str, Any]:
    content = [{"text": text, "type": "reasoning_text"}]
    return {
        "id": item_id,
        "summary": [],
        "type": "reasoning",
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "content": [_text_part(text)],
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": None}


def _call_item(item_id: str, call_id: str | None, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        "async": None,
        "caller": None,
        "namespace": None,
        "status": status,
    }


def _extra(req: ResponsesRequest, name: str, default: Any = None) -> Any:
    """A request field the simulator only echoes (kept by ``extra="allow"``), or vLLM's default."""
    extra = req.model_extra or {}
    value = extra.get(name)
    return default if value is None else value


def _hex() -> str:
    return uuid.uuid4().hex[:16]
