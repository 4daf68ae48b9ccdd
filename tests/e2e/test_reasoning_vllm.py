"""Reasoning through the gateway in front of a REAL vLLM, with and without vLLM's reasoning parser.

The scripted model always answers ``Let me think</think>Hello world``: with ``--reasoning-parser
deepseek_r1`` vLLM splits it; without a parser the raw text arrives and the gateway splits it. An
OpenAI SDK client must see the same thing either way, streamed or not.
"""

from __future__ import annotations

import pytest
from openai import OpenAI

from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

PROMPT = [{"role": "user", "content": "Hi"}]
EXPECTED = ("Let me think", "Hello world")


def read(client: OpenAI, stream: bool) -> tuple[str, str]:
    kwargs = {"model": TINY_MODEL_NAME, "messages": PROMPT, "max_tokens": 50, "temperature": 0}
    if not stream:
        message = client.chat.completions.create(**kwargs).choices[0].message
        return message.model_extra["reasoning_content"], message.content
    reasoning = content = ""
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            reasoning += choice.delta.model_extra.get("reasoning_content") or ""
            content += choice.delta.content or ""
    return reasoning, content


@pytest.fixture
def no_parser_server(vllm_factory) -> VLLMServer:
    return vllm_factory(())


@pytest.mark.parametrize("stream", [False, True])
def test_same_split_with_and_without_vllm_reasoning_parser(
    vllm_server: VLLMServer, no_parser_server: VLLMServer, start_gateway, make_key, stream: bool
) -> None:
    key = make_key("split")
    for backend in (vllm_server, no_parser_server):
        gateway = start_gateway(backend.base_url, served_model=TINY_MODEL_NAME)
        client = OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=120)
        assert read(client, stream) == EXPECTED
