"""Rewrite OpenAI-shaped upstream responses for the client: reasoning split and field policy, in one pass.

:class:`StreamRewriter` takes raw SSE events (``step(event) -> [events]``) and keeps one
:class:`~gateway.reasoning.policy.ChoiceSplit` per choice index; :func:`rewrite_body` does the same
for a whole non-stream response. Chat (``chat.completion[.chunk]``: ``delta``/``message``) and text
completions (``text_completion``: ``text``) are both handled. Each step returns what its chunk carried
for telemetry (an :class:`~gateway.telemetry.observation.Observation`) and what the answer showed of
the backend's reasoning output when that is news (:class:`~gateway.reasoning.policy.ReasoningShown`),
as a :class:`~gateway.dialects.base.Step`. Reading a chunk (parse, shape check,
observation) is :mod:`.chunks`; writing one choice's split is :mod:`.choice_writer`.

Invariants: events the policy does not change are forwarded byte for byte; ``id``, ``index``,
``finish_reason`` and ``logprobs`` stay as upstream sent them (except ``stop`` -> ``tool_calls`` when
DSML markup became tool calls); no empty delta is invented — a chunk whose only text was held back
(a possible marker) is dropped, and the text comes out with the next one. An event's SSE fields other
than ``data`` go on with it whether or not its data was rewritten; a dropped event's ``id`` and
``retry`` go on with the next event sent (:mod:`gateway.dialects.sse`). A client that asked for
``stream_options.include_usage`` gets OpenAI's closing ``choices: []`` usage chunk even from an
upstream that put usage only on chunks with choices (API reference, "Create chat completion": "an
additional chunk will be streamed before the data: [DONE] message ... the choices field will always
be an empty array"): it is made from the last usage seen, before ``[DONE]``. A client that asked for
the gateway's ``telemetry`` gets it on that closing chunk, as of the backend's end: the chunk waits
for ``[DONE]``, whose step is handed the object.
"""

from __future__ import annotations

from typing import Any

from dspark_common import json_codec
from gateway.dialects.base import Step, text_length
from gateway.dialects.openai.choice_writer import ChoiceWriter
from gateway.dialects.openai.chunks import (
    SLOTS,
    check_shape,
    observation,
    slot_of,
    text_fields,
)
from gateway.dialects.openai.client_view import ClientView
from gateway.dialects.sse import DONE, lasting_fields, with_data
from gateway.dialects.wire import MalformedChunkError, json_object
from gateway.reasoning import Markers
from gateway.reasoning.policy import UPSTREAM_REASONING_FIELDS, ReasoningPolicy, ReasoningShown
from gateway.telemetry.observation import Observation

#: The fields a chunk the gateway adds (closing usage, held text of a broken stream) copies from the
#: chunks before it.
_ENVELOPE = ("id", "object", "created", "model", "system_fingerprint")


def _event(obj: dict[str, Any]) -> bytes:
    """A chunk the gateway adds, as one SSE event."""
    return b"data: " + json_codec.dumps(obj) + b"\n\n"


def _rewritten(event: bytes, data: bytes, obj: dict[str, Any]) -> bytes:
    """``event`` (whose payload was ``data``) carrying ``obj`` instead, its other fields kept."""
    if len(event) == len(data) + 8:  # "data: " + data + a 2-byte end: its one line (vLLM's every event)
        return _event(obj)
    return with_data(event, json_codec.dumps(obj))


class StreamRewriter:
    """One pass over an upstream SSE stream: ``step(raw event) -> Step`` (the raw events for the client,
    what the chunk showed).

    Per chunk: parse once, split reasoning per choice, observe it, apply the client's
    :class:`ClientView`; re-encode only if something changed. ``known``: what the backend's earlier
    answers showed of its reasoning output.
    """

    def __init__(self, policy: ReasoningPolicy, known: ReasoningShown, view: ClientView) -> None:
        self._policy = policy
        self._known = known
        self._learnt = False  # the chunk being rewritten showed something new of the backend
        self._seen: Observation | None = None  # the chunk being rewritten's facts
        self._view = view
        self._passthrough = policy.passthrough
        self._choices: dict[int, ChoiceWriter] = {}
        self._reported: dict[int, ReasoningShown] = {}  # what each choice's split had shown, last step
        self._dropped = 0  # tool calls dropped in the chunk being rewritten
        self._carried = b""  # the id / retry lines of events not passed on, for the next one sent
        self._last: dict[str, Any] | None = None  # the last chunk with choices
        self._usage: dict[str, Any] | None = None  # the last usage seen on a chunk with choices
        self._closed = False  # the upstream sent its closing usage chunk (usage with choices: [])
        self._closing_chunk: dict[str, Any] | None = None  # held for the telemetry object

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step:
        """Rewrite one whole SSE event (bytes including its blank-line terminator) whose ``data``
        payload is ``data`` (:func:`~gateway.dialects.sse.event_data`; None if it has none);
        ``telemetry``: the client's telemetry object, for the closing usage chunk (handed to ``[DONE]``).

        Raises :class:`MalformedChunkError` for a ``data`` payload that is not a JSON object (a client
        SDK would fail on it with a parse error) or a chunk whose choices are not OpenAI-shaped.
        """
        self._seen, self._learnt = None, False
        out = self._rewrite(event, data, telemetry)
        if not out:
            self._carried += lasting_fields(event)
        elif self._carried:
            out[0] = self._carried + out[0]
            self._carried = b""
        return Step(out, self._seen, self._known if self._learnt else None)

    def _rewrite(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None) -> list[bytes]:
        if data is None:
            return [event]
        if data == DONE:
            return self._closing(telemetry) + [event]
        obj = json_object(data, "a data line")
        if "error" in obj:
            return [event]
        choices = obj.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise MalformedChunkError("choices is not a list")
        final = not choices  # vLLM's usage chunk: choices == []
        usage = obj.get("usage")
        if not final:
            self._last = obj
            if type(usage) is dict:
                self._usage = usage
        elif type(usage) is dict:
            self._closed = True
        self._dropped = 0
        changed, reasoning_chars, content_chars = self._split(obj, choices) if choices else (False, 0, 0)
        self._seen = observation(
            obj, obj.get("choices") or [], final, reasoning_chars, content_chars, self._dropped
        )
        changed = self._view.apply_chunk(obj, final) or changed
        if final and self._view.telemetry and type(usage) is dict and self._closing_chunk is None:
            self._closing_chunk = obj  # the usage chunk: sent before [DONE], with the telemetry object
            return []
        if not changed:
            return [event]
        if obj.get("choices"):
            return [_rewritten(event, data, obj)]
        if not final:
            return []  # its text is held back; its usage is cumulative and rides on the next chunk
        return [] if self._view.says_nothing(obj) else [_rewritten(event, data, obj)]

    def _envelope(self) -> dict[str, Any]:
        last = self._last or {}
        return {name: last[name] for name in _ENVELOPE if name in last}

    def _closing(self, telemetry: dict[str, Any] | None) -> list[bytes]:
        """The closing usage chunk, as the client asked to see it, with ``telemetry`` when given: the
        upstream's (held for it), or one made from the last usage seen when the upstream put its usage
        on chunks with choices only; nothing when the client asked for neither usage nor telemetry."""
        chunk = self._closing_chunk
        self._closing_chunk = None
        if chunk is None:
            if self._closed or self._usage is None:
                return []
            chunk = {**self._envelope(), "choices": [], "usage": self._usage}
            self._view.apply_chunk(chunk, True)
        if telemetry is not None:
            chunk["telemetry"] = telemetry
        return [] if self._view.says_nothing(chunk) else [_event(chunk)]

    def flush(self, telemetry: dict[str, Any] | None = None) -> Step:
        """What the split still holds when the stream ends without its last event (it broke): one
        chunk with each choice's held text — reasoning where a marker showed it, else answer —, then
        the usage chunk held for the telemetry object, with ``telemetry``; no events when nothing is
        held."""
        closing = self._closing(telemetry) if self._closing_chunk is not None else []
        if self._last is None or self._passthrough:
            return Step(closing)
        slot = slot_of(self._last)
        choices, reasoning_chars, content_chars = [], 0, 0
        for index, writer in self._choices.items():
            choice: dict[str, Any] = {"index": index, "finish_reason": None}
            if slot:
                choice[slot] = {}
            _, out = writer.rewrite(choice, slot, closing=True)
            target = choice[slot] if slot else choice
            if any(target.get(name) for name in ("content", "text", "tool_calls", *writer.policy.fields)):
                choices.append(choice)
            reasoning_chars += len(out.reasoning)
            content_chars += len(out.content)
        if not choices:
            return Step(closing)
        chunk = {**self._envelope(), "choices": choices}
        seen = observation(chunk, choices, False, reasoning_chars, content_chars)
        return Step([_event(chunk), *closing], seen)

    def _split(self, obj: dict[str, Any], choices: list[Any]) -> tuple[bool, int, int]:
        kind = obj.get("object")  # slot_of(obj), inline: it runs for every chunk
        slot = SLOTS.get(kind) if isinstance(kind, str) else None
        if slot == "delta" and len(choices) == 1 and not self._passthrough:
            done = self._plain_delta(obj, choices[0])
            if done is not None:
                return done
        if not check_shape(choices, slot):
            return False, 0, 0
        if self._passthrough:
            return (uncut(choices, slot, self._policy.markers), *as_sent(choices, slot))
        kept, reasoning_chars, content_chars = [], 0, 0
        writers = self._choices
        for choice in choices:
            index = choice.get("index", 0)
            writer = writers.get(index) or self._new_writer(index)
            keep, out = writer.rewrite(choice, slot)
            reasoning_chars += len(out.reasoning)
            content_chars += len(out.content)
            self._dropped += out.tool_calls_dropped
            shown = writer.split.shown  # a new value only when the split learnt something
            if shown is not self._reported[index]:
                self._reported[index] = shown
                known = self._known.merged(shown)
                if known is not self._known:
                    self._known, self._learnt = known, True
            if keep:
                kept.append(choice)
        obj["choices"] = kept
        return True, reasoning_chars, content_chars

    def _plain_delta(self, obj: dict[str, Any], choice: Any) -> tuple[bool, int, int] | None:
        """The general path's result for most chunks of a stream, in a fraction of its steps; None
        when this chunk is not one of them (the general path then takes it).

        Such a chunk has one choice, not finishing, whose non-empty delta has string (or null) text
        and reasoning fields, for a choice already seen whose split passes them through
        (:meth:`ChoiceSplit.passes_through`): the upstream's reasoning goes under the client's field
        names, the text stays. tests/unit/dialects/test_rewrite.py checks it against the general path on
        generated streams.
        """
        if type(choice) is not dict or choice.get("finish_reason") is not None:
            return None
        delta, index = choice.get("delta"), choice.get("index", 0)
        writer = self._choices.get(index) if type(index) is int else None
        if writer is None or type(delta) is not dict or not delta:
            return None
        try:
            text, reasoning, reasoning_content = text_fields(delta, "content")
        except MalformedChunkError:
            return None  # the general path refuses it, with its own message
        has_fields = "reasoning" in delta or "reasoning_content" in delta
        upstream = reasoning is not None or reasoning_content is not None
        if not (has_fields or text) or not writer.split.passes_through(upstream, text):
            return None
        if has_fields:
            delta.pop("reasoning", None)
            delta.pop("reasoning_content", None)
        reasoning = (reasoning or "") + (reasoning_content or "")
        policy = writer.policy
        if reasoning and policy.include_reasoning:
            for name in policy.fields:
                delta[name] = reasoning
        if not delta and choice.get("logprobs") is None:
            obj["choices"] = []  # nothing left to send for it
        return True, len(reasoning), len(text or "")

    def _new_writer(self, index: int) -> ChoiceWriter:
        writer = self._choices[index] = ChoiceWriter(self._policy, self._known)
        self._reported[index] = self._known
        return writer


def rewrite_body(
    body: dict[str, Any], policy: ReasoningPolicy, known: ReasoningShown
) -> tuple[int, int, int, ReasoningShown]:
    """Apply the policy to a non-stream response in place; return its reasoning and answer characters,
    the tool calls dropped (no tools declared) and what the backend's answers showed of its reasoning
    output (``known`` and this one: the same object when it showed nothing new).

    Raises :class:`MalformedChunkError` if the choices are not OpenAI-shaped.
    """
    reasoning_chars = content_chars = dropped = 0
    choices = body.get("choices")
    if choices is not None and not isinstance(choices, list):
        raise MalformedChunkError("choices is not a list")
    if choices:
        check_shape(choices, slot_of(body))
    if policy.passthrough and choices:
        uncut(choices, slot_of(body), policy.markers)
        reasoning_chars, content_chars = as_sent(choices, slot_of(body))
    elif choices:
        slot = slot_of(body)
        for choice in choices:
            writer = ChoiceWriter(policy, known)
            _, out = writer.rewrite(choice, slot)
            reasoning_chars += len(out.reasoning)
            content_chars += len(out.content)
            dropped += out.tool_calls_dropped
            known = known.merged(writer.split.shown)
    return reasoning_chars, content_chars, dropped, known


def as_sent(choices: list[Any], slot: str | None) -> tuple[int, int]:
    """Reasoning and answer characters of choices the gateway passes on as the backend split them
    (``GATEWAY_REASONING_SPLIT=off``): reasoning where the backend put it (its ``reasoning`` or
    ``reasoning_content``), the rest answer — what the client gets, so what telemetry counts."""
    reasoning = content = 0
    for choice in choices:
        target = choice.get(slot) if slot else choice
        if not isinstance(target, dict):
            continue
        reasoning += next(
            (len(v) for n in UPSTREAM_REASONING_FIELDS if isinstance(v := target.get(n), str) and v), 0
        )
        content += text_length(target.get("content" if slot else "text"))
    return reasoning, content


def uncut(choices: list[Any], slot: str | None, markers: Markers) -> bool:
    """Take a marker ``max_tokens`` cut in two (``…</thi``) off the end of each choice that ends so,
    in place, as the split does (``GATEWAY_REASONING_SPLIT=off`` splits nothing, yet a piece of a
    marker is no text of the answer); whether any changed. vLLM sends a choice's last text with its
    finish reason, so the piece is in that chunk."""
    changed = False
    for choice in choices:
        target = choice.get(slot) if slot else choice
        if choice.get("finish_reason") != "length" or not isinstance(target, dict):
            continue
        for name in ("content" if slot else "text", *UPSTREAM_REASONING_FIELDS):
            text = target.get(name)
            if isinstance(text, str) and text:
                kept = markers.cut(text)
                changed = changed or kept != text
                target[name] = kept
                break  # the output ends with the answer when it has one
    return changed
