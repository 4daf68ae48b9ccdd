"""``POST /v1/responses`` against a real server, with the OpenAI SDK and raw events."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.sim.helpers import MODEL, load_data, named_events

TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        "strict": False,
    }
]
OTHER_TOOLS = [
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch."},
    {"type": "web_search"},
    {"type": "local_shell"},
]
CALL = 'list the files #sim:call shell {"cmd": "ls -la"}'
USAGE_KEYS = {
    "input_tokens",
    "input_tokens_details",
    "output_tokens",
    "output_tokens_details",
    "total_tokens",
}


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0)


def test_non_stream_shape(sim):
    response = sdk(sim.base_url).responses.create(model=MODEL, input="count from 1 to 5")
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "completed" and response.model == MODEL
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert reasoning.content and reasoning.content[0].text.startswith(
        "The user wants me to count from 1 to 5"
    )
    assert message.role == "assistant" and message.status == "completed"
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert response.output_text == "1, 2, 3, 4, 5"
    usage = response.usage
    assert usage is not None and usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0 and usage.output_tokens_details.reasoning_tokens == 0
    raw = httpx.post(f"{sim.base_url}/v1/responses", json={"model": MODEL, "input": "hi"}).json()
    assert set(raw["usage"]) == USAGE_KEYS and raw["tool_choice"] == "none"  # "auto" without tools
    assert raw["max_output_tokens"] == sim.config.max_model_len - raw["usage"]["input_tokens"]


def test_stream_events_are_vllms(sim):
    events = named_events(
        sim.base_url, "/v1/responses", {"model": MODEL, "input": "count to 3", "stream": True}
    )
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    types = [event["type"] for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["usage"] is None
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert reasoning.startswith("The user wants me to count") and text == "1, 2, 3"
    done = [event["item"] for event in events if event["type"] == "response.output_item.done"]
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"] == done  # the items as streamed, same ids
    assert [item["type"] for item in done] == ["reasoning", "message"]
    assert final["usage"]["output_tokens"] > 3


def test_sdk_stream_final_response(sim):
    with sdk(sim.base_url).responses.stream(model=MODEL, input="count from 4 to 6") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "4, 5, 6"


def test_tool_round_trip(sim):
    client = sdk(sim.base_url)
    first = client.responses.create(model=MODEL, input=CALL, tools=TOOLS)
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and call.type == "function_call"
    assert call.call_id.startswith("chatcmpl-tool-") and call.id and call.id.startswith("fc_")
    assert (call.name, json.loads(call.arguments), call.status) == ("shell", {"cmd": "ls -la"}, "completed")
    history = [
        {"role": "user", "content": CALL},
        *(item.model_dump(exclude_none=True) for item in first.output),  # reasoning sent back too
        {"type": "function_call_output", "call_id": call.call_id, "output": "a.txt\nb.txt"},
    ]
    second = client.responses.create(model=MODEL, input=history, tools=TOOLS)
    assert second.output_text == "Tool result: a.txt\nb.txt"
    assert [item.type for item in second.output] == ["reasoning", "message"]


def test_stream_of_a_call(sim):
    body = {"model": MODEL, "input": CALL, "tools": TOOLS, "stream": True}
    events = named_events(sim.base_url, "/v1/responses", body)
    added = [e for e in events if e["type"] == "response.output_item.added"][1]
    assert added["item"]["type"] == "function_call" and added["item"]["status"] == "in_progress"
    assert added["item"]["arguments"] == "" and added["item"]["name"] == "shell"
    pieces = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert len(pieces) > 1 and done["arguments"] == "".join(pieces) and done["name"] == "shell"
    assert json.loads(done["arguments"]) == {"cmd": "ls -la"}
    final = events[-1]["response"]["output"][-1]
    assert final["call_id"] == added["item"]["call_id"] and final["status"] == "completed"


def test_input_items_of_every_kind(sim):
    history = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "user", "content": "earlier question"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "count to 2"}]},
    ]
    body = {"model": MODEL, "input": history, "tools": TOOLS + OTHER_TOOLS, "instructions": "You help."}
    response = sdk(sim.base_url).responses.create(**body)
    assert response.output_text == "1, 2" and response.instructions == "You help."


def test_other_tool_types_are_never_called(sim):
    body = {"model": MODEL, "input": 'count to 2 #sim:call apply_patch {"patch": "x"}', "tools": OTHER_TOOLS}
    response = sdk(sim.base_url).responses.create(**body)
    assert [item.type for item in response.output] == ["reasoning", "message"]


@pytest.mark.parametrize(
    "extra", [{"reasoning": {"effort": "none"}}, {"chat_template_kwargs": {"thinking": False}}], ids=str
)
def test_thinking_off(sim, extra):
    body = {"model": MODEL, "input": "count to 3", **extra}
    response = httpx.post(f"{sim.base_url}/v1/responses", json=body).json()
    assert [item["type"] for item in response["output"]] == ["message"]


def test_max_output_tokens_makes_it_incomplete(sim):
    response = sdk(sim.base_url).responses.create(model=MODEL, input="count to 50", max_output_tokens=5)
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 5
    assert response.max_output_tokens == 5


def test_nothing_is_stored_as_in_vllm_with_its_store_off(sim):
    body = {"model": MODEL, "input": "hi", "previous_response_id": "resp_0123"}
    response = httpx.post(f"{sim.base_url}/v1/responses", json=body)
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "Response with id 'resp_0123' not found.",
        "type": "invalid_request_error",
        "param": "response_id",
        "code": 404,
    }
    with pytest.raises(openai.NotFoundError):
        sdk(sim.base_url).responses.create(model=MODEL, input="hi", previous_response_id="resp_0123")
    stored = sdk(sim.base_url).responses.create(model=MODEL, input="count to 1", store=True)
    for method, path in (("GET", ""), ("POST", "/cancel")):
        response = httpx.request(method, f"{sim.base_url}/v1/responses/{stored.id}{path}")
        assert response.status_code == 404 and stored.id in response.json()["error"]["message"]


def test_background_needs_the_store(sim):
    response = httpx.post(f"{sim.base_url}/v1/responses", json={"input": "hi", "background": True})
    assert response.status_code == 400 and response.json()["error"]["param"] == "background"
    allowed = {"input": "count to 1", "background": True, "store": False}
    assert httpx.post(f"{sim.base_url}/v1/responses", json=allowed).status_code == 200


@pytest.mark.parametrize("body", [{"model": MODEL}, {"input": "hi", "max_output_tokens": 0}, {"input": 3}])
def test_bad_bodies_are_400(sim, body):
    assert httpx.post(f"{sim.base_url}/v1/responses", json=body).status_code == 400


def test_unknown_model_is_404(sim):
    with pytest.raises(openai.NotFoundError):
        sdk(sim.base_url).responses.create(model="gpt-5", input="hi")


def test_codex_requests_as_captured(sim):
    """Codex CLI 0.169.0's own bodies (trimmed): turn 1 answers, turn 2 quotes the command's output; the
    same turn 1 with a directive in its prompt calls ``exec_command``."""
    data = load_data("codex.json")
    turn1, turn2 = data["turn1"], data["turn2"]
    events = named_events(sim.base_url, data["path"], turn1)
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["status"] == "completed"
    answer = named_events(sim.base_url, data["path"], turn2)[-1]["response"]["output"][-1]
    output = turn2["input"][-1]["output"]
    assert answer["content"][0]["text"] == "Tool result: " + output[:200]
    prompt = turn1["input"][-1]["content"][0]
    prompt["text"] += '\n#sim:call exec_command {"cmd": "echo hello > out.txt"}'
    call = named_events(sim.base_url, data["path"], turn1)[-1]["response"]["output"][-1]
    assert call["type"] == "function_call" and call["name"] == "exec_command"
    assert json.loads(call["arguments"]) == {"cmd": "echo hello > out.txt"}
