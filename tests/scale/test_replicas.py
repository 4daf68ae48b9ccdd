"""Several gateway replicas (real ``dspark-gateway serve`` processes) in front of one simulator, sharing
a real PostgreSQL (keys, ledger) and a real Redis (admission, rate limits): the backend never sees
more than its slots from all of them, a replica killed with -9 gives its slots back within the
lease TTL, fairness holds across replicas, a revocation reaches every replica, and the ledger has
each request once.

What ran on the backend at once comes from the simulator's sequence trace (``arrival`` .. ``finish``
of every sequence, on its clock).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from gateway.auth import KeyStore
from tests.support.clients import MODEL, chat, chat_ok
from tests.support.probes import wait_until
from tests.support.replicas import ADMIN_KEY, Replicas

TTL_S = 2.0


def create_key(database_url: str, name: str, **kwargs) -> str:
    async def run() -> str:
        store = await KeyStore.open(database_url)
        try:
            return (await store.create(name, **kwargs))[1]
        finally:
            await store.close()

    return asyncio.run(run())


def trace(path: Path, count: int) -> list[dict]:
    wait_until(lambda: path.exists() and len(path.read_text().splitlines()) >= count, what="trace lines")
    return [json.loads(line) for line in path.read_text().splitlines()]


def peak_running(lines: list[dict]) -> int:
    """Most sequences inside the backend at once (arrival .. finish), from its trace."""
    events = sorted([(line["arrival"], 1) for line in lines] + [(line["finish"], -1) for line in lines])
    peak = running = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def status(url: str) -> dict:
    return httpx.get(url + "/admin/status", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()


@pytest.fixture
def cluster(start_sim, pg_database, redis_url, tmp_path) -> Iterator[Callable[..., tuple[Replicas, Path]]]:
    """``cluster(sim={SimConfig fields}, **settings)`` -> (replicas not yet started, the sim's trace)."""
    made: list[Replicas] = []

    def make(sim: dict | None = None, **settings) -> tuple[Replicas, Path]:
        path = tmp_path / "trace.jsonl"
        backend = start_sim(trace_file=str(path), **(sim or {}))
        replicas = Replicas(
            backend.url, pg_database, redis_url, tmp_path, admission_lease_ttl_s=TTL_S, **settings
        )
        made.append(replicas)
        return replicas, path

    yield make
    for replicas in made:
        replicas.stop()
    for log in sorted(tmp_path.glob("replica-*.log")):  # shown by pytest only when the test failed
        print(f"--- {log.name}", *log.read_text(errors="replace").splitlines()[-100:], sep="\n")


def test_a_flood_through_three_replicas_never_runs_more_than_the_slots(cluster, pg_database):
    replicas, path = cluster(sim={"decode_tps": 400.0}, slots=2, queue_max=64)
    gateways = replicas.start(3)
    keys = [create_key(pg_database, f"flood-{i}") for i in range(4)]
    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda i: chat(gateways[i % 3].url, keys[i % 4], max_tokens=20), range(24)))
    assert [a.status_code for a in answers] == [200] * 24
    assert peak_running(trace(path, 24)) == 2
    wait_until(lambda: status(gateways[0].url)["slots_in_use"] == 0, what="every lease released")


def test_a_replica_killed_mid_stream_gives_its_slot_back_within_the_ttl(cluster, pg_database):
    replicas, path = cluster(sim={"decode_tps": 20.0}, slots=1)
    dying, alive = replicas.start(2)
    key = create_key(pg_database, "kill")
    stream = httpx.stream(
        "POST",
        dying.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000,
              "stream": True, "ignore_eos": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )  # fmt: skip
    with stream as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # it streams: it holds the slot
        waiting: list[httpx.Response] = []
        second = threading.Thread(target=lambda: waiting.append(chat(alive.url, key)))
        second.start()
        wait_until(lambda: status(alive.url)["queue_depth"] == 1, what="the second request queued")
        dying.kill()
    killed = trace(path, 1)[0]["finish"]
    second.join(timeout=30)
    assert waiting and waiting[0].status_code == 200
    served = trace(path, 2)[1]
    # the backend saw the killed replica's connection close at once; the lease ended with its TTL (and
    # the survivor's next renewal, a third of it, found it gone); the slack is for a loaded machine
    assert served["arrival"] - killed <= TTL_S + TTL_S / 3 + 3.0


def test_fairness_holds_across_replicas(cluster, pg_database):
    replicas, _ = cluster(sim={"decode_tps": 100.0}, slots=1, queue_max=64, queue_max_per_key=32)
    one, two = replicas.start(2)
    flood, single = create_key(pg_database, "flood"), create_key(pg_database, "single")
    finished: list[str] = []
    lock = threading.Lock()

    def run(url: str, key: str, name: str) -> None:
        assert chat(url, key, max_tokens=40).status_code == 200
        with lock:
            finished.append(name)

    threads = [threading.Thread(target=run, args=(one.url, flood, f"f{i}")) for i in range(10)]
    for thread in threads:
        thread.start()
    wait_until(lambda: status(one.url)["queue_depth"] >= 6, what="the flood to queue")
    lone = threading.Thread(target=run, args=(two.url, single, "single"))
    lone.start()
    for thread in [*threads, lone]:
        thread.join()
    assert finished.index("single") <= finished.index("f0") + 3  # within about one slot turn


def test_a_revocation_on_one_replica_is_refused_by_every_replica(cluster, pg_database):
    replicas, _ = cluster(key_cache_ttl_s=1.0)
    one, two = replicas.start(2)
    key = create_key(pg_database, "revoked")
    clients = [openai.OpenAI(base_url=g.url + "/v1", api_key=key, max_retries=0) for g in (one, two)]
    for client in clients:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    keys = httpx.get(one.url + "/admin/keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    key_id = next(k["id"] for k in keys["data"] if k["name"] == "revoked")
    revoked = httpx.post(
        one.url + f"/admin/keys/{key_id}/revoke", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert revoked.status_code == 200

    for gateway in (one, two):
        wait_until(
            lambda gateway=gateway: not chat_ok(gateway.url, key), timeout_s=3.0, what="the revocation seen"
        )


def test_the_ledger_has_each_request_once_whichever_replica_served_it(cluster, pg_database):
    replicas, _ = cluster(ledger_flush_s=0.2)
    gateways = replicas.start(2)
    key = create_key(pg_database, "ledger")
    ids = []
    for i in range(10):
        answer = chat(gateways[i % 2].url, key, max_tokens=2)
        assert answer.status_code == 200
        ids.append(answer.headers["x-request-id"])

    def rows() -> list[dict]:
        data = httpx.get(
            gateways[0].url + "/admin/requests",
            params={"limit": 100},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()["data"]
        return [row for row in data if row["key_name"] == "ledger"]

    wait_until(lambda: len(rows()) >= 10, what="ten ledger rows")
    assert sorted(row["request_id"] for row in rows()) == sorted(ids)


#: ~5,700 simulated tokens: an agent's conversation (as in tests/gateway/test_sessions.py).
HISTORY = [{"role": "user", "content": "summarise the design notes " * 850}]
#: ~5,000 tokens of something else: with the held ~5,700 it would not fit a 10,000-token pool.
COLD = [{"role": "user", "content": "translate this manual please " * 700}]


def post(url: str, key: str, messages: list[dict], **headers: str) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 8}
    answer = httpx.post(
        url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return answer


def test_an_agents_turns_on_two_replicas_are_held_as_on_one_gateway(cluster, pg_database):
    """The agent's first turn ends on one replica: its prefix is held on both; a cold long prompt sent
    to the other waits (``held``) while the agent's next turn, sent to that other replica, runs; the
    cold one is served once its hold-back ends (tests/gateway/test_sessions.py, on one gateway)."""
    replicas, _ = cluster(
        sim={"prefill_tps": 50_000},
        slots=2,
        kv_budget_tokens=10_000,
        tokenize_min_bytes=1,
        session_hold_s=10,
        long_prompt_tokens=4_000,
    )
    one, two = replicas.start(2)
    agent, cold_key = create_key(pg_database, "agent"), create_key(pg_database, "cold")
    named = {"x-session-id": "task-7"}
    post(one.url, agent, HISTORY, **named)  # its turn ends: ~5,700 tokens held for 10 s, on both
    wait_until(
        lambda: [h["tokens"] > 5_000 for h in status(two.url)["session_holds"]] == [True],
        what="the hold seen by the other replica",
    )
    cold: list[httpx.Response] = []
    waiting = threading.Thread(target=lambda: cold.append(post(two.url, cold_key, COLD)))
    waiting.start()
    wait_until(lambda: status(two.url)["waiting_for"]["held"] == 1, what="the cold one held back")
    nxt = HISTORY + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
    second = post(two.url, agent, nxt, **named)  # admitted while the cold one waits
    assert not cold and second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 5_000
    waiting.join(timeout=60)  # its hold-back runs out: then it is served
    assert cold

    def row() -> dict | None:
        auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
        rows = httpx.get(one.url + "/admin/requests", headers=auth).json()["data"]
        return next((r for r in rows if r["key_name"] == "cold"), None)

    wait_until(lambda: row() is not None, what="the cold one's row")
    assert row()["waited_for"]["held"] > 0  # type: ignore[index]
