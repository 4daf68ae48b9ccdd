"""Request normalisation: thinking dialects -> chat_template_kwargs, reasoning field renaming."""

from __future__ import annotations

import pytest

from gateway.dialects.openai.normalize import normalize_chat, normalize_completion
from gateway.dialects.thinking import EFFORT_MAP
from gateway.errors import GatewayError


def chat(**fields):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize("effort,level", sorted(EFFORT_MAP.items()))
def test_reasoning_effort_map(effort: str, level: str) -> None:
    payload = chat(reasoning_effort=effort)
    result = normalize_chat(payload, "low", "reasoning")
    assert result.thinking.level == level
    assert "reasoning_effort" not in payload
    expected = {"thinking": False} if level == "off" else {"thinking": True, "reasoning_effort": level}
    assert payload["chat_template_kwargs"] == expected


@pytest.mark.parametrize(
    "fields,level",
    [
        ({}, "low"),
        ({"thinking": True}, "low"),
        ({"thinking": {"type": "enabled"}, "reasoning_effort": "max"}, "max"),
        ({"thinking": {"type": "disabled"}, "reasoning_effort": "max"}, "off"),
        ({"chat_template_kwargs": {"thinking": True, "reasoning_effort": "high"}, "thinking": False}, "high"),
        ({"chat_template_kwargs": {"thinking": False}, "reasoning_effort": "high"}, "off"),
        ({"chat_template_kwargs": {"reasoning_effort": "max", "other": 1}}, "max"),
    ],
)
def test_precedence(fields: dict, level: str) -> None:
    payload = chat(**fields)
    assert normalize_chat(payload, "low", "reasoning").thinking.level == level
    assert "thinking" not in payload and payload["chat_template_kwargs"]["thinking"] == (level != "off")


def test_default_off_and_thinking_true_uses_high() -> None:
    assert normalize_chat(chat(), "off", "reasoning").thinking.level == "off"
    assert normalize_chat(chat(thinking=True), "off", "reasoning").thinking.level == "high"


def test_assistant_reasoning_is_renamed_for_the_backend() -> None:
    payload = chat(
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a", "reasoning_content": "why"},
            {"role": "user", "content": "q2", "reasoning_content": "not mine to touch"},
        ]
    )
    normalize_chat(payload, "low", "reasoning")
    assert payload["messages"][1] == {"role": "assistant", "content": "a", "reasoning": "why"}
    assert payload["messages"][2]["reasoning_content"] == "not mine to touch"


@pytest.mark.parametrize(
    "bad", [{"reasoning_effort": "huge"}, {"thinking": "on"}, {"chat_template_kwargs": []}]
)
def test_invalid_values(bad: dict) -> None:
    with pytest.raises(GatewayError) as info:
        normalize_chat(chat(**bad), "low", "reasoning")
    assert info.value.status == 400


def test_completion_thinking_follows_the_prompt() -> None:
    opened = normalize_completion({"prompt": "Q: x\nA: <think>\n"}, "<think>")
    assert opened.thinking.on and opened.opened
    assert not normalize_completion({"prompt": "Once upon a time"}, "<think>").thinking.on
    assert not normalize_completion({"prompt": ["tok", "ens"]}, "<think>").thinking.on
    # the configured start marker, not <think>, opens reasoning
    assert normalize_completion({"prompt": "Assistant: thinking"}, " thinking").opened
    assert not normalize_completion({"prompt": "Assistant: <think>"}, " thinking").thinking.on


@pytest.mark.parametrize(
    ("fields", "structured"),
    [
        ({}, False),
        ({"response_format": {"type": "text"}}, False),
        ({"response_format": {"type": "json_object"}}, True),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, True),
        ({"structured_outputs": {"json": {}}}, True),
        ({"guided_json": {"type": "object"}}, True),
    ],
)
def test_an_answer_held_to_a_format_is_known_as_such(fields: dict, structured: bool) -> None:
    assert normalize_chat(chat(**fields), "low", "reasoning").structured is structured
    assert normalize_completion({"prompt": "x", **fields}, "<think>").structured is structured
