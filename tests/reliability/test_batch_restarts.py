"""A batch of 2,000 lines through gateways that die under it: killed (kill -9) while a second replica
on the same database waits, the batch is taken over once its lease lapses; stopped (SIGTERM), the
lease is given back and a restarted gateway resumes at once. Either way every line is answered
exactly once in the output file (real processes, the official ``openai`` SDK as the client)."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

from tests.support.gateway_process import GatewayProcess
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
LINES = 2_000
CHAT = "/v1/chat/completions"


def batch_input() -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    rows = ({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            for n in range(LINES))  # fmt: skip
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def sdk_for(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def start_batch(gateway: GatewayProcess, key: str) -> tuple[openai.OpenAI, str]:
    sdk = sdk_for(gateway, key)
    made = sdk.files.create(file=("in.jsonl", io.BytesIO(batch_input())), purpose="batch")
    batch = sdk.batches.create(input_file_id=made.id, endpoint=CHAT, completion_window="24h")
    return sdk, batch.id


def completed(sdk: openai.OpenAI, batch_id: str) -> int:
    return sdk.batches.retrieve(batch_id).request_counts.completed


def holder_pid(database_url: str, batch_id: str) -> int:
    """The pid of the process holding the batch's lease (``host:pid:random``)."""
    path = database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        (holder,) = db.execute("SELECT holder FROM batches WHERE id = ?", (batch_id,)).fetchone()
    return int(holder.split(":")[1])


def answered_once(sdk: openai.OpenAI, batch_id: str, timeout_s: float) -> Any:
    wait_until(lambda: sdk.batches.retrieve(batch_id).status == "completed", timeout_s=timeout_s,
               what="the batch completed")  # fmt: skip
    batch = sdk.batches.retrieve(batch_id)
    assert batch.output_file_id is not None and batch.error_file_id is None
    rows = [json.loads(row) for row in sdk.files.content(batch.output_file_id).text.splitlines()]
    ids = [row["custom_id"] for row in rows]
    assert len(ids) == len(set(ids)) == LINES, "a line missing or answered twice"
    assert batch.request_counts.completed == LINES and batch.request_counts.failed == 0
    assert {row["response"]["status_code"] for row in rows} == {200}
    return batch


def gateways(
    start_sim: Callable[..., ThreadedServer],
    gateway_processes: Callable[..., GatewayProcess],
    database_url: str,
    **settings: object,
) -> Callable[[], GatewayProcess]:
    """``start()``: one more gateway process on the same simulator, database and ``settings``."""
    sim = start_sim()
    return lambda: gateway_processes(sim.url, database_url, **settings)


def batch_under_way(gateway: GatewayProcess, make_key: Callable[..., str]) -> tuple[str, openai.OpenAI, str]:
    """A key's batch of :data:`LINES` started on ``gateway``, once 300 lines are answered: (key, its
    client, the batch id)."""
    key = make_key("batcher")
    sdk, batch_id = start_batch(gateway, key)
    wait_until(lambda: completed(sdk, batch_id) >= 300, timeout_s=120, what="300 lines answered")
    return key, sdk, batch_id


def test_a_batch_killed_mid_way_is_taken_over_by_another_replica(
    start_sim: Callable[..., ThreadedServer],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
    tmp_path: Path,
) -> None:
    start = gateways(
        start_sim, gateway_processes, database_url, files_dir=tmp_path / "files", batch_lease_ttl_s=2
    )
    replicas = [start(), start()]
    key, sdk, batch_id = batch_under_way(replicas[0], make_key)
    [running] = [r for r in replicas if r.pid == holder_pid(database_url, batch_id)]
    [standby] = [r for r in replicas if r is not running]
    running.kill()
    survivor = sdk_for(standby, key)
    assert completed(survivor, batch_id) < LINES, "the batch ended before the kill: nothing was proved"
    answered_once(survivor, batch_id, timeout_s=240)


def test_a_batch_stopped_mid_way_resumes_at_once_on_restart(
    start_sim: Callable[..., ThreadedServer],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
    tmp_path: Path,
) -> None:
    # a lease of 600 s: only its release lets a restarted gateway resume within the test's wait
    start = gateways(
        start_sim, gateway_processes, database_url, files_dir=tmp_path / "files", batch_lease_ttl_s=600
    )
    first = start()
    key, sdk, batch_id = batch_under_way(first, make_key)
    first.terminate()
    assert first.wait(30) == 0
    restarted = sdk_for(start(), key)
    assert completed(restarted, batch_id) < LINES, "the batch ended before the stop: nothing was proved"
    answered_once(restarted, batch_id, timeout_s=240)  # well within the lease: it was given back
