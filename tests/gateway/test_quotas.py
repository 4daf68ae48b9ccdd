"""Token quotas and ``GET /v1/key`` through real servers, with the official SDKs: a spent quota is a
429 ``quota_exceeded`` in each client's own shape saying when it resets; what a request may generate
is capped at what its key and group have left, whatever it asks (no output cap, ``ignore_eos``); a
parallel burst cannot overspend it, one gateway or two sharing Redis; warn mode admits and says so;
the caller reads its own key, limits and quota left, never its secret."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
HI = [{"role": "user", "content": "hi"}]


def own_key(gateway, key: str) -> dict:
    answer = httpx.get(gateway.url + "/v1/key", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_spent_quota_is_refused_in_each_clients_shape_until_it_resets(start_sim, start_gateway, make_key):
    gateway = start_gateway(start_sim().url)
    key = make_key("metered", quota_tokens=60, quota_period="day", rpm=100)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    first = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=20)
    spent = first.usage.prompt_tokens + first.usage.completion_tokens
    wait_until(lambda: own_key(gateway, key)["quotas"][0]["used"] == spent, what="the first request settled")
    capped = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=50)  # more than is left
    assert capped.choices[0].finish_reason == "length"  # cut where the quota ends
    spent += capped.usage.prompt_tokens + capped.usage.completion_tokens
    assert spent <= 60  # a small prompt's size is estimated from its bytes, above its tokens
    wait_until(lambda: own_key(gateway, key)["quotas"][0]["used"] == spent, what="the second request settled")
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=50)  # not even its prompt fits
    assert refused.value.code == "quota_exceeded" and "resets at" in refused.value.message
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp() + 86_400
    retry = int(refused.value.response.headers["retry-after"])
    assert abs(datetime.now(UTC).timestamp() + retry - midnight) <= 5
    assert refused.value.response.headers["x-ratelimit-limit-requests"] == "100"
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as anthropic_refused:
        claude.messages.create(model=MODEL, max_tokens=50, messages=HI)
    assert anthropic_refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    mine = own_key(gateway, key)
    assert mine["quotas"] == [
        {
            "holder": "key",
            "tokens": 60,
            "period": "day",
            "mode": "enforce",
            "used": spent,
            "held": 0,
            "remaining": 60 - spent,
            "resets_at": datetime.fromtimestamp(midnight, UTC).isoformat(),
        }
    ]
    assert mine["name"] == "metered" and key not in str(mine) and mine["limits"]["rpm"] == 100
    assert mine["rate_limits"]["requests"]["limit"] == 100 and mine["rate_limits"]["tokens"] is None


async def burst(url: str, key: str, requests: int) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as http:
        body = {"model": MODEL, "messages": HI, "max_tokens": 30}
        answers = await asyncio.gather(
            *(
                http.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
                for _ in range(requests)
            )
        )
    return [a.status_code for a in answers]


def test_a_parallel_burst_across_two_replicas_cannot_overspend(start_sim, start_gateway, make_key, redis_url):
    """Two gateways sharing an admission store in Redis (their rate limits each their own, in memory):
    12 requests of at most ~40 tokens each at once against a quota of 100: the reservations admit at
    most what fits; the quota's use ends at or under it."""
    sim = start_sim()
    shared = {"admission_store": redis_url, "admission_namespace": f"quota-{uuid.uuid4().hex}"}
    replicas = [start_gateway(sim.url, slots=4, **shared) for _ in range(2)]
    key = make_key("burst", quota_tokens=100, quota_period="month")

    async def both() -> list[int]:
        halves = await asyncio.gather(*(burst(g.url, key, 6) for g in replicas))
        return halves[0] + halves[1]

    statuses = asyncio.run(both())
    assert set(statuses) == {200, 429} and 1 <= statuses.count(200) <= 3, statuses
    wait_until(lambda: own_key(replicas[0], key)["quotas"][0]["used"] > 0, what="settled")
    for gateway in replicas:
        assert own_key(gateway, key)["quotas"][0]["used"] <= 100


LONG = [{"role": "user", "content": "count from 1 to 20000"}]


@pytest.mark.parametrize("storage", ["memory", "redis"])
def test_a_request_without_an_output_cap_generates_only_what_the_quota_has_left(
    start_sim, start_gateway, make_key, redis_url, storage
) -> None:
    """No ``max_tokens``, ``ignore_eos``: the backend is told to generate what the key's (or its
    group's) quota has left, no more, in each API (the stream ends with its length finish); parallel
    requests share what is left; the quota's use never passes it."""
    limits = {"limits_storage": redis_url} if storage == "redis" else {}
    gateway = start_gateway(start_sim().url, slots=8, **limits)
    key = make_key(f"uncapped-{uuid.uuid4().hex[:8]}", quota_tokens=1_000, quota_period="day")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=LONG, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    ))  # fmt: skip
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    # all but what the prompt's estimate (its bytes / 4) is above its tokens
    assert usage is not None and 950 <= usage.prompt_tokens + usage.completion_tokens <= 1_000
    wait_until(lambda: own_key(gateway, key)["quotas"][0]["used"] == usage.total_tokens, what="settled")

    admin = {"Authorization": f"Bearer {make_key(f'admin-{uuid.uuid4().hex[:8]}', scopes=['admin'])}"}
    team = f"team-{uuid.uuid4().hex[:8]}"
    made = httpx.post(gateway.url + "/admin/groups", headers=admin,
                      json={"name": team, "quota_tokens": 3_000, "quota_period": "day"})  # fmt: skip
    assert made.status_code == 201, made.text
    group_key = make_key(f"grouped-{uuid.uuid4().hex[:8]}", quota_tokens=10**9, group=team)

    async def parallel() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as http:
            body = {"model": MODEL, "messages": LONG, "ignore_eos": True}
            auth = {"Authorization": f"Bearer {group_key}"}
            return list(await asyncio.gather(*(
                http.post(gateway.url + "/v1/chat/completions", json=body, headers=auth) for _ in range(8)
            )))  # fmt: skip

    answers = asyncio.run(parallel())
    served = [a.json() for a in answers if a.status_code == 200]
    assert served and all(a.status_code in (200, 429) for a in answers)
    assert all(a["choices"][0]["finish_reason"] == "length" for a in served)
    assert sum(a["usage"]["total_tokens"] for a in served) <= 3_000
    wait_until(lambda: own_key(gateway, group_key)["quotas"][1]["used"] > 0, what="settled")
    assert own_key(gateway, group_key)["quotas"][1]["used"] <= 3_000

    claude = anthropic.Anthropic(base_url=gateway.url, api_key=make_key(f"a-{uuid.uuid4().hex[:8]}",
                                 quota_tokens=500), max_retries=0)  # fmt: skip
    with claude.messages.stream(model=MODEL, max_tokens=32_000, messages=LONG) as stream:  # Claude Code's
        message = stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert 450 <= message.usage.input_tokens + message.usage.output_tokens <= 500


def test_warn_mode_admits_past_the_quota_and_says_so(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url)
    key = make_key("watched", quota_tokens=10, quota_mode="warn")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    for _ in range(2):
        answer = client.chat.completions.with_raw_response.create(model=MODEL, messages=HI, max_tokens=20)
        assert answer.http_response.status_code == 200
    assert answer.headers["x-quota-warning"] == "key quota exceeded"
    wait_until(lambda: own_key(gateway, key)["quotas"][0]["used"] > 10, what="both settled")
    assert own_key(gateway, key)["quotas"][0]["remaining"] == 0


def test_a_restarted_gateway_keeps_what_the_quota_spent(start_sim, start_gateway, make_key) -> None:
    """Counters in process memory start, after a restart, from the usage ledger of the period."""
    sim = start_sim()
    before = start_gateway(sim.url, ledger_flush_s=0.1)
    key = make_key("kept", quota_tokens=10_000, quota_period="week")
    client = openai.OpenAI(base_url=before.url + "/v1", api_key=key, max_retries=0)
    usage = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=20).usage
    spent = usage.prompt_tokens + usage.completion_tokens
    wait_until(lambda: own_key(before, key)["quotas"][0]["used"] == spent, what="settled")
    before.stop()
    after = start_gateway(sim.url)
    assert own_key(after, key)["quotas"][0]["used"] == spent


def test_every_answer_to_a_limited_key_carries_its_rate_limit_headers(start_sim, start_gateway, make_key):
    """Not only inference: the model list, a token count, an unknown model's 404 and ``GET /v1/key``
    show the key's windows as they stand; an unlimited key's answers show none."""
    gateway = start_gateway(start_sim().url)
    limited, free = make_key("limited", rpm=50, tpm=50_000), make_key("free")
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=limited, max_retries=0)
    counted = claude.messages.with_raw_response.count_tokens(model=MODEL, messages=HI)
    auth = {"Authorization": f"Bearer {limited}"}
    answers = {
        "models": httpx.get(gateway.url + "/v1/models", headers=auth),
        "count_tokens": counted.http_response,
        "unknown model": httpx.get(gateway.url + "/v1/models/gpt-4", headers=auth),
        "key": httpx.get(gateway.url + "/v1/key", headers=auth),
    }
    assert answers["unknown model"].status_code == 404
    for what, answer in answers.items():
        assert answer.headers["x-ratelimit-limit-requests"] == "50", what
        assert answer.headers["x-ratelimit-limit-tokens"] == "50000", what
        assert int(answer.headers["x-ratelimit-remaining-requests"]) <= 49, what  # count_tokens counted
    unlimited = httpx.get(gateway.url + "/v1/models", headers={"Authorization": f"Bearer {free}"})
    assert not [name for name in unlimited.headers if name.startswith("x-ratelimit-")]


def test_a_stream_left_early_is_charged_what_its_client_was_sent(start_sim, start_gateway, make_key) -> None:
    """Messages and Responses streams carry their output usage in their closing event only: a client
    that reads 200 text deltas and hangs up is charged at least a token a delta, not its prompt alone."""
    gateway = start_gateway(start_sim().url, ledger_flush_s=0.1)
    key = make_key("leaver", quota_tokens=10**9)
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    deltas = 0
    with claude.messages.stream(model=MODEL, max_tokens=20_000, messages=LONG) as stream:
        for event in stream:
            deltas += event.type == "content_block_delta"
            if deltas == 200:
                break
    wait_until(lambda: own_key(gateway, key)["quotas"][0]["used"] >= 200, what="the message charged")
    charged = own_key(gateway, key)["quotas"][0]["used"]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    seen = 0
    with client.responses.create(model=MODEL, input=LONG[0]["content"], stream=True) as events:
        for event in events:
            seen += event.type == "response.output_text.delta"
            if seen == 200:
                break
    wait_until(lambda: own_key(gateway, key)["quotas"][0]["used"] >= charged + 200, what="response charged")
