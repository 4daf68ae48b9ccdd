"""The gateway process stopped the three ways operators stop it: SIGTERM (drain), SIGTERM past the
grace period (cut), and kill -9 (no shutdown at all), each followed by what must survive."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import httpx
import openai

from tests.support.gateway_process import GatewayProcess
from tests.support.probes import scrape, wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
LEDGER_FLUSH_S = 0.5
WRITE_ALLOWANCE_S = 0.5  # the batch write itself, on a loaded 2-core machine


def ledger_rows(database_url: str) -> list[tuple[str, int, bool, int]]:
    """``(client_request_id, status, client_disconnected, completion_tokens)`` of every usage row (the
    ids the test's clients sent)."""
    path = database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT client_request_id, status, client_disconnected, completion_tokens FROM usage_ledger"
        ).fetchall()


def stream_in_background(
    gateway: GatewayProcess, key: str, request_id: str, max_tokens: int
) -> tuple[threading.Thread, dict[str, object]]:
    """Start a streamed chat completion read by a thread; return once its first chunk arrived. The
    dict gets ``finish_reason`` (None if the stream ended without one) or ``error``."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "tell me a long story"}],
        max_tokens=max_tokens,
        stream=True,
        extra_headers={"x-request-id": request_id},
    )
    first, outcome = threading.Event(), {}

    def read() -> None:
        try:
            finish = None
            for chunk in stream:
                first.set()
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
            outcome["finish_reason"] = finish
        except Exception as exc:  # the outcome under test, whatever it is
            outcome["error"] = exc
        finally:
            first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(10)
    return reader, outcome


def test_sigterm_drains_streams_in_flight_and_refuses_new_requests_with_503(
    start_sim: Callable[..., ThreadedServer],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
) -> None:
    """SIGTERM mid-stream: the stream runs to its end; meanwhile new requests get 503 ``draining`` with
    Retry-After, /ready is 503 and /health 200; then the process exits 0 with the usage row written."""
    sim = start_sim(decode_tps=40.0)
    key = make_key("drain")
    gateway = gateway_processes(sim.url, database_url)
    reader, outcome = stream_in_background(gateway, key, "drained-stream", max_tokens=100)
    gateway.terminate()
    wait_until(
        lambda: httpx.get(gateway.url + "/ready", timeout=2).status_code == 503, what="/ready turns 503"
    )
    refused = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        timeout=5,
    )
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "draining"
    assert refused.json()["error"]["type"] == "service_unavailable_error"
    assert refused.headers["retry-after"] == "5" and refused.headers["connection"] == "close"
    assert httpx.get(gateway.url + "/health", timeout=2).status_code == 200
    assert gateway.process is not None and gateway.process.poll() is None, "exited while a stream ran"

    reader.join(20)
    assert "error" not in outcome, outcome
    assert outcome["finish_reason"] in ("stop", "length")
    assert gateway.wait(15) == 0
    rows = {row[0]: row for row in ledger_rows(database_url)}
    assert "drained-stream" in rows, (rows, gateway.log()[-3000:])
    assert rows["drained-stream"][1:3] == (200, False)
    assert rows["drained-stream"][3] > 0
    assert "Draining" in gateway.log()


def test_grace_period_over_cuts_the_stream_aborts_upstream_and_keeps_the_usage_row(
    start_sim: Callable[..., ThreadedServer],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
) -> None:
    """With GATEWAY_SHUTDOWN_GRACE_S=1 a 50 s stream is cut: the process still exits 0 within seconds,
    the backend stops generating (its running count drops to 0) and the cut request has its row."""
    sim = start_sim(decode_tps=20.0)
    key = make_key("cut")
    gateway = gateway_processes(sim.url, database_url, shutdown_grace_s=1)
    reader, outcome = stream_in_background(gateway, key, "cut-stream", max_tokens=1000)
    assert scrape(sim.url)["vllm:num_requests_running"] == 1
    signalled = time.monotonic()
    gateway.terminate()
    assert gateway.wait(15) == 0
    assert time.monotonic() - signalled < 8, "grace 1 s + 2 s connection close should bound the exit"
    reader.join(10)
    assert outcome.get("finish_reason") is None, "a cut stream must not look complete"
    wait_until(lambda: scrape(sim.url)["vllm:num_requests_running"] == 0, what="upstream aborted")
    rows = {row[0]: row for row in ledger_rows(database_url)}
    assert "cut-stream" in rows, rows
    assert rows["cut-stream"][3] > 0, "tokens streamed before the cut are accounted"
    assert "grace period over" in gateway.log()


def test_kill_9_loses_at_most_one_flush_interval_of_usage_rows_and_no_keys(
    start_sim: Callable[..., ThreadedServer],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    revoke_key: Callable[[str], object],
    database_url: str,
) -> None:
    """Requests run back to back until kill -9. After a restart on the same database: every request
    that finished more than one ledger flush interval (+0.5 s for the write itself) before the kill
    has exactly one row, no row is duplicated or invented, and keys (live and revoked) are intact."""
    sim = start_sim()
    key = make_key("survivor")
    revoked = make_key("gone")
    revoke_key("gone")
    gateway = gateway_processes(sim.url, database_url, ledger_flush_s=LEDGER_FLUSH_S)
    finished: dict[str, float] = {}
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}) as http:
            for index in range(100_000):
                if stop.is_set():
                    return
                request_id = f"k9-{index}"
                try:
                    reply = http.post(
                        "/v1/chat/completions",
                        headers={"x-request-id": request_id},
                        json={
                            "model": MODEL,
                            "messages": [{"role": "user", "content": "hi"}],
                            "max_tokens": 8,
                        },
                        timeout=10,
                    )
                except httpx.HTTPError:
                    return  # the kill
                assert reply.status_code == 200, reply.text
                finished[request_id] = time.monotonic()

    worker = threading.Thread(target=load)
    worker.start()
    risk_window_s = LEDGER_FLUSH_S + WRITE_ALLOWANCE_S
    wait_until(
        lambda: sum(at < time.monotonic() - risk_window_s for at in list(finished.values())) >= 40,
        timeout_s=60,
        what="40 requests answered before the last flush interval",
    )
    gateway.kill()
    killed_at = time.monotonic()
    stop.set()
    worker.join(15)

    rows = ledger_rows(database_url)
    ids = [row[0] for row in rows]
    assert len(ids) == len(set(ids)), "a usage row was written twice"
    assert set(ids) <= set(finished), "a row for a request that never finished"
    durable_before = killed_at - risk_window_s
    must_have = {rid for rid, at in finished.items() if at < durable_before}
    assert len(must_have) >= 30, f"too little load to prove anything ({len(finished)} requests)"
    assert must_have <= set(ids), f"lost rows older than the flush interval: {sorted(must_have - set(ids))}"
    at_risk = len(finished) - len(must_have)
    print(f"kill -9: {len(finished)} finished, {len(ids)} rows kept, {at_risk} in the last interval")

    restarted = gateway_processes(sim.url, database_url, ledger_flush_s=LEDGER_FLUSH_S)
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "again"}]}
    assert httpx.post(restarted.url + "/v1/chat/completions", headers=headers, json=body).status_code == 200
    denied = httpx.post(
        restarted.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {revoked}"}, json=body
    )
    assert denied.status_code == 401
    wait_until(lambda: len(ledger_rows(database_url)) == len(ids) + 1, what="the new row after restart")
