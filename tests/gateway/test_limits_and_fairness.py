"""Per-key limits (requests/min, tokens/min, concurrency), fair queueing, and Redis-shared limits across two
gateway processes — through real servers, with the official OpenAI SDK where clients matter."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai

from tests.support.clients import seconds_of
from tests.support.probes import START_TIMEOUT_S, wait_until
from tests.support.servers import free_port

MODEL = "deepseek-v4-flash-0731"
CLI = str(Path(sys.executable).parent / "dspark-gateway")


def chat(key: str, gateway_url: str, **kwargs) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **kwargs}
    return httpx.post(
        gateway_url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,  # a queued request may wait many slot turns
    )


def test_requests_per_window_with_headers_and_the_sdk_retrying(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, limits_window_s=2)
    key = make_key("rpm", rpm=2)
    first = chat(key, gateway.url)
    assert first.headers["x-ratelimit-limit-requests"] == "2"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert first.headers["x-ratelimit-reset-requests"].endswith("s")
    chat(key, gateway.url)
    refused = chat(key, gateway.url)
    assert refused.status_code == 429
    assert refused.json()["error"] == {
        "message": refused.json()["error"]["message"],
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_requests",
    }
    assert 1 <= int(refused.headers["retry-after"]) <= 2
    # the 429 carries the window's headers too, its reset the time the window has left
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert 0 < seconds_of(refused.headers["x-ratelimit-reset-requests"]) <= 2
    # the OpenAI SDK waits for Retry-After and succeeds on its retry, in the next window
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=2)
    reply = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert reply.http_response.status_code == 200 and reply.retries_taken >= 1


def test_tokens_per_window_are_settled_with_real_usage(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, limits_window_s=60)
    key = make_key("tpm", tpm=100)
    ok = chat(key, gateway.url, max_tokens=80)  # estimate ~10 tokens up front, ~90 settled after
    assert ok.status_code == 200 and ok.headers["x-ratelimit-limit-tokens"] == "100"
    wait_until(
        lambda: chat(key, gateway.url).status_code == 429, timeout_s=5, what="the tokens to be settled"
    )
    refused = chat(key, gateway.url)
    assert refused.json()["error"]["code"] == "rate_limit_tokens" and int(refused.headers["retry-after"]) >= 1


def test_a_full_queue_refuses_with_the_keys_rate_limit_headers(start_sim, start_gateway, make_key) -> None:
    """429 queue_full (the one slot busy, no room to wait) carries the key's x-ratelimit-* headers as
    its answers do, besides Retry-After."""
    sim = start_sim(decode_tps=40)
    gateway = start_gateway(sim.url, slots=1, queue_max=0)
    key = make_key("crowded", rpm=10, tpm=100_000)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "long"}],
        "max_tokens": 400,
        "stream": True,
    }
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}) as holding:  # fmt: skip
        lines = holding.iter_lines()
        next(lines)  # it holds the slot (while this generator is not closed)
        refused = chat(key, gateway.url)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full"
    headers = refused.headers
    assert int(headers["retry-after"]) >= 1
    assert (headers["x-ratelimit-limit-requests"], headers["x-ratelimit-remaining-requests"]) == ("10", "8")
    assert headers["x-ratelimit-limit-tokens"] == "100000"
    for what in ("requests", "tokens"):
        assert 0 < seconds_of(headers[f"x-ratelimit-reset-{what}"]) <= 60


def test_max_concurrency_and_fair_queue_visible_to_streams_and_admins(
    start_sim, start_gateway, make_key
) -> None:
    sim = start_sim(decode_tps=40)
    gateway = start_gateway(sim.url, slots=2)
    greedy, polite, admin = (
        make_key("greedy", max_concurrency=1),
        make_key("polite"),
        make_key("ops", scopes=["admin"]),
    )
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "long"}],
        "max_tokens": 60,
        "stream": True,
    }

    def status() -> dict:
        return httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}).json()

    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {greedy}"}) as first:  # fmt: skip
        first_lines = first.iter_lines()
        next(first_lines)
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body,
                          headers={"Authorization": f"Bearer {greedy}"}) as second:  # fmt: skip
            assert second.status_code == 200  # answered at once, told it is queued
            second_lines = second.iter_lines()
            assert next(second_lines) == ": queued 1 key_concurrency"  # its key is at its bound
            state = status()
            assert state["slots_in_use"] == 1  # a free slot, but greedy is at its max concurrency
            assert state["keys"]["greedy"] == {"in_flight": 1, "waiting": 1}
            assert state["waiting_by_key"] == {"greedy": {"key_concurrency": 1}}  # and what it waits for
            assert chat(polite, gateway.url).status_code == 200  # another key takes the free slot
            rest = [line for line in second_lines if line.startswith("data: ")]
            assert rest[-1] == "data: [DONE]"
    wait_until(lambda: status()["slots_in_use"] == 0 and status()["queue_depth"] == 0, what="idle")


def test_two_gateway_processes_share_one_limit_through_redis(
    start_sim, make_key, database_url, redis_url, tmp_path
):
    sim = start_sim()
    key = make_key("shared", rpm=3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_DATABASE_URL=database_url, GATEWAY_UPSTREAM=sim.url, GATEWAY_LIMITS_STORAGE=redis_url,
        GATEWAY_LIMITS_WINDOW_S="60",
    )  # fmt: skip
    urls, processes = [], []
    for i in range(2):
        port = free_port()
        log = (tmp_path / f"gw{i}.log").open("wb")
        processes.append(
            subprocess.Popen([CLI, "serve", "--port", str(port)], env=env, stdout=log, stderr=log)
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url in urls:
            wait_until(lambda url=url: _ready(url), timeout_s=START_TIMEOUT_S, what=f"gateway {url}")
        codes = [chat(key, url).status_code for url in (urls[0], urls[1], urls[0], urls[1])]
        assert codes == [200, 200, 200, 429]  # one budget of 3, not 3 per process
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=START_TIMEOUT_S)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_flood_does_not_starve_another_key(start_sim, start_gateway, make_key, admin) -> None:
    """One slot, a slot turn of 0.4 s; a key floods the queue, then another key sends one request. When
    ``/admin/status`` first shows that request at the gateway (``W`` flood requests waiting), at most
    ``12 - W`` flood requests have been admitted: the lone one takes the next slot, so no more than
    those finish before it (one more allowed: its thread may read its answer late on a busy machine).
    Without fair turns it would wait behind the ``W``."""
    sim = start_sim(decode_tps=100)
    gateway = start_gateway(sim.url, slots=1, queue_max=64, queue_max_per_key=32)
    flood, single = make_key("flood"), make_key("single")
    finished: list[str] = []
    lock = threading.Lock()

    def run(key: str, name: str) -> None:
        response = chat(key, gateway.url, max_tokens=40)
        assert response.status_code == 200
        with lock:
            finished.append(name)

    threads = [threading.Thread(target=run, args=(flood, f"f{i}")) for i in range(12)]
    for thread in threads:
        thread.start()
    wait_until(lambda: _queue(gateway, make_key) >= 8, what="the flood to queue")
    flood_waiting: list[int] = []

    def single_arrived() -> bool:
        with lock:
            if "single" in finished:  # answered before a poll saw it (a stalled test thread): no bound
                flood_waiting.append(0)
                return True
        keys = _status(gateway.url, admin)["keys"]
        if "single" in keys:
            flood_waiting.append(keys.get("flood", {}).get("waiting", 0))
        return bool(flood_waiting)

    lone = threading.Thread(target=run, args=(single, "single"))
    lone.start()
    wait_until(single_arrived, what="the lone request to reach the gateway")
    for thread in [*threads, lone]:
        thread.join()
    assert finished.index("single") <= 12 - flood_waiting[0] + 1


def _status(url: str, admin: str) -> dict:
    response = httpx.get(url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    response.raise_for_status()
    return response.json()


def _queue(gateway, make_key) -> int:
    from tests.support.probes import scrape

    return int(scrape(gateway.url)["gateway_queue_depth"])
