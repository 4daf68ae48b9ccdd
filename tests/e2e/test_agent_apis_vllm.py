"""The Responses API and Anthropic Messages through the gateway to a REAL vLLM (CPU build, scripted
tiny model: reasoning ``Let me think``, answer ``Hello world``, 12 tokens), with the official SDKs.

vLLM runs its own reasoning parser on both routes; the gateway relays and measures. A second turn
that sends back the first turn's ``thinking`` block (signature and all) or ``reasoning`` item is
served, and each API's requests are counted under its own ``api`` label with their tokens.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.support.probes import scrape, wait_until
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

ASK = [{"role": "user", "content": "Hi"}]
#: The Anthropic SDK has no temperature argument any more; vLLM still reads it (greedy: the scripted answer).
GREEDY = {"temperature": 0}


@pytest.fixture
def gateway(vllm_server: VLLMServer, start_gateway):
    return start_gateway(vllm_server.base_url, served_model=TINY_MODEL_NAME, slots=2)


def test_responses_through_the_gateway(gateway, make_key) -> None:
    client = openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=make_key("codex"), max_retries=0, timeout=120
    )
    whole = client.responses.create(model=TINY_MODEL_NAME, input=ASK, max_output_tokens=50, temperature=0)
    kinds = [item.type for item in whole.output]
    assert kinds == ["reasoning", "message"] and whole.output_text == "Hello world"
    assert whole.usage is not None and whole.usage.output_tokens == 12
    with client.responses.stream(
        model=TINY_MODEL_NAME, input=ASK, max_output_tokens=50, temperature=0, reasoning={"effort": "low"}
    ) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_response()
    assert events[-1] == "response.completed" and final.output_text == "Hello world"
    # the second turn sends the first turn's output items back, the reasoning item included
    history = [*ASK, *[item.model_dump(exclude_none=True) for item in whole.output]]
    history.append({"role": "user", "content": "Again"})
    again = client.responses.create(model=TINY_MODEL_NAME, input=history, max_output_tokens=50, temperature=0)
    assert again.status == "completed" and again.output_text == "Hello world"
    series = f"gateway_tokens_total{{api=responses,key=codex,kind=completion,model={TINY_MODEL_NAME}}}"
    wait_until(lambda: scrape(gateway.url).get(series) == 36, what="the three responses' tokens")


def test_messages_through_the_gateway(gateway, make_key) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("claude"), max_retries=0, timeout=120)
    message = client.messages.create(model=TINY_MODEL_NAME, max_tokens=50, messages=ASK, extra_body=GREEDY)
    [thinking, text] = message.content
    assert (thinking.type, thinking.thinking, text.text) == ("thinking", "Let me think", "Hello world")
    assert message.usage.output_tokens == 12 and message.stop_reason == "end_turn"
    turn = [*ASK, {"role": "assistant", "content": [b.model_dump() for b in message.content]}]
    turn.append({"role": "user", "content": "Again"})
    with client.messages.stream(
        model=TINY_MODEL_NAME, max_tokens=50, messages=turn, extra_body=GREEDY
    ) as stream:
        final = stream.get_final_message()
    assert final.content[-1].text == "Hello world" and final.usage.output_tokens == 12
    counted = client.messages.count_tokens(model=TINY_MODEL_NAME, messages=turn)
    assert counted.input_tokens > message.usage.input_tokens  # the longer conversation
    values = {}

    def recorded() -> bool:
        values.update(scrape(gateway.url))
        key = f"gateway_requests_total{{api=messages,key=claude,model={TINY_MODEL_NAME},status=200}}"
        return values.get(key) == 2

    wait_until(recorded, what="the two messages' records")
    assert (
        values[f"gateway_tokens_total{{api=messages,key=claude,kind=completion,model={TINY_MODEL_NAME}}}"]
        == 24
    )
    # the stream's first token; a whole message has no token timing (vLLM sends Messages no metrics)
    assert values[f"gateway_ttft_seconds_count{{api=messages,key=claude,model={TINY_MODEL_NAME}}}"] == 1
