"""The coding agents' turns predicted against a REAL vLLM's prefix cache (CPU build, tiny model, KV
events on ZMQ): a Claude-Code-shaped Messages conversation (system blocks led by a billing header that
changes every turn, an inline system message, tools, tool_use / tool_result turns) and a Codex-shaped
Responses one (Codex CLI 0.169's real tool list, ``tests/sim/data/codex_tools.json``, with its
``namespace`` and ``web_search`` tools; function calls and their outputs). On every turn the gateway
counted the prompt as vLLM did (its ``/tokenize`` of the converted conversation, ids and all) and
predicted the cached tokens vLLM then reported, within one block; and from the second turn on,
most of the prompt came from the cache (the billing header, left out by vLLM, breaks nothing).

The pool holds :data:`POOL_BLOCKS` blocks of :data:`BLOCK` tokens, enough that nothing is evicted;
the context is the tiny model's 2,048 positions (the tools are in the requests, its template shows
none of them). Each turn asks for one token: one engine step, whose stored blocks are one batch
of events, which the gateway must have before the next turn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.sim.helpers import load_data
from tests.support.probes import wait_until
from tests.support.vllm_server import TINY_MODEL_NAME

BLOCK = 32
POOL_BLOCKS = 200
SYSTEM = "You are an interactive agent that helps users with software engineering tasks. " * 8
TOOLS = [
    {
        "name": "Bash",
        "description": "Executes a given bash command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {"name": "Read", "description": "Reads a file.", "input_schema": {"type": "object", "properties": {}}},
]


@pytest.fixture(scope="module")
def backend(kv_events_vllm):
    tool_calls = (
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    )  # Codex asks tool_choice "auto"
    return kv_events_vllm(BLOCK, POOL_BLOCKS, "--max-model-len", "2048", *tool_calls)


@pytest.fixture
def gateway(backend, start_gateway):
    server, publish, replay = backend
    return start_gateway(
        server.base_url, served_model=TINY_MODEL_NAME, slots=2, tokenize_min_bytes=0,
        kv_events=publish, kv_events_replay=replay, kv_events_bind=True, kv_block_size=BLOCK,
        kv_budget_tokens=BLOCK * POOL_BLOCKS, long_prompt_tokens=10_000,
    )  # fmt: skip


class Turns:
    """Sends a conversation's turns through the gateway and reads each one's ledger row, once the
    gateway holds the events of the blocks it stored."""

    def __init__(self, url: str, key: str, admin: str) -> None:
        self.url, self.key, self.admin = url, key, admin
        self.storing = [self.feed()["batches"]]

    def feed(self) -> dict[str, Any]:
        auth = {"Authorization": f"Bearer {self.admin}"}
        status = httpx.get(self.url + "/admin/status", headers=auth, timeout=60).json()
        return status["backends"][0]["prefix_cache"]["events"]

    def send(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.post(
            self.url + path,
            json=body,
            headers={"x-api-key": self.key, "Authorization": f"Bearer {self.key}"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-request-id"]

        def row() -> dict | None:
            auth = {"Authorization": f"Bearer {self.admin}"}
            rows = httpx.get(self.url + "/admin/requests", headers=auth, timeout=60).json()["data"]
            return next((r for r in rows if r["request_id"] == request_id), None)

        wait_until(lambda: row() is not None, what="its row")
        found = row()
        assert found is not None
        prompt, cached = found["prompt_tokens"], found["cached_tokens"] or 0
        self.storing.append(int(prompt // BLOCK > cached // BLOCK))
        wait_until(lambda: self.feed()["batches"] >= sum(self.storing), what="this turn's events")
        return found


def check(turns: list[dict[str, Any]]) -> None:
    for turn in turns:
        print(
            f"prompt {turn['prompt_tokens']} (gateway counted {turn['prompt_size_tokens']}), "
            f"cached {turn['cached_tokens']}, "
            f"predicted {turn['cached_tokens_predicted']} ({turn['cache_source']})"
        )
    for number, turn in enumerate(turns):
        assert (
            turn["prompt_size_source"] == "tokenize" and turn["prompt_size_tokens"] == turn["prompt_tokens"]
        ), turn
        assert turn["cache_source"] == "events" or number == 0, turn  # no events yet: the estimate's view
        assert abs(turn["cached_tokens_predicted"] - (turn["cached_tokens"] or 0)) <= BLOCK, turn
    for before, turn in zip(turns, turns[1:], strict=False):
        assert turn["cached_tokens"] >= before["prompt_tokens"] - 2 * BLOCK, (before, turn)


def test_claude_code_shaped_turns_are_predicted_exactly(gateway, make_key) -> None:
    turns = Turns(gateway.url, make_key("claude-code"), make_key("admin", scopes=["admin"]))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>Careful.</system-reminder>"},
                                     {"type": "text", "text": "Write hello to out.txt."}]},
        {"role": "system", "content": "# Environment\n - Primary working directory: /tmp/work\n"},
    ]  # fmt: skip
    rows = []
    for step in range(3):
        body = {
            "model": TINY_MODEL_NAME,
            "max_tokens": 1,
            "temperature": 0,
            "system": [
                {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.328; cch={step:05x};"},
                {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Answer in English."},
            ],
            "messages": messages,
            "tools": TOOLS,
        }
        rows.append(turns.send("/v1/messages", body))
        call = f"toolu_{step:04d}"
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I run a command.", "signature": "sig"},
                    {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"echo é{step}"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call, "content": [{"type": "text", "text": "ok"}]}
                ],
            },
        ]
    check(rows)


def test_codex_shaped_turns_are_predicted_exactly(gateway, make_key) -> None:
    turns = Turns(gateway.url, make_key("codex"), make_key("admin", scopes=["admin"]))
    tools = load_data("codex_tools.json")["tools"]
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": SYSTEM}]},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Write hello to out.txt."}],
        },
    ]
    rows = []
    for step in range(3):
        body = {
            "model": TINY_MODEL_NAME,
            "input": items,
            "tools": tools,
            "tool_choice": "auto",
            "parallel_tool_calls": True,
            "store": False,
            "max_output_tokens": 1,
            "temperature": 0,
        }
        rows.append(turns.send("/v1/responses", body))
        call = f"call_{step:04d}"
        arguments = '{"cmd":"echo hello > out.txt"}'
        items += [
            {"type": "function_call", "call_id": call, "name": "exec_command", "arguments": arguments},
            {"type": "function_call_output", "call_id": call, "output": f"Exit code: 0 (step {step})"},
        ]
    check(rows)


def test_an_image_turn_is_sized_by_vllms_count_and_says_why_it_was_not_predicted(
    gateway: Any, make_key: Callable[..., str]
) -> None:
    turns = Turns(gateway.url, make_key("claude-code"), make_key("admin", scopes=["admin"]))
    image = {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/x.png"}}
    body = {
        "model": TINY_MODEL_NAME,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}],
    }
    answer = httpx.post(
        gateway.url + "/v1/messages", json=body, headers={"x-api-key": turns.key}, timeout=120
    )
    assert answer.status_code != 200 or answer.json()  # the tiny model takes no image: whatever vLLM says
    auth = {"Authorization": f"Bearer {turns.admin}"}

    def row() -> dict | None:
        rows = httpx.get(gateway.url + "/admin/requests", headers=auth, timeout=60).json()["data"]
        return next((r for r in rows if r["request_id"] == answer.headers["x-request-id"]), None)

    wait_until(lambda: row() is not None, what="its row")
    found = row()
    assert found is not None and found["cached_tokens_predicted"] is None and found["cache_source"] == "image"
