"""The coding agents' APIs through the gateway to the simulator, with the official SDKs as clients:
the OpenAI Responses API (Codex CLI, the Agents SDK) and Anthropic Messages (Claude Code), their
tool loops, errors in each API's own shape, stored responses only for the key that made them, model
aliases, and telemetry labelled by API."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
SHELL = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a shell command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}
BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


@pytest.fixture
def stack(start_sim, start_gateway):
    sim = start_sim()
    return sim, start_gateway(sim.url, model_aliases="claude-*,gpt-5-codex")


def openai_client(gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def anthropic_client(gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)


def test_responses_stream_and_not_with_a_tool_loop(stack, make_key) -> None:
    _, gateway = stack
    client = openai_client(gateway, make_key("codex"))
    whole = client.responses.create(model=MODEL, input="Count to 5.", max_output_tokens=200)
    assert whole.status == "completed" and "1, 2, 3, 4, 5" in whole.output_text
    assert whole.usage is not None and whole.usage.output_tokens > 0
    with client.responses.stream(model="gpt-5-codex", input="Count to 3.", max_output_tokens=200) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds and "1, 2, 3" in final.output_text

    ask = [{"role": "user", "content": 'Make a file.\n#sim:call exec_command {"cmd": "echo hi"}'}]
    first = client.responses.create(model=MODEL, input=ask, tools=[SHELL], max_output_tokens=200)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("exec_command", {"cmd": "echo hi"})
    history = [*ask, *[item.model_dump(exclude_none=True) for item in first.output]]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "hi"})
    second = client.responses.create(model=MODEL, input=history, tools=[SHELL], max_output_tokens=200)
    assert "Tool result: hi" in second.output_text


def test_messages_stream_and_not_count_tokens_and_a_tool_loop(stack, make_key) -> None:
    _, gateway = stack
    client = anthropic_client(gateway, make_key("claude"))
    ask = [{"role": "user", "content": "Count to 5."}]
    message = client.messages.create(model=MODEL, max_tokens=300, messages=ask)
    [thinking, text] = message.content
    assert thinking.type == "thinking" and thinking.signature and text.type == "text"
    assert "1, 2, 3, 4, 5" in text.text and message.stop_reason == "end_turn"
    # a second turn sends the thinking block back, signature and all
    turn = [*ask, {"role": "assistant", "content": [b.model_dump() for b in message.content]}]
    turn.append({"role": "user", "content": "Count to 2."})
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=300, messages=turn) as stream:
        final = stream.get_final_message()
    assert "1, 2" in final.content[-1].text and final.usage.output_tokens > 0
    counted = client.messages.count_tokens(model=MODEL, messages=turn)
    assert counted.input_tokens > 0
    off = client.messages.create(model=MODEL, max_tokens=100, messages=ask, thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"]

    tool_ask = [{"role": "user", "content": 'Make a file.\n#sim:call Bash {"command": "echo hi"}'}]
    first = client.messages.create(model=MODEL, max_tokens=300, messages=tool_ask, tools=[BASH])
    [use] = [block for block in first.content if block.type == "tool_use"]
    assert (first.stop_reason, use.name, use.input) == ("tool_use", "Bash", {"command": "echo hi"})
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "hi"}
    history = [*tool_ask, {"role": "assistant", "content": [b.model_dump() for b in first.content]}]
    history.append({"role": "user", "content": [result]})
    with client.messages.stream(model=MODEL, max_tokens=300, messages=history, tools=[BASH]) as stream:
        answer = stream.get_final_message()
    assert "Tool result: hi" in answer.content[-1].text


def test_errors_come_in_each_apis_own_shape(stack, make_key) -> None:
    _, gateway = stack
    key = make_key("limited", rpm=2)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        anthropic_client(gateway, "dsk-wrong").messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as unknown:
        anthropic_client(gateway, key).messages.create(
            model="gpt-4", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert unknown.value.body == {  # type: ignore[comparison-overlap]
        "type": "error",
        "error": {"type": "not_found_error", "message": "The model `gpt-4` does not exist."},
    }
    with pytest.raises(anthropic.BadRequestError):
        anthropic_client(gateway, key).messages.create(model=MODEL, max_tokens=0, messages=[])
    with pytest.raises(anthropic.RateLimitError) as limited:
        anthropic_client(gateway, key).messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    assert int(limited.value.response.headers["retry-after"]) >= 1
    with pytest.raises(openai.RateLimitError) as responses_limited:
        openai_client(gateway, key).responses.create(model=MODEL, input="hi")
    assert responses_limited.value.code == "rate_limit_requests"


def test_anthropic_headers_and_the_thinking_budget_are_bounded(stack, make_key) -> None:
    """An ``anthropic-beta`` of 30,000 bytes, or one that is not a list of names, and a
    ``thinking.budget_tokens`` past the context window are a 400 in Anthropic's shape; Claude Code's
    betas and a budget within it go through."""
    _, gateway = stack
    client = anthropic_client(gateway, make_key("bounded"))
    hi = [{"role": "user", "content": "hi"}]
    for beta in ("x" * 30_000, "a,b" + ",c" * 600, "beta name", "a;b"):
        with pytest.raises(anthropic.BadRequestError) as long_beta:
            client.messages.create(
                model=MODEL, max_tokens=10, messages=hi, extra_headers={"anthropic-beta": beta}
            )
        assert long_beta.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert "anthropic-beta" in long_beta.value.body["error"]["message"]  # type: ignore[index]
    for budget in (2**63, 2**20 + 1):
        with pytest.raises(anthropic.BadRequestError) as huge:
            client.messages.create(
                model=MODEL, max_tokens=10, messages=hi, thinking={"type": "enabled", "budget_tokens": budget}
            )
        assert "budget_tokens" in huge.value.body["error"]["message"]  # type: ignore[index]
    betas = "claude-code-20250219,interleaved-thinking-2025-05-14, fine-grained-tool-streaming-2025-05-14"
    answer = client.messages.create(
        model=MODEL,
        max_tokens=2048,
        messages=hi,
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_headers={"anthropic-beta": betas},
    )
    assert answer.stop_reason in {"end_turn", "max_tokens"}


def test_a_stored_response_is_only_the_creating_keys(stack, make_key) -> None:
    """Reading, cancelling, deleting or referring to a stored response (``previous_response_id``,
    ``conversation``, an ``item_reference`` input) is 404 for every key but the one that created it."""
    _, gateway = stack
    owner, other = make_key("owner"), make_key("other")
    created = openai_client(gateway, owner).responses.create(model=MODEL, input="Count to 2.", store=True)
    for method, path in (("GET", ""), ("POST", "/cancel"), ("DELETE", "")):
        response = httpx.request(
            method,
            f"{gateway.url}/v1/responses/{created.id}{path}",
            headers={"Authorization": f"Bearer {other}"},
        )
        assert response.status_code == 404 and response.json()["error"]["code"] == "response_not_found"
    item = {"type": "item_reference", "id": created.output[-1].id}
    for refers in (
        {"previous_response_id": created.id},
        {"conversation": created.id},
        {"conversation": {"id": created.id}},
        {"input": ["more", item]},
    ):
        with pytest.raises(openai.NotFoundError) as stranger:
            openai_client(gateway, other).responses.create(model=MODEL, **{"input": "more", **refers})
        assert stranger.value.code == "response_not_found", refers
    with pytest.raises(openai.BadRequestError) as no_id:
        openai_client(gateway, owner).responses.create(model=MODEL, input="more", conversation={"id": 7})
    assert no_id.value.param == "conversation"
    owned = openai_client(gateway, owner).responses.create(model=MODEL, input="more", conversation=created.id)
    assert owned.status == "completed"  # the owner's reference is checked and goes on
    deleted = httpx.delete(
        f"{gateway.url}/v1/responses/{created.id}", headers={"Authorization": f"Bearer {owner}"}
    )
    assert deleted.json() == {"id": created.id, "object": "response", "deleted": True}
    again = httpx.get(
        f"{gateway.url}/v1/responses/{created.id}", headers={"Authorization": f"Bearer {owner}"}
    )
    assert again.status_code == 404 and again.json()["error"]["code"] == "response_not_found"


def test_aliases_are_listed_and_telemetry_is_labelled_by_api(stack, make_key) -> None:
    _, gateway = stack
    key = make_key("agents")
    client = openai_client(gateway, key)
    assert {m.id for m in client.models.list()} == {MODEL, "gpt-5-codex"}  # a glob can't be listed
    assert client.models.retrieve("gpt-5-codex").id == "gpt-5-codex"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4")
    with client.responses.stream(model=MODEL, input="Count to 2.") as responses:
        responses.get_final_response()
    ask = [{"role": "user", "content": "Count to 2."}]
    claude = anthropic_client(gateway, key)
    with claude.messages.stream(model=MODEL, max_tokens=100, messages=ask) as messages:
        messages.get_final_message()
    for api in ("responses", "messages"):
        series = f"gateway_requests_total{{api={api},key=agents,model={MODEL},status=200}}"
        wait_until(lambda series=series: scrape(gateway.url).get(series) == 1, what=series)
        assert scrape(gateway.url)[f"gateway_ttft_seconds_count{{api={api},key=agents,model={MODEL}}}"] == 1
