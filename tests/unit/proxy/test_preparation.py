"""Preparing a request for the backend (gateway/proxy/preparation.py), a pure function: no server, no
pipeline — a dialect, a caller, settings and aliases in; what to send, or the client's error, out,
with what the record keeps either way."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.dialects.messages import MESSAGES
from gateway.dialects.openai.chat import CHAT
from gateway.proxy.aliases import ModelAliases
from gateway.proxy.asks import Asked
from gateway.proxy.preparation import Preparation, prepare

SERVED = "deepseek-v4-flash-0731"
SETTINGS = Settings(upstream="http://unused", upstream_priority=True)
ALIASES = ModelAliases(SERVED, ("gpt-5*",))
KEY = Principal(key_id="key_1", name="team")
NOTHING = Asked()


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], **fields}


def prepared(
    body: dict[str, Any], asked: Asked = NOTHING, principal: Principal = KEY, **options: Any
) -> Preparation:
    return prepare(CHAT, principal, SETTINGS, ALIASES, body, {}, asked, **options)


def sent(preparation: Preparation) -> dict[str, Any]:
    assert preparation.error is None and preparation.prepared is not None, preparation.error
    return json.loads(preparation.prepared.body)


def test_an_alias_is_the_served_model_and_usage_is_asked_on_every_chunk() -> None:
    out = prepared(chat(model="gpt-5-codex", stream=True, max_tokens=64))
    body = sent(out)
    assert body["model"] == SERVED and body["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
    }
    assert (out.model, out.stream, out.request_class, out.max_wait_s) == (SERVED, True, "interactive", None)
    assert out.prepared is not None and (out.prepared.output_budget, out.prepared.output_param) == (
        64,
        "max_tokens",
    )


def test_a_batch_request_carries_vllm_priority_first() -> None:
    out = prepared(chat(), Asked(priority="batch", max_wait_s="30"))
    assert out.prepared is not None and out.prepared.body.startswith(b'{"priority":1,')
    assert (out.request_class, out.max_wait_s) == ("batch", 30.0)
    assert b'"priority"' not in prepared(chat()).prepared.body  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "asked", "principal", "status", "code", "known"),
    [
        (chat(), Asked(priority="urgent"), KEY, 400, "invalid_value", (None, "unknown", False)),
        ({"model": SERVED}, Asked(), KEY, 400, "invalid_request", ("interactive", "unknown", False)),
        (chat(model="llama", stream=True), Asked(), KEY, 404, "model_not_found",
         ("interactive", "unknown", True)),
        (chat(), Asked(), Principal(key_id="k", name="n", models=("other",)), 403, "model_not_allowed",
         ("interactive", SERVED, False)),
        (chat(model="gpt-5-codex"), Asked(), Principal(key_id="k", name="n", models=("other",)), 404,
         "model_not_found", ("interactive", SERVED, False)),
        (chat(stream=True, max_tokens=10**9), Asked(), KEY, 400, "context_length_exceeded",
         ("interactive", SERVED, True)),
        (chat(n=2, max_tokens=8), Asked(priority="batch"), KEY, 400, "unsupported_field",
         ("batch", SERVED, False)),
    ],
    ids=["bad x-priority", "invalid body", "unknown model", "model not allowed", "an alias of it",
         "over the KV pool", "n"],
)  # fmt: skip
def test_a_refusal_is_the_clients_error_with_what_was_known_before_it(
    body, asked, principal, status, code, known
) -> None:
    out = prepared(body, asked, principal)
    assert out.prepared is None and out.error is not None
    assert (out.error.status, out.error.code) == (status, code)
    assert (out.request_class, out.model, out.stream) == known
    assert SERVED not in out.error.message or body["model"] == SERVED  # an alias does not tell


def test_the_anthropic_headers_go_on_and_a_bad_one_is_refused() -> None:
    body = {"model": SERVED, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"anthropic-version": "2023-06-01", "authorization": "Bearer secret"}
    out = prepare(MESSAGES, KEY, SETTINGS, ALIASES, dict(body), headers, Asked())
    assert out.forwarded == {"anthropic-version": "2023-06-01"} and out.error is None
    bad = prepare(MESSAGES, KEY, SETTINGS, ALIASES, dict(body), {"anthropic-beta": "a b\n"}, Asked())
    assert bad.error is not None and bad.error.param == "anthropic-beta"


def test_the_telemetry_ask_reaches_the_translator_as_data() -> None:
    """What the client asked (``x-gateway-telemetry: 1``) is data in the dialect's context: the closing
    usage chunk waits for the telemetry object the relay hands its last event."""
    out = prepared(chat(stream=True), telemetry=True)
    translator = out.prepared.translator  # type: ignore[union-attr]
    usage = b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"completion_tokens":1}}\n\n'
    assert translator.step(usage, usage[6:-2]).events == []
    done = b"data: [DONE]\n\n"
    closing, end = translator.step(done, b"[DONE]", telemetry={"ttft_s": 0.1}).events
    assert json.loads(closing[6:])["telemetry"] == {"ttft_s": 0.1} and end == done
