"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` against a real server, with the Anthropic
SDK and raw events."""

from __future__ import annotations

import copy

import anthropic
import httpx
import pytest

from tests.sim.helpers import MODEL, load_data, named_events

TOOLS = [
    {
        "name": "shell",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    }
]
CALL = 'list the files #sim:call shell {"cmd": "ls -la"}'
COUNT = [{"role": "user", "content": "count from 1 to 5"}]


def sdk(base_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)


def body(messages: list, **extra) -> dict:
    return {"model": MODEL, "max_tokens": 1000, "messages": messages, **extra}


def test_non_stream_shape(sim):
    message = sdk(sim.base_url).messages.create(model=MODEL, max_tokens=1000, messages=COUNT)
    assert message.id.startswith("chatcmpl-") and message.type == "message" and message.role == "assistant"
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.thinking.startswith("The user wants me to count")
    assert len(thinking.signature) == 32
    assert text.type == "text" and text.text == "1, 2, 3, 4, 5"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 5
    raw = httpx.post(f"{sim.base_url}/v1/messages", json=body(COUNT)).json()
    assert set(raw) == {"id", "type", "role", "content", "model", "stop_reason", "usage"}  # no nulls
    assert raw["usage"] == {
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
    }


def test_stream_events_are_vllms(sim):
    events = named_events(sim.base_url, "/v1/messages?beta=true", body(COUNT, stream=True))
    types = [event["type"] for event in events]
    assert "ping" not in types  # vLLM sends none
    assert types[:2] == ["message_start", "content_block_start"] and types[-2:] == [
        "message_delta",
        "message_stop",
    ]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["stop_sequence"] is None
    assert start["usage"]["output_tokens"] == 0
    assert events[1]["content_block"] == {"type": "thinking", "thinking": ""} and events[1]["index"] == 0
    signature_at = types.index("content_block_stop") - 1
    assert events[signature_at]["delta"]["type"] == "signature_delta"
    text_start = events[signature_at + 2]
    assert text_start["content_block"] == {"type": "text", "text": ""} and text_start["index"] == 1
    text = "".join(e["delta"]["text"] for e in events if e.get("delta", {}).get("type") == "text_delta")
    assert text == "1, 2, 3, 4, 5"
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2]["usage"]["input_tokens"] == start["usage"]["input_tokens"]
    assert events[-3] == {"type": "content_block_stop", "index": 1}


def test_sdk_stream_final_message_matches_non_stream(sim):
    client = sdk(sim.base_url)
    with client.messages.stream(model=MODEL, max_tokens=1000, messages=COUNT) as stream:
        final = stream.get_final_message()
    plain = client.messages.create(model=MODEL, max_tokens=1000, messages=COUNT)
    assert [block.type for block in final.content] == ["thinking", "text"]
    assert final.content[0].signature
    assert final.content[1].text == plain.content[1].text
    assert final.usage.model_dump() == plain.usage.model_dump()


def test_count_tokens_is_what_messages_reports(sim):
    client = sdk(sim.base_url)
    conversation = {"system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]}
    counted = client.messages.count_tokens(model=MODEL, messages=COUNT, tools=TOOLS, **conversation)
    message = client.messages.create(model=MODEL, max_tokens=100, messages=COUNT, tools=TOOLS, **conversation)
    assert counted.input_tokens == message.usage.input_tokens
    raw = httpx.post(
        f"{sim.base_url}/v1/messages/count_tokens", json={"model": MODEL, "messages": COUNT}
    ).json()
    assert raw == {
        "input_tokens": raw["input_tokens"],
        "context_management": {"original_input_tokens": raw["input_tokens"]},
    }
    assert raw["input_tokens"] < counted.input_tokens  # the tools and the system prompt count


def test_tool_use_round_trip_with_thinking_sent_back(sim):
    client = sdk(sim.base_url)
    messages: list = [{"role": "user", "content": CALL}]
    first = client.messages.create(model=MODEL, max_tokens=1000, messages=messages, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    thinking, call = first.content
    assert thinking.type == "thinking" and call.type == "tool_use"
    assert call.id.startswith("chatcmpl-tool-") and call.name == "shell" and call.input == {"cmd": "ls -la"}
    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": [{"type": "text", "text": "a.txt"}],
                },
                {"type": "text", "text": "what did you find?"},
            ],
        },
    ]
    second = client.messages.create(model=MODEL, max_tokens=1000, messages=messages, tools=TOOLS)
    assert second.stop_reason == "end_turn"
    assert [block.type for block in second.content] == ["thinking", "text"]
    assert second.content[1].text == "Tool result: a.txt"


def test_stream_of_a_tool_use(sim):
    events = named_events(
        sim.base_url, "/v1/messages", body([{"role": "user", "content": CALL}], tools=TOOLS, stream=True)
    )
    (start,) = [
        e for e in events if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]
    assert start["content_block"]["input"] == {} and start["content_block"]["name"] == "shell"
    pieces = [
        e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"
    ]
    assert len(pieces) > 1 and "".join(pieces) == '{"cmd": "ls -la"}'
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    with sdk(sim.base_url).messages.stream(
        model=MODEL, max_tokens=1000, messages=[{"role": "user", "content": CALL}], tools=TOOLS
    ) as stream:
        final = stream.get_final_message()
    assert final.content[-1].type == "tool_use" and final.content[-1].input == {"cmd": "ls -la"}


def test_a_result_after_a_call_is_answered_in_a_stream(sim):
    messages = [
        {"role": "user", "content": CALL},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"cmd": "ls"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x" * 300, "is_error": False}
            ],
        },
    ]
    with sdk(sim.base_url).messages.stream(
        model=MODEL, max_tokens=1000, messages=messages, tools=TOOLS
    ) as stream:
        final = stream.get_final_message()
    assert final.content[-1].text == "Tool result: " + "x" * 200


@pytest.mark.parametrize(
    "thinking,blocks",
    [
        ({"type": "enabled", "budget_tokens": 1024}, ["thinking", "text"]),
        ({"type": "adaptive"}, ["thinking", "text"]),
        ({"type": "disabled"}, ["text"]),
    ],
)
def test_thinking_config(sim, thinking, blocks):
    message = sdk(sim.base_url).messages.create(
        model=MODEL, max_tokens=2000, messages=COUNT, thinking=thinking
    )
    assert [block.type for block in message.content] == blocks


def test_thinking_off_through_the_template_kwargs(sim):
    response = httpx.post(
        f"{sim.base_url}/v1/messages", json=body(COUNT, chat_template_kwargs={"thinking": False})
    )
    assert [block["type"] for block in response.json()["content"]] == ["text"]


def test_earlier_turns_send_back_thinking_and_redacted_thinking(sim):
    messages = [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me see.", "signature": "0" * 32},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Hi."},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
                {"type": "text", "text": "count to 2"},
            ],
        },
    ]
    message = sdk(sim.base_url).messages.create(model=MODEL, max_tokens=1000, messages=messages)
    assert message.content[-1].text == "1, 2"


def test_max_tokens_stops_with_max_tokens(sim):
    message = sdk(sim.base_url).messages.create(model=MODEL, max_tokens=4, messages=COUNT)
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 4
    assert [block.type for block in message.content] == ["thinking"]


def test_a_call_cut_short_is_left_out(sim):
    whole = httpx.post(
        f"{sim.base_url}/v1/messages", json=body([{"role": "user", "content": CALL}], tools=TOOLS)
    ).json()
    cut = body(
        [{"role": "user", "content": CALL}], tools=TOOLS, max_tokens=whole["usage"]["output_tokens"] - 1
    )
    message = httpx.post(f"{sim.base_url}/v1/messages", json=cut).json()
    assert message["stop_reason"] == "max_tokens" and [b["type"] for b in message["content"]] == ["thinking"]


def test_server_tools_and_unknown_fields_are_tolerated_and_never_called(sim):
    tools = [*TOOLS, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    extra = {
        "metadata": {"user_id": "u"},
        "context_management": {"edits": []},
        "output_config": {"effort": "high"},
    }
    messages = [{"role": "user", "content": 'count to 2 #sim:call web_search {"query": "x"}'}]
    response = httpx.post(
        f"{sim.base_url}/v1/messages", json=body(messages, tools=tools, tool_choice={"type": "auto"}, **extra)
    )
    assert response.status_code == 200 and response.json()["stop_reason"] == "end_turn"


@pytest.mark.parametrize("choice", [{"type": "none"}, {"type": "tool", "name": "other"}])
def test_tool_choice_can_rule_the_call_out(sim, choice):
    tools = [*TOOLS, {"name": "other", "input_schema": {"type": "object"}}]
    response = httpx.post(
        f"{sim.base_url}/v1/messages",
        json=body([{"role": "user", "content": CALL}], tools=tools, tool_choice=choice),
    )
    assert response.json()["stop_reason"] == "end_turn"


def test_errors_while_serving_are_anthropic_shaped(sim):
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk(sim.base_url).messages.create(model="claude-opus-4", max_tokens=10, messages=COUNT)
    assert info.value.body == {
        "type": "error",
        "error": {"type": "NotFoundError", "message": "The model `claude-opus-4` does not exist."},
    }
    failed = httpx.post(
        f"{sim.base_url}/v1/messages",
        json=body([{"role": "user", "content": "hi #sim:status=529"}], stream=True),
    )
    assert failed.status_code == 529 and failed.json()["type"] == "error"
    counted = httpx.post(
        f"{sim.base_url}/v1/messages/count_tokens", json={"model": "nope", "messages": COUNT}
    )
    assert counted.status_code == 404 and counted.json()["error"]["type"] == "NotFoundError"


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tokens": None},
        {"messages": [{"role": "robot", "content": "hi"}]},
        {"thinking": {"type": "enabled", "budget_tokens": 100}},
        {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 1024},
        {"tool_choice": {"type": "tool"}},
    ],
    ids=["no_max_tokens", "bad_role", "small_budget", "budget_not_below_max", "unnamed_tool_choice"],
)
def test_invalid_bodies_get_vllms_validation_400(sim, bad):
    """FastAPI validates before vLLM's Anthropic route runs, so its app-wide OpenAI-shaped error answers."""
    response = httpx.post(
        f"{sim.base_url}/v1/messages", json={k: v for k, v in {**body(COUNT), **bad}.items() if v is not None}
    )
    assert response.status_code == 400 and set(response.json()) == {"error"}


def test_claude_code_requests_as_captured(sim):
    """Claude Code 2.1.328's own bodies (trimmed): ``?beta=true``, a billing-header system block, a
    message with role "system", adaptive thinking, cache_control everywhere. Turn 1 answers (the same
    text whatever the per-request billing hash), turn 2 quotes the tool result, and turn 1 with a
    directive in its prompt calls ``Bash``."""
    data = load_data("claude_code.json")
    turn1, turn2 = data["turn1"], data["turn2"]

    def final_blocks(request: dict) -> list[dict]:
        events = named_events(sim.base_url, data["path"], request)
        assert events[-1] == {"type": "message_stop"}
        blocks: list[dict] = []
        for event in events:
            if event["type"] == "content_block_start":
                blocks.append(copy.deepcopy(event["content_block"]))
            elif event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
                blocks[-1]["text"] += event["delta"]["text"]
            elif event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta":
                blocks[-1]["partial_json"] = (
                    blocks[-1].get("partial_json", "") + event["delta"]["partial_json"]
                )
        return blocks

    answer = final_blocks(turn1)
    rehashed = copy.deepcopy(turn1)
    rehashed["system"][0]["text"] = rehashed["system"][0]["text"].replace("cc_version", "cc_version=0;")
    assert final_blocks(rehashed)[-1]["text"] == answer[-1]["text"]
    result = turn2["messages"][-1]["content"][0]["content"]
    assert final_blocks(turn2)[-1] == {"type": "text", "text": f"Tool result: {result}"}
    turn1["messages"][0]["content"][-1]["text"] += '\n#sim:call Bash {"command": "echo hello > out.txt"}'
    call = final_blocks(turn1)[-1]
    assert (call["type"], call["name"], call["partial_json"]) == (
        "tool_use",
        "Bash",
        '{"command": "echo hello > out.txt"}',
    )


def test_the_next_turn_of_a_conversation_with_tools_reuses_its_whole_prefix(sim):
    """Tools are rendered in the first system message, as DeepSeek-V4's template does, not after the
    conversation: Claude Code's turn 2 (turn 1 plus its tool call and result, a new billing hash)
    finds turn 1's whole prompt in the prefix cache but for its last, partial block."""
    data = load_data("claude_code.json")
    turn1 = {**copy.deepcopy(data["turn1"]), "stream": False, "max_tokens": 1}
    turn1["system"][1]["text"] = "A prefix of this test's own. " + turn1["system"][1]["text"]
    turn2 = copy.deepcopy(turn1)  # the next turn: turn 1's conversation, its tool call and result
    turn2["messages"] += copy.deepcopy(data["turn2"]["messages"][2:])
    turn2["system"][0]["text"] += " cch=4f2a1;"  # a new billing hash
    first = httpx.post(sim.base_url + data["path"], json=turn1, timeout=30).json()["usage"]
    second = httpx.post(sim.base_url + data["path"], json=turn2, timeout=30).json()["usage"]
    assert first.get("cache_read_input_tokens", 0) == 0
    assert second["cache_read_input_tokens"] >= first["input_tokens"] - sim.config.block_size, (first, second)
