"""The request-field policy (gateway/dialects/fields.py): each route forwards the fields of its public
API and the vLLM extensions the gateway serves, refuses any other in the client's error shape, and
bounds what it lets through — checked through ``prepare``, the pure function a request goes through."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from anthropic.types import message_count_tokens_params, message_create_params
from anthropic.types.beta import message_create_params as beta_message_create_params
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params
from openai.types.responses import response_create_params

from gateway.auth.principal import Principal
from gateway.config import Settings
from gateway.dialects.fields import BACKEND_FIELDS, MAX_CONSTRAINT_BYTES, MAX_STOP_ITEMS, SERVED
from gateway.dialects.messages import MESSAGES
from gateway.dialects.openai.chat import CHAT
from gateway.dialects.openai.completions import COMPLETIONS
from gateway.dialects.responses import RESPONSES
from gateway.proxy.aliases import ModelAliases
from gateway.proxy.asks import Asked
from gateway.proxy.preparation import Preparation, prepare

MODEL = "deepseek-v4-flash-0731"
SETTINGS = Settings(upstream="http://unused")
KEY = Principal(key_id="key_1", name="team")
TRUSTED = Principal(key_id="key_2", name="bench", scopes=("backend_fields",))
DIALECTS = {"chat": CHAT, "completions": COMPLETIONS, "responses": RESPONSES, "messages": MESSAGES}
BASE: dict[str, dict[str, Any]] = {
    "chat": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": MODEL, "prompt": "hi"},
    "responses": {"model": MODEL, "input": "hi"},
    "messages": {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
}
#: SDK arguments that are sent as headers, not in the body (``betas`` -> ``anthropic-beta``).
SDK_HEADERS = {"betas"}


def prepared(
    api: str, principal: Principal = KEY, settings: Settings = SETTINGS, **fields: Any
) -> Preparation:
    body = {**BASE[api], **fields}
    aliases = ModelAliases(MODEL, ())
    return prepare(DIALECTS[api], principal, settings, aliases, body, {}, Asked())


def refused(preparation: Preparation) -> tuple[int, str | None]:
    """(status, param) of a refusal in the dialect's own error shape."""
    assert preparation.error is not None, "forwarded"
    error = preparation.error
    assert (error.status, error.code) == (400, "unsupported_field"), (error.status, error.code)
    return error.status, error.param


def forwarded(preparation: Preparation) -> dict[str, Any]:
    assert preparation.error is None and preparation.prepared is not None, preparation.error
    return json.loads(preparation.prepared.body)


def fields_of(*types: type) -> set[str]:
    return {name for kind in types for name in typing.get_type_hints(kind)} - SDK_HEADERS


@pytest.mark.parametrize(
    ("api", "sdk"),
    [
        ("chat", fields_of(chat_create_params.CompletionCreateParamsStreaming)),
        ("completions", fields_of(completion_create_params.CompletionCreateParamsStreaming)),
        ("responses", fields_of(response_create_params.ResponseCreateParamsStreaming)),
        (
            "messages",
            fields_of(
                message_create_params.MessageCreateParamsStreaming,
                beta_message_create_params.MessageCreateParamsStreaming,
                message_count_tokens_params.MessageCountTokensParams,
            ),
        ),
    ],
)
def test_every_field_of_the_official_sdk_is_known_to_its_route(api: str, sdk: set[str]) -> None:
    """An SDK user's every argument is served, or (``best_of``) named as needing the scope: a field the
    installed SDK gained that this list lacks fails here, not in a user's hands."""
    assert sdk - SERVED[api] - BACKEND_FIELDS == set()


@pytest.mark.parametrize("api", sorted(DIALECTS))
@pytest.mark.parametrize(
    "field",
    # unknown to every API; vLLM 0.32 fields the gateway does not serve (a prompt it never sized,
    # engine plugins' payloads, vLLM's own output formats)
    ["frobnicate", "previous_input_messages", "mm_payload", "watermarking", "return_token_ids", "priority"],
)
def test_a_field_a_route_does_not_serve_is_refused_naming_it(api: str, field: str) -> None:
    assert refused(prepared(api, **{field: 1})) == (400, field)
    trusted = prepared(api, TRUSTED, **{field: 1})
    assert trusted.error is None or trusted.error.param != field  # the scope lets any field through


def test_the_error_is_in_each_clients_shape() -> None:
    openai = CHAT.error_body(prepared("chat", frobnicate=1).error)  # type: ignore[arg-type]
    anthropic = MESSAGES.error_body(prepared("messages", frobnicate=1).error)  # type: ignore[arg-type]
    assert openai["error"]["type"] == "invalid_request_error" and openai["error"]["param"] == "frobnicate"
    assert anthropic["type"] == "error" and anthropic["error"]["type"] == "invalid_request_error"
    assert "frobnicate" in anthropic["error"]["message"]


def test_the_vllm_extensions_served_reach_the_backend_as_sent() -> None:
    extensions = {
        "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True, "min_tokens": 2,
        "stop_token_ids": [1], "skip_special_tokens": False, "structured_outputs": {"regex": "[a-z]+"},
        "add_generation_prompt": True, "thinking_token_budget": 64,
    }  # fmt: skip
    body = forwarded(prepared("chat", max_tokens=8, **extensions))
    assert body | extensions == body
    assert forwarded(prepared("responses", top_k=5))["top_k"] == 5


def test_template_kwargs_hold_only_the_thinking_controls() -> None:
    conversation = [{"role": "user", "content": "word " * 1000}]  # read in place of the sized messages
    assert refused(prepared("chat", chat_template_kwargs={"conversation": conversation})) == (
        400,
        "chat_template_kwargs.conversation",
    )
    tools = prepared("messages", chat_template_kwargs={"tools": []})
    assert refused(tools)[1] == "chat_template_kwargs.tools"
    kwargs = forwarded(prepared("chat", chat_template_kwargs={"thinking": False, "drop_thinking": False}))
    assert kwargs["chat_template_kwargs"] == {"thinking": False, "drop_thinking": False}


def test_stop_lists_and_constraints_are_bounded_for_every_key() -> None:
    for principal in (KEY, TRUSTED):
        assert refused(prepared("chat", principal, stop=["x"] * (MAX_STOP_ITEMS + 1)))[1] == "stop"
        stops = ["x"] * (MAX_STOP_ITEMS + 1)
        assert refused(prepared("messages", principal, stop_sequences=stops))[1] == "stop_sequences"
        big = {"type": "json_schema", "json_schema": {"name": "s", "description": "d" * MAX_CONSTRAINT_BYTES}}
        assert refused(prepared("chat", principal, response_format=big))[1] == "response_format"
        regex = {"regex": "a" * MAX_CONSTRAINT_BYTES}
        constrained = prepared("completions", principal, structured_outputs=regex)
        assert refused(constrained)[1] == "structured_outputs"
    assert forwarded(prepared("chat", stop=["x"] * MAX_STOP_ITEMS))["stop"] == ["x"] * MAX_STOP_ITEMS


def test_echo_with_logprobs_is_the_prompts_logprobs() -> None:
    assert refused(prepared("completions", echo=True, logprobs=5)) == (400, "echo")
    assert forwarded(prepared("completions", echo=True))["echo"] is True
    assert forwarded(prepared("completions", TRUSTED, echo=True, logprobs=5))["logprobs"] == 5


def test_the_operator_adds_fields_without_a_release() -> None:
    settings = Settings(upstream="http://unused", extra_body_fields="client_hint, other")  # type: ignore[arg-type]
    assert settings.extra_body_fields == {"client_hint", "other"}
    assert forwarded(prepared("messages", settings=settings, client_hint="x"))["client_hint"] == "x"
    assert refused(prepared("messages", client_hint="x")) == (400, "client_hint")
