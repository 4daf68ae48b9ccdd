"""Every limit a group has holds for its keys as a key's own does, through a real gateway and the
simulator, with the OpenAI SDK: requests per minute, tokens per minute and the token quota, each set on
the key alone, on its group alone, and on both (the tighter wins); the ``x-ratelimit-*`` headers and
``GET /v1/key`` show the tighter window. One gateway serves the module: each test has keys and a group
of its own (windows and quotas are per key and per group)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from dspark_sim import SimConfig
from tests.conftest import FAST_SIM
from tests.support.module_stack import served_with_admin
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
HI = [{"role": "user", "content": "hi"}]
#: Where a limit is set: the key alone, its group alone, or both — the group's the tighter, so that
#: the group's is what must hold (the key's own always did).
HOLDERS = ("key", "group", "both")
_names = itertools.count()


class Stack:
    """The module's simulator and gateway, and an admin client of the gateway."""

    def __init__(self, gateway: ThreadedServer, admin_key: str) -> None:
        self.gateway = gateway
        self.admin = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin_key}"})

    def call(self, method: str, path: str, status: int, **body: Any) -> dict[str, Any]:
        answer = self.admin.request(method, path, json=body)
        assert answer.status_code == status, answer.text
        return answer.json()

    def member(self, holder: str, tight: dict[str, Any], loose: dict[str, Any]) -> str:
        """A new key in a new group, ``tight`` limits on the ``holder`` (``both``: on the group, and
        ``loose`` ones on the key); its secret."""
        name = f"limited-{next(_names)}"
        group = tight if holder in ("group", "both") else {}
        own = {"key": tight, "group": {}, "both": loose}[holder]
        self.call("POST", "/admin/groups", 201, name=f"{name}-team", **group)
        return self.call("POST", "/admin/keys", 201, name=name, group=f"{name}-team", **own)["key"]

    def own_key(self, key: str) -> dict[str, Any]:
        answer = httpx.get(self.gateway.url + "/v1/key", headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 200, answer.text
        return answer.json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with served_with_admin(tmp_path_factory.mktemp("group-limits"), SimConfig(**FAST_SIM)) as served:
        yield Stack(*served)


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.gateway.url + "/v1", api_key=key, max_retries=0)


def chat(stack: Stack, key: str, max_tokens: int) -> Any:
    """A chat answer with its headers (the SDK's raw response)."""
    return client(stack, key).chat.completions.with_raw_response.create(
        model=MODEL, messages=HI, max_tokens=max_tokens
    )


@pytest.mark.parametrize("holder", HOLDERS)
def test_requests_per_minute(stack: Stack, holder: str) -> None:
    key = stack.member(holder, {"rpm": 2}, {"rpm": 5})
    first = chat(stack, key, 5)
    assert (first.headers["x-ratelimit-limit-requests"], first.headers["x-ratelimit-remaining-requests"]) == (
        "2",
        "1",
    )
    chat(stack, key, 5)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(stack, key, 5)
    assert refused.value.code == "rate_limit_requests"
    assert ("group" in refused.value.message) == (holder != "key")
    assert stack.own_key(key)["rate_limits"]["requests"]["limit"] == 2
    assert stack.own_key(key)["rate_limits"]["requests"]["remaining"] == 0


@pytest.mark.parametrize("holder", HOLDERS)
def test_tokens_per_minute(stack: Stack, holder: str) -> None:
    """A request reserves its prompt's estimate and its ``max_tokens`` (250) of 300 a minute: the next
    one does not fit, whatever the first's settlement gave back (it generated ~150 tokens)."""
    key = stack.member(holder, {"tpm": 300}, {"tpm": 10_000})
    first = chat(stack, key, 250)
    assert first.headers["x-ratelimit-limit-tokens"] == "300"
    assert int(first.headers["x-ratelimit-remaining-tokens"]) < 50
    with pytest.raises(openai.RateLimitError) as refused:
        chat(stack, key, 250)
    assert refused.value.code == "rate_limit_tokens"
    assert ("group" in refused.value.message) == (holder != "key")
    tokens = stack.own_key(key)["rate_limits"]["tokens"]
    assert tokens["limit"] == 300 and tokens["remaining"] < 300


@pytest.mark.parametrize("holder", HOLDERS)
def test_token_quota(stack: Stack, holder: str) -> None:
    """Of a quota of 100, a request asking 300 is capped at what is left (the length finish); once it
    settled, what is left does not pay the next one's prompt: 429 ``quota_exceeded``."""
    key = stack.member(holder, {"quota_tokens": 100, "quota_period": "day"}, {"quota_tokens": 10_000})
    answer = chat(stack, key, 300).parse()
    assert answer.choices[0].finish_reason == "length"
    cost = answer.usage.prompt_tokens + answer.usage.completion_tokens
    assert cost <= 100

    def tight() -> dict[str, Any]:
        return min(stack.own_key(key)["quotas"], key=lambda quota: quota["tokens"])

    wait_until(lambda: tight()["held"] == 0, timeout_s=60, what="the request settled")
    assert (tight()["used"], tight()["remaining"], tight()["tokens"]) == (cost, 100 - cost, 100)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(stack, key, 300)
    assert refused.value.code == "quota_exceeded"
    assert ("group's" in refused.value.message) == (holder != "key")
