"""Stream and non-stream shapes against a real server, with the OpenAI SDK and raw httpx."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.sim.helpers import MODEL, STREAM_USAGE, chat_body, stream_chat

COUNT_12 = "count from 1 to 12"
NUMBERS_12 = ", ".join(str(n) for n in range(1, 13))


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0)


def test_sdk_stream_shape(sim):
    stream = sdk(sim.base_url).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": COUNT_12}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    first, *middle, last_content, usage_chunk = chunks
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content == ""
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert last_content.choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in [first, *middle])
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning", None) or "" for c in middle + [last_content])
    content = "".join(c.choices[0].delta.content or "" for c in middle + [last_content])
    assert content == NUMBERS_12
    assert reasoning.startswith("The user wants me to count from 1 to 12")
    # reasoning strictly before content: no reasoning after the first content piece
    seen_content = False
    for c in middle + [last_content]:
        delta = c.choices[0].delta
        if seen_content:
            assert not getattr(delta, "reasoning", None)
        seen_content = seen_content or bool(delta.content)
    usage = usage_chunk.usage
    assert usage is not None and usage.completion_tokens > len(middle)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_raw_stream_frames_and_done(sim):
    with (
        httpx.Client(base_url=sim.base_url) as client,
        client.stream("POST", "/v1/chat/completions", json=chat_body(COUNT_12, **STREAM_USAGE)) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-dspark-simulator"] == "1"
        raw = response.read().decode()
    frames = raw.split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]"
    assert all(frame.startswith("data: ") for frame in frames[:-1])


def test_continuous_usage_is_cumulative_and_steps_are_speculative(sim):
    events = stream_chat(sim.base_url, chat_body(COUNT_12, **STREAM_USAGE))
    assert events[-1] == "[DONE]"
    *chunks, usage_chunk = events[:-1]
    counts = [chunk["usage"]["completion_tokens"] for chunk in chunks]
    assert counts[0] == 0 and counts[1] == 1  # role chunk, then the prefill step's single token
    steps = [b - a for a, b in zip(counts, counts[1:], strict=False)]
    assert all(1 <= step <= 5 + 1 for step in steps)
    assert any(step > 1 for step in steps)  # acceptance 0.7: some drafts accepted
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == counts[-1]
    assert all(chunk["usage"]["prompt_tokens"] == usage_chunk["usage"]["prompt_tokens"] for chunk in chunks)
    ids = {event["id"] for event in events[:-1]}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")


def test_same_seed_same_text_and_chunking(new_sim):
    def deltas(base_url: str) -> list[dict]:
        return [
            e["choices"][0]["delta"]
            for e in stream_chat(base_url, chat_body("tell me about caching", stream=True))[:-1]
        ]

    server = new_sim(seed=7)
    assert deltas(server.base_url) == deltas(server.base_url)
    assert deltas(server.base_url) == deltas(new_sim(seed=7).base_url)
    assert deltas(server.base_url) != deltas(new_sim(seed=8).base_url)


def test_non_stream_matches_stream(sim):
    result = sdk(sim.base_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": COUNT_12}]
    )
    message = result.choices[0].message
    assert message.content == NUMBERS_12
    assert str(getattr(message, "reasoning", None)).startswith("The user wants me to count")
    assert result.choices[0].finish_reason == "stop"
    events = stream_chat(sim.base_url, chat_body(COUNT_12, **STREAM_USAGE))
    usage = result.usage
    assert usage is not None and usage.completion_tokens == events[-2]["usage"]["completion_tokens"]
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_without_reasoning_parser_content_is_raw(new_sim):
    server = new_sim(reasoning_parser=False)
    events = stream_chat(server.base_url, chat_body(COUNT_12, stream=True))
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert not any("reasoning" in d for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert content.endswith("</think>" + NUMBERS_12)
    message = (
        sdk(server.base_url)
        .chat.completions.create(model=MODEL, messages=[{"role": "user", "content": COUNT_12}])
        .choices[0]
        .message
    )
    assert message.content == content and getattr(message, "reasoning", None) is None


THINKING_OFF = [{"chat_template_kwargs": {"thinking": False}}, {"reasoning_effort": "none"}]


@pytest.mark.parametrize("extra", THINKING_OFF)
def test_thinking_off_has_no_reasoning(sim, extra):
    events = stream_chat(sim.base_url, chat_body(COUNT_12, stream=True, **extra))
    deltas = [e["choices"][0]["delta"] for e in events[:-1]]
    assert not any(d.get("reasoning") for d in deltas)
    assert "".join(d.get("content", "") for d in deltas) == NUMBERS_12


def test_max_tokens_gives_length(sim):
    client = sdk(sim.base_url)
    cut_in_reasoning = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": COUNT_12}], max_tokens=4
    )
    choice = cut_in_reasoning.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    assert getattr(choice.message, "reasoning", None) == "The user wants me"
    assert cut_in_reasoning.usage is not None and cut_in_reasoning.usage.completion_tokens == 4
    events = stream_chat(sim.base_url, chat_body(COUNT_12, max_tokens=4, **STREAM_USAGE))
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"]["completion_tokens"] == 4


def test_completions_raw_text(sim):
    body = {"model": MODEL, "prompt": "User: count from 1 to 3\nAssistant: <think>", "max_tokens": 100}
    result = httpx.post(f"{sim.base_url}/v1/completions", json=body).json()
    assert result["object"] == "text_completion" and result["id"].startswith("cmpl-")
    assert result["choices"][0]["text"].endswith("</think>1, 2, 3")
    assert result["choices"][0]["finish_reason"] == "stop"
    events = stream_chat(sim.base_url, {**body, **STREAM_USAGE}, path="/v1/completions")
    assert "".join(e["choices"][0]["text"] for e in events[:-2]) == result["choices"][0]["text"]
    assert events[-2]["choices"] == [] and events[-1] == "[DONE]"
    default_cap = httpx.post(f"{sim.base_url}/v1/completions", json={"prompt": "hello"}).json()
    assert default_cap["usage"]["completion_tokens"] == 16  # vLLM's default max_tokens for completions
    assert default_cap["choices"][0]["finish_reason"] == "length"


def test_thinking_disabled_prompt_for_completions(sim):
    body = {"prompt": "User: count from 1 to 3\nAssistant: </think>", "max_tokens": 100}
    result = httpx.post(f"{sim.base_url}/v1/completions", json=body).json()
    assert result["choices"][0]["text"] == "1, 2, 3"
