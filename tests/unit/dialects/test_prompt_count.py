"""What the gateway asks the backend to count, per dialect (the bodies vLLM's /tokenize and
/v1/messages/count_tokens take; the real backend's answers are checked in tests/e2e)."""

from __future__ import annotations

from gateway.dialects.prompt_count import chat_count, completion_count, messages_count, responses_count

TOOL = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}


def test_chat_moves_the_template_fields_into_its_kwargs() -> None:
    count = chat_count(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "reasoning_effort": "high",
            "chat_template_kwargs": {"thinking": True},
            "max_tokens": 10,
        }
    )
    assert count is not None and (count.path, count.field) == ("/tokenize", "count")
    assert count.body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "chat_template_kwargs": {"thinking": True, "enable_thinking": True, "reasoning_effort": "high"},
    }
    prefill = chat_count({"model": "m", "messages": [], "continue_final_message": True})
    assert prefill is not None and prefill.body["add_generation_prompt"] is False
    assert prefill.body["continue_final_message"] is True


def test_completions_count_one_text_prompt_only() -> None:
    count = completion_count({"model": "m", "prompt": "Once upon", "max_tokens": 5})
    assert count is not None and count.body == {"model": "m", "prompt": "Once upon"}
    assert completion_count({"model": "m", "prompt": ["a", "b"]}) is None


def test_messages_are_counted_by_the_backends_own_route() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    count = messages_count(body)
    assert (count.path, count.field, count.body) == ("/v1/messages/count_tokens", "input_tokens", body)


def test_a_responses_input_becomes_the_chat_messages_vllm_renders() -> None:
    count = responses_count(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {
                    "type": "reasoning",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": "think"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Sunny."}],
                },
            ],
            "tools": [TOOL],
            "reasoning": {"effort": "low"},
        }
    )
    assert count is not None and count.path == "/tokenize"
    assert count.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "reasoning": "think",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Sunny."},
    ]
    function = {k: v for k, v in TOOL.items() if k != "type"}
    assert count.body["tools"] == [{"type": "function", "function": function}]
    assert count.body["chat_template_kwargs"] == {"enable_thinking": True, "reasoning_effort": "low"}


def test_what_the_gateway_cannot_render_faithfully_is_estimated_instead() -> None:
    base = {"model": "m", "input": "hi"}
    assert responses_count({**base, "previous_response_id": "resp_1"}) is None  # turns the gateway can't see
    assert responses_count({**base, "tools": [{"type": "web_search"}]}) is None
    image = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:"}]}]
    assert responses_count({"model": "m", "input": image}) is None
    assert responses_count({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}) is None
    counted = responses_count({**base, "tools": [TOOL], "tool_choice": "none"})
    assert counted is not None and "tools" in counted.body  # vLLM renders them unless told not to
