"""Scripted tool calls over chat completions, with the OpenAI SDK and raw chunks."""

from __future__ import annotations

import json

import openai
import pytest

from tests.sim.helpers import MODEL, STREAM_USAGE, chat_body, stream_chat

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
CALL = 'list the files #sim:call shell {"cmd": "ls -la"}'


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0)


def test_round_trip_call_then_answer_quoting_the_result(sim):
    client = sdk(sim.base_url)
    messages: list = [{"role": "user", "content": CALL}]
    first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert str(getattr(choice.message, "reasoning", "")).startswith("The user asked me to call shell.")
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
    assert (call.function.name, json.loads(call.function.arguments)) == ("shell", {"cmd": "ls -la"})
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "a.txt\nb.txt\n"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "Tool result: a.txt\nb.txt\n"
    assert not second.choices[0].message.tool_calls
    assert second.usage is not None and first.usage is not None
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # the call and its result count


def test_stream_sends_the_id_and_name_once_then_argument_pieces(sim):
    events = stream_chat(sim.base_url, chat_body(CALL, tools=TOOLS, **STREAM_USAGE))
    deltas = [event["choices"][0]["delta"] for event in events[:-2]]
    calls = [delta["tool_calls"][0] for delta in deltas if "tool_calls" in delta]
    first, *rest = calls
    assert set(first) == {"id", "type", "index", "function"} and first["function"]["name"] == "shell"
    assert all(set(call) == {"index", "function"} and set(call["function"]) == {"arguments"} for call in rest)
    assert len(rest) >= 1  # streamed in pieces
    arguments = "".join(call["function"]["arguments"] for call in calls)
    assert json.loads(arguments) == {"cmd": "ls -la"}
    assert events[-3]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any(delta.get("content") for delta in deltas)
    usage = events[-2]["usage"]
    assert usage["completion_tokens"] == events[-3]["usage"]["completion_tokens"]


def test_sdk_stream_accumulates_the_call(sim):
    stream = sdk(sim.base_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": CALL}], tools=TOOLS, stream=True
    )
    arguments, names = "", []
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            assert call.function is not None
            if call.function.name:
                names.append(call.function.name)
            arguments += call.function.arguments or ""
    assert names == ["shell"] and json.loads(arguments) == {"cmd": "ls -la"}


def test_a_named_tool_choice_finishes_with_stop(sim):
    choice = {"type": "function", "function": {"name": "shell"}}
    result = sdk(sim.base_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": CALL}], tools=TOOLS, tool_choice=choice
    )
    assert result.choices[0].finish_reason == "stop" and result.choices[0].message.tool_calls


@pytest.mark.parametrize(
    "extra",
    [{"tools": TOOLS, "tool_choice": "none"}, {}, {"tools": [{**TOOLS[0], "function": {"name": "python"}}]}],
    ids=["tool_choice_none", "no_tools", "undeclared"],
)
def test_no_call_unless_the_named_tool_may_be_called(sim, extra):
    result = sdk(sim.base_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count to 3 " + CALL}], **extra
    )
    message = result.choices[0].message
    assert result.choices[0].finish_reason == "stop" and not message.tool_calls
    assert message.content == "1, 2, 3"


def test_without_thinking_the_call_comes_alone(sim):
    result = sdk(sim.base_url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": CALL}],
        tools=TOOLS,
        extra_body={"chat_template_kwargs": {"thinking": False}},
    )
    message = result.choices[0].message
    assert getattr(message, "reasoning", None) is None and message.content is None
    assert message.tool_calls and json.loads(message.tool_calls[0].function.arguments) == {"cmd": "ls -la"}
