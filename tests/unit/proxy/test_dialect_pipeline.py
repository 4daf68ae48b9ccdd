"""Every dialect through the same request pipeline (chat completions, the Responses API, Anthropic
Messages), in one event loop in front of the in-memory upstream: the slot is handed on at the
dialect's own last event, a broken stream ends with the dialect's error event, a queued stream gets
the dialect's keep-alive, a client that leaves frees everything, limits answer in the dialect's
shape, and each request publishes one record with its tokens, first token and finish reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.auth.principal import Principal
from gateway.dialects.base import Dialect
from gateway.dialects.messages import MESSAGES, PING
from gateway.dialects.openai.chat import CHAT
from gateway.dialects.responses import RESPONSES
from gateway.errors import GatewayError
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.respond import ExchangeResponse
from tests.support.asgi_call import Call
from tests.support.fake_upstream import Answer, FakeUpstream
from tests.support.pipeline import DONE, KEY, MODEL, assert_nothing_held, build, chunk, settled


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


@dataclass(frozen=True)
class Script:
    """A dialect, a request body in it, and an upstream stream of ``Hel`` + ``lo`` (3 prompt tokens, 2
    completion tokens, finished normally) in its shape, split before its last event."""

    dialect: Dialect
    body: Callable[[bool], dict[str, Any]]
    stream: tuple[bytes, ...]
    last: bytes
    whole: bytes
    error: Callable[[bytes], dict[str, Any]]  # the error object of a JSON error body or error event
    keep_alive: bytes


def _messages_error(data: bytes) -> dict[str, Any]:
    obj = json.loads(data)
    assert obj["type"] == "error" and set(obj["error"]) == {"type", "message"}
    return obj["error"]


def _openai_error(data: bytes) -> dict[str, Any]:
    obj = json.loads(data)
    return obj.get("error", obj)  # an error body, or a Responses error event


MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "stop_reason": None}
RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
COMPLETED = {
    **RESPONSE,
    "status": "completed",
    "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hello"}]}],
    "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
}

SCRIPTS = {
    "chat": Script(
        CHAT,
        lambda stream: {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        (chunk(1, content="Hel"), chunk(2, content="lo", finish="stop")),
        DONE,
        json.dumps(
            {
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "Hello"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        ).encode(),
        _openai_error,
        b": keep-alive\n\n",
    ),
    "messages": Script(
        MESSAGES,
        lambda stream: {
            "model": MODEL,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
            "stream": stream,
        },
        (
            sse("message_start", {"type": "message_start", "message": {**MESSAGE, "content": [],
                "usage": {"input_tokens": 3, "output_tokens": 0}}}),
            sse("content_block_start", {"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"}}),
            sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "lo"}}),
            sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2}}),
        ),
        sse("message_stop", {"type": "message_stop"}),
        json.dumps({**MESSAGE, "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 3, "output_tokens": 2}}).encode(),
        _messages_error,
        PING,
    ),
    "responses": Script(
        RESPONSES,
        lambda stream: {"model": MODEL, "input": "hi", "stream": stream},
        (
            sse("response.created", {"type": "response.created", "sequence_number": 0, "response": RESPONSE}),
            sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 1,
                "delta": "Hel"}),
            sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 2,
                "delta": "lo"}),
        ),
        sse("response.completed",
            {"type": "response.completed", "sequence_number": 3, "response": COMPLETED}),
        json.dumps(COMPLETED).encode(),
        _openai_error,
        b": keep-alive\n\n",
    ),
}  # fmt: skip


def call(
    pipeline: Pipeline, script: Script, body: dict[str, Any], key: Principal = KEY, rid: str = "r"
) -> Call:
    dialect = script.dialect
    return Call(ExchangeResponse(pipeline, dialect, key), dialect.route, body, state={"request_id": rid})


def events(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n")[:-1]]


def payload(event: bytes) -> bytes:
    return next(line[6:] for line in event.split(b"\n") if line.startswith(b"data: "))


async def streaming(script: Script) -> tuple[Answer, FakeUpstream, Pipeline, Any, Call]:
    """One stream request in ``script``'s dialect that has reached the upstream, nothing answered yet:
    its answer, the upstream, the pipeline, its records and the call."""
    answer = Answer()
    upstream = FakeUpstream(answer)
    pipeline, records = build(upstream, plain=True)
    running = call(pipeline, script, script.body(True)).start()
    await upstream.arrived.wait()
    return answer, upstream, pipeline, records, running


dialects = pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())


@dialects
async def test_a_stream_is_relayed_the_slot_handed_on_at_its_last_event_and_recorded(script: Script) -> None:
    answer, upstream, pipeline, records, running = await streaming(script)
    answer.send(*script.stream)
    await running.wait_for(lambda c: b'"lo"' in c.body)
    assert pipeline.backends.in_use == 1
    answer.send(script.last)
    await running.wait_for(lambda c: c.body.endswith(script.last))
    assert pipeline.backends.in_use == 0  # handed on at the last event, before the upstream's end
    answer.end()
    await running.done()
    await settled(pipeline)
    if script.dialect is not CHAT:  # relayed byte for byte
        assert running.body == b"".join(script.stream) + script.last
    [record] = records.published
    assert (record.status, record.prompt_tokens, record.completion_tokens) == (200, 3, 2)
    assert (record.finish_reason, record.api, record.route) == (
        "stop",
        script.dialect.api,
        script.dialect.route,
    )
    assert record.ttft_s is not None and record.e2e_s is not None and answer.closed
    assert upstream.sent[0].path == script.dialect.upstream_path


@dialects
async def test_a_non_stream_answer_is_recorded_once(script: Script) -> None:
    upstream = FakeUpstream(Answer().send(script.whole).end())
    pipeline, records = build(upstream, plain=True)
    done = await call(pipeline, script, script.body(False)).done()
    await settled(pipeline)
    assert done.status == 200
    [record] = records.published
    assert (record.prompt_tokens, record.completion_tokens, record.finish_reason) == (3, 2, "stop")
    assert_nothing_held(pipeline)


@dialects
async def test_a_stream_that_breaks_ends_with_the_dialects_error_event(script: Script) -> None:
    upstream = FakeUpstream(Answer().send(*script.stream).fail(GatewayError("upstream_timeout", "timed out")))
    pipeline, records = build(upstream, plain=True)
    done = await call(pipeline, script, script.body(True)).done()
    await settled(pipeline)
    relayed = events(done.body)
    error = script.error(payload(relayed[len(script.stream)]))
    assert error["message"] == "timed out"
    if script.dialect is MESSAGES:
        assert relayed[-1].startswith(b"event: error\n") and error["type"] == "timeout_error"
    elif script.dialect is RESPONSES:
        assert relayed[-2].startswith(b"event: error\n") and error["sequence_number"] == 3
        failed = json.loads(payload(relayed[-1]))
        assert failed["type"] == "response.failed" and failed["response"]["id"] == "resp_1"
    else:
        assert error["code"] == "upstream_timeout"
    assert [r.status for r in records.published] == [504]
    assert_nothing_held(pipeline)


@dialects
async def test_a_stream_that_ends_before_its_last_event_is_an_error(script: Script) -> None:
    upstream = FakeUpstream(Answer().send(*script.stream).end())
    pipeline, records = build(upstream, plain=True)
    done = await call(pipeline, script, script.body(True)).done()
    await settled(pipeline)
    assert b"ended before its last event" in done.body
    assert [r.status for r in records.published] == [502]


@dialects
async def test_a_queued_stream_is_kept_alive_in_its_dialect(script: Script) -> None:
    holding_answer, waiting_answer = Answer(), Answer()
    upstream = FakeUpstream(holding_answer, waiting_answer)
    pipeline, records = build(upstream, slots=1, keep_alive_s=0.01)
    holding = call(pipeline, script, script.body(True), rid="r1").start()
    await upstream.arrived.wait()
    waiting = call(pipeline, script, script.body(True), rid="r2").start()
    await waiting.wait_for(lambda c: script.keep_alive in c.body)
    assert waiting.body.startswith(b": queued 1 slot\n\n") and waiting.status == 200
    holding.disconnect()
    await holding.done()
    await waiting.wait_for(lambda _: len(upstream.sent) == 2)
    waiting_answer.send(*script.stream, script.last).end()
    await waiting.done()
    await settled(pipeline)
    assert waiting.body.endswith(script.last)
    assert sorted(r.status for r in records.published) == [200, 499]
    assert_nothing_held(pipeline)


@dialects
async def test_a_client_that_leaves_mid_stream_frees_the_slot_and_closes_upstream(script: Script) -> None:
    answer, _, pipeline, records, running = await streaming(script)
    answer.send(*script.stream[:2])
    # relayed byte for byte, except chat's (rewritten): its first two chunks carry "Hel"
    await running.wait_for(lambda c: c.body.endswith(script.stream[1]) or b"Hel" in c.body)
    running.disconnect()
    await running.done()
    await settled(pipeline)
    assert answer.closed and not answer.read_to_end
    [record] = records.published
    assert record.status == 499 and record.client_disconnected
    assert_nothing_held(pipeline)


@dialects
async def test_a_key_past_its_requests_per_minute_is_refused_in_its_dialect(script: Script) -> None:
    upstream = FakeUpstream(Answer().send(script.whole).end())
    pipeline, records = build(upstream, plain=True)
    limited = Principal(key_id="key_9", name="limited", rpm=1)
    assert (await call(pipeline, script, script.body(False), limited).done()).status == 200
    refused = await call(pipeline, script, script.body(False), limited).done()
    await settled(pipeline)
    assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
    error = script.error(refused.body)
    assert error["type"] == "rate_limit_error" and len(upstream.sent) == 1
    assert [r.status for r in records.published] == [200, 429]


@dialects
async def test_an_alias_reaches_the_served_model_and_another_name_is_a_404(script: Script) -> None:
    upstream = FakeUpstream(Answer().send(script.whole).end())
    pipeline, _ = build(upstream, model_aliases="claude-*,gpt-5-codex")
    for alias in ("claude-sonnet-4-5", "gpt-5-codex"):
        upstream.script(Answer().send(script.whole).end())
        done = await call(pipeline, script, {**script.body(False), "model": alias}).done()
        assert done.status == 200 and json.loads(upstream.sent[-1].body or b"{}")["model"] == MODEL
    unknown = await call(pipeline, script, {**script.body(False), "model": "gpt-5"}).done()
    assert unknown.status == 404 and "gpt-5" in script.error(unknown.body)["message"]


async def test_thinking_controls_become_the_templates_in_every_dialect() -> None:
    """Anthropic's ``thinking`` / ``output_config.effort`` and the Responses API's ``reasoning.effort``
    reach vLLM as DeepSeek-V4's ``chat_template_kwargs``; a disabled ``thinking`` and the efforts
    themselves are taken out, an enabled one stays (vLLM caps reasoning at its budget)."""
    cases = [
        (SCRIPTS["messages"], {"thinking": {"type": "disabled"}}, {"thinking": False}),
        (SCRIPTS["messages"], {"thinking": {"type": "adaptive", "display": "omitted"},
                               "output_config": {"effort": "xhigh"}},
         {"thinking": True, "reasoning_effort": "max"}),
        (SCRIPTS["messages"], {"thinking": {"type": "enabled", "budget_tokens": 2048}},
         {"thinking": True, "reasoning_effort": "low"}),
        (SCRIPTS["responses"], {"reasoning": {"effort": "none", "summary": "auto"}}, {"thinking": False}),
        (SCRIPTS["responses"], {"reasoning": {"effort": "high"}},
         {"thinking": True, "reasoning_effort": "high"}),
        (SCRIPTS["responses"], {}, {"thinking": True, "reasoning_effort": "low"}),  # the gateway's default
    ]  # fmt: skip
    upstream = FakeUpstream()
    pipeline, _ = build(upstream, plain=True)
    for script, fields, template in cases:
        upstream.script(Answer().send(script.whole).end())
        assert (await call(pipeline, script, {**script.body(False), **fields}).done()).status == 200
        sent = json.loads(upstream.sent[-1].body or b"{}")
        assert sent["chat_template_kwargs"] == template, fields
        assert "effort" not in sent.get("reasoning", {}) and "effort" not in sent.get("output_config", {})
        assert ("thinking" in sent) == (fields.get("thinking", {}).get("type") in ("enabled", "adaptive"))


async def test_messages_take_x_api_key_and_forward_the_anthropic_headers() -> None:
    assert MESSAGES.credentials({"x-api-key": "dsk-a"}) == "dsk-a"
    assert MESSAGES.credentials({"authorization": "Bearer dsk-b"}) == "dsk-b"
    with pytest.raises(GatewayError) as missing:
        MESSAGES.credentials({})
    assert missing.value.status == 401
    script = SCRIPTS["messages"]
    upstream = FakeUpstream(Answer().send(script.whole).end())
    pipeline, _ = build(upstream, plain=True)
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "x", "cookie": "c", "authorization": "t"}
    response = ExchangeResponse(pipeline, MESSAGES, KEY)
    await Call(response, "/v1/messages", script.body(False), headers=headers).done()
    sent = upstream.sent[0].headers
    assert {k: v for k, v in sent.items() if k != "x-request-id"} == {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "x",
    }


async def test_a_background_response_is_refused_and_a_previous_response_must_be_the_keys() -> None:
    script = SCRIPTS["responses"]
    upstream = FakeUpstream()
    pipeline, records = build(upstream, plain=True)
    background = await call(pipeline, script, {**script.body(False), "background": True}).done()
    assert background.status == 400 and background.json()["error"]["param"] == "background"
    refs = (
        {"previous_response_id": "resp_x"},
        {"conversation": "conv_x"},
        {"input": [{"type": "item_reference", "id": "msg_x"}]},
    )
    for refers in refs:
        stranger = await call(pipeline, script, {**script.body(False), **refers}).done()
        assert stranger.status == 404 and stranger.json()["error"]["code"] == "response_not_found"
    await settled(pipeline)
    assert upstream.sent == [] and [r.status for r in records.published] == [400, 404, 404, 404]
