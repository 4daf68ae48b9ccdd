"""The store of the rate limits and quotas (``GATEWAY_LIMITS_STORAGE``) in a Redis of the test's own,
paused, emptied and killed under a running gateway: quotas start again from the usage ledger and
hold; a store that does not answer is a 503 ``limits_unavailable`` with ``Retry-After`` in the
client's own shape, within seconds; ``/health`` never depends on it."""

from __future__ import annotations

import asyncio
import time
import uuid

import anthropic
import httpx
import openai
import pytest
import redis

from tests.support.probes import wait_until
from tests.support.services import own_redis

MODEL = "deepseek-v4-flash-0731"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def store():
    with own_redis() as url:
        yield url


def used(gateway, key: str) -> int:
    answer = httpx.get(gateway.url + "/v1/key", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["quotas"][0]["used"])


async def at_once(url: str, key: str, requests: int) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as http:
        body = {"model": MODEL, "messages": HI, "max_tokens": 30}
        auth = {"Authorization": f"Bearer {key}"}
        answers = await asyncio.gather(
            *(http.post(url + "/v1/chat/completions", json=body, headers=auth) for _ in range(requests))
        )
    return [a.status_code for a in answers]


def test_a_quota_holds_after_its_store_is_emptied(start_sim, start_gateway, make_key, store) -> None:
    gateway = start_gateway(start_sim().url, slots=8, limits_storage=store, ledger_flush_s=0.1)
    key = make_key(f"spent-{uuid.uuid4().hex[:8]}", quota_tokens=500, quota_period="day")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.RateLimitError):  # spent, one request after another
        for _ in range(100):
            client.chat.completions.create(model=MODEL, messages=HI, max_tokens=30)
            time.sleep(0.2)  # settled: the next one does not find this one's reservation in the way
    spent = used(gateway, key)
    assert spent > 400
    admin = {"Authorization": f"Bearer {make_key(f'ops-{uuid.uuid4().hex[:8]}', scopes=['admin'])}"}
    assert httpx.get(gateway.url + "/admin/usage", headers=admin).status_code == 200  # the ledger flushed
    redis.Redis.from_url(store).flushall()
    assert asyncio.run(at_once(gateway.url, key, 20)) == [429] * 20  # not a fresh quota
    assert used(gateway, key) == spent  # started again from the ledger


def test_a_store_that_does_not_answer_is_a_503_and_health_stays_up(
    start_sim, start_gateway, make_key, store
) -> None:
    gateway = start_gateway(start_sim().url, limits_storage=store)
    key = make_key(f"limited-{uuid.uuid4().hex[:8]}", rpm=1_000, quota_tokens=10**6)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    assert client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4).choices
    redis.Redis.from_url(store).execute_command("CLIENT", "PAUSE", "15000", "ALL")
    started = time.monotonic()
    assert httpx.get(gateway.url + "/health", timeout=10).status_code == 200
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4, timeout=10)
    assert refused.value.status_code == 503 and refused.value.code == "limits_unavailable"
    assert int(refused.value.response.headers["retry-after"]) > 0
    with pytest.raises(anthropic.APIStatusError) as anthropic_refused:
        claude.messages.create(model=MODEL, max_tokens=4, messages=HI, timeout=10)
    assert anthropic_refused.value.status_code == 503
    assert anthropic_refused.value.body["type"] == "error"  # type: ignore[index]
    assert time.monotonic() - started < 10  # each within seconds, not a hang
    wait_until(
        lambda: httpx.post(
            gateway.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
            json={"model": MODEL, "messages": HI, "max_tokens": 4}, timeout=10,
        ).status_code == 200,
        timeout_s=30, what="served again once the store answers",
    )  # fmt: skip
    redis.Redis.from_url(store).shutdown(nosave=True)
    gone = httpx.post(gateway.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "messages": HI, "max_tokens": 4}, timeout=10)  # fmt: skip
    assert gone.status_code == 503 and gone.json()["error"]["code"] == "limits_unavailable"
    assert httpx.get(gateway.url + "/health").status_code == 200
    models = httpx.get(gateway.url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
    assert models.status_code == 200  # what needs no limit is served
    own = httpx.get(gateway.url + "/v1/key", headers={"Authorization": f"Bearer {key}"})  # its quota left
    assert own.status_code == 503 and own.json()["error"]["code"] == "limits_unavailable"
