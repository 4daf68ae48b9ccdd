"""Slots, the waiting queue, client disconnects and TTFT, observed through a real server's /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx

from dspark_sim import SimConfig, create_sim_app
from tests.sim.helpers import FAST, MODEL, chat_body, scrape, serve_app, sse_events, wait_for

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV = "vllm:kv_cache_usage_perc"
ABORTS = "dspark_sim_requests_aborted_total"
SUCCESS_ABORT = "vllm:request_success_total{finished_reason=abort}"  # vLLM does not count client aborts


async def test_five_streams_two_slots(new_sim, tmp_path):
    """Two slots, five streams: two slow streams hold both slots until three more wait, then leave; the
    engine's trace shows never more than two sequences holding a slot, and the three finish whole."""
    path = tmp_path / "trace.jsonl"
    server = new_sim(slots=2, trace_file=str(path))
    holder = chat_body("count from 1 to 5000 #sim:decode_tps=50", stream=True)

    async def metric(name: str, value: float) -> None:
        await asyncio.to_thread(
            wait_for, lambda: scrape(server.base_url)[name] == value, 10.0, f"{name} == {value}"
        )

    async def one(client: httpx.AsyncClient, index: int) -> str:
        body = chat_body(f"count from 1 to {100 + index}", stream=True)
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            text = ""
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    text += json.loads(line[6:])["choices"][0]["delta"].get("content", "")
            return text

    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        async with contextlib.AsyncExitStack() as holders:
            for _ in range(2):  # left unread: closing the stack closes them, and vLLM aborts them
                await holders.enter_async_context(client.stream("POST", "/v1/chat/completions", json=holder))
            await metric(RUNNING, 2)
            waiting = [asyncio.create_task(one(client, i)) for i in range(3)]
            await metric(WAITING, 3)
        texts = await asyncio.gather(*waiting)
    assert [t.split(", ")[-1] for t in texts] == [str(100 + i) for i in range(3)]
    await asyncio.to_thread(
        wait_for, lambda: path.exists() and len(path.read_text().splitlines()) == 5, 10.0, "five traced"
    )
    trace = [json.loads(line) for line in path.read_text().splitlines()]
    edges = sorted([(t["finish"], -1) for t in trace] + [(t["scheduled"], 1) for t in trace])
    holding = [sum(step for _, step in edges[: i + 1]) for i in range(len(edges))]
    assert max(holding) == 2
    aborted = sorted(t["finish"] for t in trace if t["reason"] == "abort")
    served = sorted(t["scheduled"] for t in trace if t["reason"] == "stop")
    assert len(aborted) == 2 and len(served) == 3 and served[0] >= aborted[0]
    final = scrape(server.base_url)
    assert (final[RUNNING], final[WAITING], final[KV]) == (0, 0, 0)
    assert final["vllm:request_success_total{finished_reason=stop}"] == 3
    assert final[ABORTS] == 2


def test_disconnect_mid_stream_frees_slot(new_sim):
    server = new_sim(slots=2, decode_tps=100)
    long_prompt = "x" * 40_000 + " count from 1 to 5000"
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json=chat_body(long_prompt, stream=True)) as r:
            lines = r.iter_lines()
            got = [line for line, _ in zip(lines, range(6), strict=False) if line.startswith("data: ")]
            assert len(got) >= 3
            values = scrape(server.base_url)
            assert values[RUNNING] == 1 and values[KV] > 0
        # leaving the block closes the response (and its connection) mid-stream
        wait_for(lambda: scrape(server.base_url)[RUNNING] == 0, what="running to return to 0")
    values = scrape(server.base_url)
    assert values[ABORTS] == 1 and values[KV] == 0 and values[SUCCESS_ABORT] == 0


def test_disconnect_while_waiting_leaves_queue(new_sim):
    server = new_sim(slots=1, decode_tps=100)
    body = chat_body("count from 1 to 5000", stream=True)
    with (
        httpx.Client(base_url=server.base_url, timeout=30) as first,
        httpx.Client(base_url=server.base_url, timeout=30) as second,
    ):
        with first.stream("POST", "/v1/chat/completions", json=body) as running:
            events = running.iter_lines()  # keep a reference: dropping it closes the response
            next(events)  # first event: it holds the only slot
            with second.stream("POST", "/v1/chat/completions", json=body) as queued:
                assert queued.status_code == 200  # headers are sent before the queue wait, as in vLLM
                wait_for(lambda: scrape(server.base_url)[WAITING] == 1, what="a waiting request")
            wait_for(lambda: scrape(server.base_url)[WAITING] == 0, what="the queue to empty")
            assert scrape(server.base_url)[RUNNING] == 1
        wait_for(lambda: scrape(server.base_url)[RUNNING] == 0, what="running to return to 0")
    assert scrape(server.base_url)[ABORTS] == 2


async def test_non_stream_disconnect_while_waiting(new_sim):
    server = new_sim(slots=1, decode_tps=100)
    body = chat_body("count from 1 to 5000")

    def metric(name: str) -> float:
        return scrape(server.base_url)[name]

    async with (
        httpx.AsyncClient(base_url=server.base_url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as running,
    ):
        events = running.aiter_lines()  # keep a reference: dropping it closes the response
        await anext(events)
        queued = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        await asyncio.to_thread(wait_for, lambda: metric(WAITING) == 1, 5.0, "a waiting request")
        queued.cancel()  # httpx closes the connection of a cancelled request
        await asyncio.to_thread(wait_for, lambda: metric(WAITING) == 0, 5.0, "the queue to empty")
        assert metric(RUNNING) == 1
    await asyncio.to_thread(wait_for, lambda: metric(RUNNING) == 0, 5.0, "running to return to 0")


def test_ttft_grows_with_prompt_length(new_sim, tmp_path):
    # the engine's own clock (its trace), and only a lower bound: a loaded machine can only add time
    path = tmp_path / "trace.jsonl"
    server = new_sim(prefill_tps=20_000, ttft_base_s=0.01, trace_file=str(path))
    for text in ("count to 3", "y" * 40_000 + " count to 3"):  # ~10k prompt tokens: ~0.5 s of prefill
        assert httpx.post(
            server.base_url + "/v1/chat/completions", json=chat_body(text), timeout=30
        ).is_success
    wait_for(lambda: path.exists() and len(path.read_text().splitlines()) == 2, what="two traced")
    short, long = (json.loads(line) for line in path.read_text().splitlines())
    assert long["prompt_tokens"] > 9_000 > short["prompt_tokens"]
    assert long["first_token"] - long["scheduled"] >= long["prompt_tokens"] / 20_000


def test_models_health_version(sim):
    models = httpx.get(f"{sim.base_url}/v1/models")
    assert models.headers["x-dspark-simulator"] == "1"
    card = models.json()["data"][0]
    assert models.json()["object"] == "list"
    assert (card["id"], card["object"], card["owned_by"], card["max_model_len"]) == (
        MODEL,
        "model",
        "dspark-sim",
        1_048_576,
    )
    health = httpx.get(f"{sim.base_url}/health")
    assert health.status_code == 200 and health.content == b""
    assert httpx.get(f"{sim.base_url}/version").json() == {"version": "0.32.0-sim"}


def test_sse_helper_reads_done(sim):
    with (
        httpx.Client(base_url=sim.base_url) as client,
        client.stream("POST", "/v1/chat/completions", json=chat_body("count to 2", stream=True)) as response,
    ):
        assert sse_events(response)[-1] == "[DONE]"


def test_disconnect_is_seen_even_if_the_server_reports_asgi_2_4():
    """Starlette's StreamingResponse stops listening for disconnects under ASGI spec >= 2.4; ours
    must not depend on what the server reports."""
    sim_app = create_sim_app(SimConfig(**{**FAST, "decode_tps": 100}))

    async def as_spec_2_4(scope, receive, send):
        if scope["type"] == "http":
            scope = {**scope, "asgi": {**scope.get("asgi", {}), "spec_version": "2.4"}}
        await sim_app(scope, receive, send)

    with serve_app(as_spec_2_4) as base_url, httpx.Client(base_url=base_url, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json=chat_body("count to 5000", stream=True)) as r:
            events = r.iter_lines()
            next(events)
            assert scrape(base_url)[RUNNING] == 1
        wait_for(lambda: scrape(base_url)[RUNNING] == 0, what="running to return to 0")
