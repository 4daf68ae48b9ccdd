"""The harness itself: the official OpenAI SDK straight against the real vLLM, no gateway.

The scripted model always completes ``Let me think</think>Hello world<|im_end|>`` (12 tokens), so
these assertions are exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

REASONING = "Let me think"
CONTENT = "Hello world"
COMPLETION_TOKENS = 12
PROMPT = [{"role": "user", "content": "Hi"}]
PROMPT_TOKENS = 15  # "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"


@pytest.fixture
def client(vllm_server: VLLMServer) -> OpenAI:
    return OpenAI(base_url=f"{vllm_server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)


def extra(obj: Any, name: str) -> Any:
    """A field the SDK does not model (vLLM's ``reasoning``, ``metrics``)."""
    return (obj.model_extra or {}).get(name, getattr(obj, name, None))


def test_non_stream_splits_reasoning_and_content(client: OpenAI) -> None:
    resp = client.chat.completions.create(
        model=TINY_MODEL_NAME, messages=PROMPT, max_tokens=50, temperature=0
    )
    choice = resp.choices[0]
    assert extra(choice.message, "reasoning") == REASONING
    assert choice.message.content == CONTENT
    assert choice.finish_reason == "stop"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    assert resp.usage.total_tokens == PROMPT_TOKENS + COMPLETION_TOKENS


def test_stream_reasoning_then_content_then_usage(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=PROMPT,
        max_tokens=50,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    chunks = list(stream)
    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None and last.usage.completion_tokens == COMPLETION_TOKENS
    kinds, reasoning, content = [], "", ""
    for chunk in body:
        assert chunk.usage is not None  # continuous usage: cumulative on every chunk
        delta = chunk.choices[0].delta
        if r := extra(delta, "reasoning"):
            reasoning += r
            kinds.append("reasoning")
        if delta.content:
            content += delta.content
            kinds.append("content")
    assert (reasoning, content) == (REASONING, CONTENT)
    assert kinds == sorted(kinds, key=["reasoning", "content"].index)  # all reasoning first
    assert body[-1].choices[0].finish_reason == "stop"
    assert body[-1].usage.completion_tokens == COMPLETION_TOKENS


def test_ngram_speculation_accepts_every_draft(client: OpenAI) -> None:
    """When the prompt holds the chain's text, ngram drafts it all: 9 of 9 accepted with k=3."""
    resp = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=[{"role": "user", "content": f"{REASONING}</think>{CONTENT}"}],
        max_tokens=50,
        temperature=0,
        extra_body={"include_metrics": True},
    )
    assert resp.choices[0].message.content == CONTENT
    spec = extra(resp, "metrics")["speculative_decoding"]
    assert (spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]) == (9, 9)
    assert spec["per_step_accepted"] == [3, 3, 3]


def test_prometheus_metrics(vllm_server: VLLMServer, client: OpenAI) -> None:
    client.chat.completions.create(model=TINY_MODEL_NAME, messages=PROMPT, max_tokens=50, temperature=0)
    text = httpx.get(f"{vllm_server.base_url}/metrics", timeout=10).text
    assert "vllm:num_requests_running" in text
    assert "vllm:spec_decode_num_accepted_tokens_total" in text


def test_factory_without_reasoning_parser(vllm_factory: Callable[..., VLLMServer]) -> None:
    """A second server (no reasoning parser, no speculation): the whole chain is content."""
    server = vllm_factory(())
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=60)
    resp = client.chat.completions.create(
        model=TINY_MODEL_NAME, messages=PROMPT, max_tokens=50, temperature=0
    )
    assert resp.choices[0].message.content == f"{REASONING}</think>{CONTENT}"
    assert extra(resp.choices[0].message, "reasoning") is None
    assert resp.usage is not None and resp.usage.completion_tokens == COMPLETION_TOKENS
