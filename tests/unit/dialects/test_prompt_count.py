"""What the gateway asks the backend to count, per dialect (the bodies vLLM's /tokenize and
/v1/messages/count_tokens take; the real backend's answers are checked in tests/e2e)."""

from __future__ import annotations

from gateway.dialects.prompt_count import (
    EitherCount,
    TokenCount,
    chat_count,
    completion_count,
    messages_count,
    responses_count,
)
from tests.sim.helpers import load_data

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


def test_a_messages_body_becomes_the_chat_vllm_renders_so_its_ids_come_back() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=ab12;"},
            {"type": "text", "text": "You are Claude.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": " Be brief."},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Write hello."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "A shell call.", "signature": "s"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo é"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "é"}],
                    },
                    {"type": "text", "text": "Done?"},
                ],
            },
        ],
        "tools": [{"name": "Bash", "description": "Run", "input_schema": {"type": "object"}}],
        "chat_template_kwargs": {"thinking": True},
    }
    count = messages_count(body)
    assert isinstance(count, TokenCount) and (count.path, count.field, count.unmatched) == (
        "/tokenize",
        "count",
        None,
    )
    assert count.body == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are Claude. Be brief."},  # the billing header left out
            {"role": "user", "content": "Write hello."},
            {
                "role": "assistant",
                "reasoning": "A shell call.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"command": "echo \\u00e9"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "é"},
            {"role": "user", "content": "Done?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "Bash", "description": "Run", "parameters": {"type": "object"}},
            }
        ],
        "chat_template_kwargs": {"thinking": True},
    }


def test_inline_system_messages_are_counted_both_ways_vllm_may_render_them() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "system": "Rules.",
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "Env."}],
    }
    count = messages_count(body)
    assert isinstance(count, EitherCount)
    assert [form.body["messages"] for form in count.forms] == [
        [{"role": "system", "content": "Rules.Env."}, {"role": "user", "content": "hi"}],  # DeepSeek-V4's
        [
            {"role": "system", "content": "Rules."},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Env."},
        ],
    ]
    assert (count.check.path, count.check.body, count.check.unmatched) == (
        "/v1/messages/count_tokens",
        body,
        "unconverted",
    )


def test_what_a_messages_body_cannot_be_matched_by_is_counted_by_count_tokens_and_named() -> None:
    base = {"model": "m", "max_tokens": 5}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    cases = {
        "image": [{"role": "user", "content": [image]}],
        "unconverted": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
    }
    for reason, messages in cases.items():
        count = messages_count({**base, "messages": messages})
        assert isinstance(count, TokenCount) and count.path == "/v1/messages/count_tokens"
        assert count.unmatched == reason
    off = messages_count(
        {**base, "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "disabled"}}
    )
    assert isinstance(off, TokenCount) and off.unmatched == "unconverted"


def test_codexs_real_tools_are_the_chat_tools_vllm_renders() -> None:
    tools = load_data("codex_tools.json")["tools"]
    count = responses_count({"model": "m", "input": "hi", "tools": tools})
    assert count is not None
    names = [tool["function"]["name"] for tool in count.body["tools"]]
    assert "exec_command" in names and "multi_agent_v1__spawn_agent" in names  # namespaced, flattened
    assert len(names) == sum(
        len(t["tools"]) if t["type"] == "namespace" else t["type"] == "function" for t in tools
    )
    assert {tool["type"] for tool in tools} == {
        "function",
        "namespace",
        "web_search",
    }  # web_search: not rendered


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
    assert responses_count({**base, "tools": [{"type": "mcp", "server_label": "x"}]}) is None
    image = [{"role": "user", "content": [{"type": "input_image", "image_url": "data:"}]}]
    assert responses_count({"model": "m", "input": image}) is None
    assert responses_count({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}) is None
    counted = responses_count({**base, "tools": [TOOL], "tool_choice": "none"})
    assert counted is not None and "tools" in counted.body  # vLLM renders them unless told not to
