"""``POST /tokenize`` on a real simulator: the count is what the generation routes report as
``usage.prompt_tokens`` (vLLM's chat form with ``messages`` + ``tools``, and its text form), and a
simulator told to have no tokenizer route answers 404 there, as vLLM with ``--skip-tokenizer-init``."""

from __future__ import annotations

import httpx

from tests.sim.helpers import MODEL

TOOLS = [
    {
        "type": "function",
        "function": {"name": "shell", "description": "Run a command", "parameters": {"type": "object"}},
    }
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "count from 1 to 3"}]},
]


def test_chat_form_counts_what_the_chat_route_reports(sim):
    counted = httpx.post(
        f"{sim.base_url}/tokenize", json={"model": MODEL, "messages": MESSAGES, "tools": TOOLS}
    )
    answered = httpx.post(
        f"{sim.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "tools": TOOLS, "max_tokens": 4},
    )
    assert counted.status_code == 200 and answered.status_code == 200
    body = counted.json()
    assert body["count"] == answered.json()["usage"]["prompt_tokens"] == len(body["tokens"])
    assert body["max_model_len"] == 1_048_576
    bare = httpx.post(f"{sim.base_url}/tokenize", json={"model": MODEL, "messages": MESSAGES}).json()
    assert bare["count"] < body["count"]  # the tool definition counts


def test_text_form_counts_what_the_completions_route_reports(sim):
    prompt = "The quick brown fox jumps over the lazy dog. " * 20
    counted = httpx.post(f"{sim.base_url}/tokenize", json={"model": MODEL, "prompt": prompt}).json()
    answered = httpx.post(
        f"{sim.base_url}/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 4}
    ).json()
    assert counted["count"] == answered["usage"]["prompt_tokens"] > 200


def test_bad_bodies_are_400(sim):
    both = {"model": MODEL, "messages": MESSAGES, "prompt": "x"}
    for body in (both, {"model": MODEL}, {"model": "nope", "prompt": "x"}):
        answer = httpx.post(f"{sim.base_url}/tokenize", json=body)
        assert answer.status_code in (400, 404), body
        assert answer.json()["error"]["message"], body
    assert httpx.post(f"{sim.base_url}/tokenize", json=both).status_code == 400


def test_no_tokenizer_route_is_404(new_sim):
    server = new_sim(tokenize_route=False)
    answer = httpx.post(f"{server.base_url}/tokenize", json={"model": MODEL, "prompt": "x"})
    assert answer.status_code == 404
    assert (
        httpx.post(f"{server.base_url}/v1/completions", json={"model": MODEL, "prompt": "x"}).status_code
        == 200
    )
