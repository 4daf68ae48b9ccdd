"""Reasoning split through a real gateway: simulator with vLLM's reasoning parser vs raw text, both
must reach the OpenAI SDK as the same (reasoning, content); thinking controls; field policy."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
PROMPTS = ["Count from 1 to 30.", "Explain speculative decoding briefly."]


def reasoning_of(obj) -> str | None:
    extra = obj.model_extra or {}
    assert extra.get("reasoning_content") == extra.get("reasoning")  # mirrored under both names
    return extra.get("reasoning_content")


def chat(client: openai.OpenAI, text: str, stream: bool, **kwargs) -> tuple[str, str, str | None]:
    """(reasoning, content, finish_reason) as an SDK user reads them."""
    messages = [{"role": "user", "content": text}]
    if not stream:
        choice = client.chat.completions.create(model=MODEL, messages=messages, **kwargs).choices[0]
        return reasoning_of(choice.message) or "", choice.message.content or "", choice.finish_reason
    reasoning, content, finish = "", "", None
    for chunk in client.chat.completions.create(model=MODEL, messages=messages, stream=True, **kwargs):
        for choice in chunk.choices:
            reasoning += reasoning_of(choice.delta) or ""
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return reasoning, content, finish


@pytest.fixture
def clients(start_sim, start_gateway, make_key):
    """Two gateways: one before a simulator that splits (vLLM with a parser), one before raw text."""
    key = make_key("reasoner")
    out = {}
    for name, parser in (("parsed", True), ("raw", False)):
        sim = start_sim(reasoning_parser=parser, seed=3)
        gateway = start_gateway(sim.url)
        out[name] = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    return out


@pytest.mark.parametrize("prompt", PROMPTS)
def test_parsed_and_raw_upstreams_give_the_same_split_in_stream_and_not(clients, prompt: str) -> None:
    results = {
        (name, stream): chat(c, prompt, stream) for name, c in clients.items() for stream in (False, True)
    }
    reference = results[("parsed", False)]
    reasoning, content, finish = reference
    assert reasoning and content and finish == "stop"
    assert "<think>" not in content and "</think>" not in content and "</think>" not in reasoning
    assert all(result == reference for result in results.values()), results


def test_max_tokens_before_the_end_marker(clients) -> None:
    """Cut before ``</think>``: reasoning by the upstream's split. Raw text is reasoning only once
    markers have shown it: the first answer of an upstream not known yet showed none, so it is the
    answer; once the upstream's answers have shown markers, a cut one is all reasoning (DeepSeek-V4's
    template opens reasoning in the prompt)."""
    for stream in (False, True):
        reasoning, content, finish = chat(clients["parsed"], PROMPTS[1], stream, max_tokens=10)
        assert finish == "length" and reasoning and content == ""
    raw = clients["raw"]
    _, cut, finish = chat(raw, PROMPTS[1], True, max_tokens=10)
    assert finish == "length" and cut
    chat(raw, PROMPTS[0], False)  # a whole answer: its </think> shows
    for stream in (False, True):
        assert chat(raw, PROMPTS[1], stream, max_tokens=10) == (cut, "", "length")


@pytest.mark.parametrize(
    "control",
    [
        {"reasoning_effort": "none"},
        {"extra_body": {"thinking": False}},
        {"extra_body": {"thinking": {"type": "disabled"}}},
        {"extra_body": {"chat_template_kwargs": {"thinking": False}, "reasoning_effort": "high"}},
    ],
)
def test_thinking_off_gives_untouched_content_only(clients, control: dict) -> None:
    _, with_thinking, _ = chat(clients["parsed"], PROMPTS[0], False)
    for client in clients.values():
        for stream in (False, True):
            reasoning, content, _ = chat(client, PROMPTS[0], stream, **control)
            assert reasoning == "" and content == with_thinking


def test_include_reasoning_false_drops_reasoning_only(clients) -> None:
    for client in clients.values():
        full = chat(client, PROMPTS[0], False)
        for stream in (False, True):
            reply = chat(client, PROMPTS[0], stream, extra_body={"include_reasoning": False})
            assert reply == ("", full[1], full[2])


def test_invalid_thinking_values_are_400(clients) -> None:
    for bad in ({"reasoning_effort": "extreme"}, {"thinking": "yes"}, {"include_reasoning": "no"}):
        with pytest.raises(openai.BadRequestError) as info:
            clients["raw"].chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body=bad
            )
        assert info.value.body["param"] in ("reasoning_effort", "thinking", "include_reasoning")


def test_per_key_default_thinking(start_sim, start_gateway, make_key) -> None:
    sim = start_sim(reasoning_parser=False)
    gateway = start_gateway(sim.url)
    quiet = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("quiet", default_thinking="off"))
    reasoning, content, _ = chat(quiet, PROMPTS[0], True)
    assert reasoning == "" and content.startswith("1, 2, 3")
    reasoning, _, _ = chat(quiet, PROMPTS[0], True, reasoning_effort="high")  # the request still decides
    assert reasoning


def test_field_policy_single_name(start_sim, start_gateway, make_key) -> None:
    sim = start_sim(reasoning_parser=False)
    gateway = start_gateway(sim.url, reasoning_fields=("reasoning",))
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPTS[0]}]}
    message = httpx.post(
        gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {make_key('f')}"}
    ).json()["choices"][0]["message"]
    assert message["reasoning"] and "reasoning_content" not in message


def test_text_completions_split_when_the_prompt_opens_think(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("t"), max_retries=0)
    prompt = "User: count from 1 to 3\nAssistant: <think>"
    choice = client.completions.create(model=MODEL, prompt=prompt, max_tokens=100).choices[0]
    assert choice.text == "1, 2, 3" and "count from 1 to 3" in choice.model_extra["reasoning_content"]
    text, reasoning = "", ""
    for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=100, stream=True):
        for c in chunk.choices:
            text += c.text
            reasoning += (c.model_extra or {}).get("reasoning_content") or ""
    assert (text, reasoning) == (choice.text, choice.model_extra["reasoning_content"])
    plain = client.completions.create(model=MODEL, prompt="Say hi", max_tokens=100).choices[0]
    assert "reasoning_content" not in (plain.model_extra or {}) and plain.text


def test_split_off_leaves_raw_markers_to_the_client(start_sim, start_gateway, make_key) -> None:
    """Control for the tests above: without the gateway's split, the raw upstream leaks `</think>`."""
    sim = start_sim(reasoning_parser=False)
    gateway = start_gateway(sim.url, reasoning_split="off")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("raw"), max_retries=0)
    reasoning, content, _ = chat(client, PROMPTS[0], False)
    assert reasoning == "" and "</think>" in content


@pytest.mark.parametrize("split", ["auto", "off"])
def test_output_cut_inside_reasoning_is_counted_as_reasoning_on_every_api(
    start_sim, start_gateway, make_key, split: str
) -> None:
    """``max_tokens`` 10 stops each answer inside its reasoning: the ledger counts all 10 tokens as
    reasoning — chat completions, the Responses API and Anthropic Messages, stream and not, whether
    the gateway splits or passes the backend's split on."""
    gateway = start_gateway(start_sim(seed=3).url, reasoning_split=split)
    key, admin = make_key("cut"), make_key("ops", scopes=["admin"])
    ask = "Explain speculative decoding briefly."
    bodies = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": ask}], "max_tokens": 10},
        "/v1/responses": {"input": ask, "max_output_tokens": 10},
        "/v1/messages": {"messages": [{"role": "user", "content": ask}], "max_tokens": 10},
    }
    sent = 0
    for route, body in bodies.items():
        for stream in (False, True):
            answer = httpx.post(
                gateway.url + route,
                json={"model": MODEL, "stream": stream, **body},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert answer.status_code == 200, answer.text
            sent += 1

    def rows() -> list[dict]:
        return httpx.get(
            gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}
        ).json()["data"]

    wait_until(lambda: len(rows()) == sent, what="every record")
    counted = {(r["route"], r["stream"]): (r["reasoning_tokens"], r["completion_tokens"]) for r in rows()}
    assert counted == {(route, stream): (10, 10) for route in bodies for stream in (False, True)}, counted


def test_a_model_with_other_markers_is_split_with_the_markers_it_is_configured_with(
    start_sim, start_gateway, make_key
) -> None:
    """A backend whose model ends its reasoning with `` response`` (the seed's ``--reasoning-config``)
    and no parser: the simulator writes that marker (``reasoning_end``), and the gateway told the same
    markers splits the raw text as a parser would — stream and not, and a cut marker never shows."""
    key = make_key("markers")
    parsed = start_sim(seed=3, reasoning_end=" response")
    raw = start_sim(seed=3, reasoning_end=" response", reasoning_parser=False)
    markers = {"reasoning_start": " thinking", "reasoning_end": " response"}
    reference = openai.OpenAI(base_url=start_gateway(parsed.url).url + "/v1", api_key=key, max_retries=0)
    client = openai.OpenAI(base_url=start_gateway(raw.url, **markers).url + "/v1", api_key=key, max_retries=0)
    chat(client, PROMPTS[0], False)  # a whole answer first: its marker shows the upstream writes them
    for stream in (False, True):
        reasoning, content, finish = chat(client, PROMPTS[1], stream)
        assert (reasoning, content, finish) == chat(reference, PROMPTS[1], stream)
        assert reasoning and content and " response" not in reasoning + content
