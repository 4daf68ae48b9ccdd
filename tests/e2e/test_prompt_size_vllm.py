"""Admission's prompt size from a REAL vLLM (CPU build, tiny model): the gateway asks the backend
(``/tokenize``, ``/v1/messages/count_tokens``) before admission, and its count is the
``usage.prompt_tokens`` the backend then reports for the same request, in every dialect.

``GATEWAY_TOKENIZE_MIN_BYTES=0`` makes every body counted (the tiny model's 512-token context holds
no body large enough to pass the default threshold).
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import wait_until
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

TURNS = [
    {"role": "user", "content": "Count the stars"},
    {"role": "assistant", "content": "There are many."},
    {"role": "user", "content": "How many exactly?"},
]


@pytest.fixture
def gateway(vllm_server: VLLMServer, start_gateway):
    return start_gateway(vllm_server.base_url, served_model=TINY_MODEL_NAME, slots=2, tokenize_min_bytes=0)


def test_the_backends_count_is_the_prompt_tokens_it_reports(gateway, make_key) -> None:
    key, admin = make_key("sizes"), make_key("admin", scopes=["admin"])
    chat = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=120)
    reported = []
    answer = chat.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=[{"role": "system", "content": "You are terse."}, *TURNS],
        max_tokens=20,
        temperature=0,
    )
    reported.append(("/v1/chat/completions", answer.usage.prompt_tokens))
    response = chat.responses.create(
        model=TINY_MODEL_NAME,
        instructions="You are terse.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Count the stars"}]},
            {"role": "assistant", "content": "There are many."},
            {"role": "user", "content": "How many exactly?"},
        ],
        max_output_tokens=20,
        temperature=0,
    )
    reported.append(("/v1/responses", response.usage.input_tokens))
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, timeout=120)
    message = claude.messages.create(
        model=TINY_MODEL_NAME,
        system="You are terse.",
        messages=TURNS,
        max_tokens=20,
        extra_body={"temperature": 0},
    )
    reported.append(("/v1/messages", message.usage.input_tokens))
    completion = chat.completions.create(model=TINY_MODEL_NAME, prompt="Count the stars", max_tokens=5)
    reported.append(("/v1/completions", completion.usage.prompt_tokens))

    auth = {"Authorization": f"Bearer {admin}"}

    def rows() -> list[dict]:
        data = httpx.get(gateway.url + "/admin/requests", headers=auth).json()["data"]
        return [row for row in data if row["key_name"] == "sizes"]

    wait_until(lambda: len(rows()) == 4, what="four ledger rows")
    seen = sorted(
        (row["route"], row["prompt_size_source"], row["prompt_size_tokens"], row["prompt_tokens"])
        for row in rows()
    )
    assert seen == sorted((route, "tokenize", tokens, tokens) for route, tokens in reported)
    assert all(tokens > 30 for route, tokens in reported if route != "/v1/completions")  # templated turns
    for row in rows():
        assert row["kv_tokens"] == row["prompt_size_tokens"] + (
            5 if row["route"] == "/v1/completions" else 20
        )
        assert row["lane"] == "short" and row["waited_for"] == {}
