"""A batch through gateways that die under it: killed (kill -9) while a second replica on the same
database waits, the batch is taken over once its lease lapses; stopped (SIGTERM), the lease is given
back and a restarted gateway resumes at once; a gateway killed while it runs two keys' batches at
once leaves both to the replica started after. Every way, every line is answered exactly once in the
output file (real processes, the official ``openai`` SDK as the client).

The simulator sits behind a :class:`Gate` that answers the first :data:`PASSED` lines and holds every
later one until the test opens it: the death lands while the batch is surely mid-run (lines
answered, lines in flight, lines not sent), whatever the machine's speed."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from dspark_sim import SimConfig, create_sim_app
from tests.conftest import FAST_SIM
from tests.support.gateway_process import GatewayProcess
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer
from tests.support.sim_gate import Gate

MODEL = "deepseek-v4-flash-0731"
LINES = 60
#: Lines the gate lets through before it holds the rest; a death after that leaves at least
#: ``LINES - PASSED - slots`` lines to the gateway that takes the batch up.
PASSED = 20
CHAT = "/v1/chat/completions"


@pytest.fixture
def gate() -> Iterator[tuple[Gate, str]]:
    """The simulator behind a :class:`Gate` of :data:`PASSED` lines, and its URL (opened at the end,
    so nothing waits on it as the server stops)."""
    gate = Gate(create_sim_app(SimConfig(**FAST_SIM)), PASSED)
    server = ThreadedServer(gate).start()
    yield gate, server.url
    gate.open()
    server.stop()


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


def holders(database_url: str, batch_ids: list[str]) -> list[int | None]:
    """The pids of the processes holding the batches' leases (None: a batch not held)."""
    path = database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        found = [db.execute("SELECT holder FROM batches WHERE id = ?", (b,)).fetchone()[0] for b in batch_ids]
    return [int(holder.split(":")[1]) if holder else None for holder in found]


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


def batch_under_way(
    gateway: GatewayProcess, gate: Gate, make_key: Callable[..., str]
) -> tuple[str, openai.OpenAI, str]:
    """A key's batch of :data:`LINES` started on ``gateway``, once a line waits at the gate (the
    :data:`PASSED` before it answered): (key, its client, the batch id)."""
    key = make_key("batcher")
    sdk, batch_id = start_batch(gateway, key)
    wait_until(lambda: gate.held > 0, timeout_s=120, what="a line held at the gate")
    return key, sdk, batch_id


def ready(gateway: GatewayProcess) -> bool:
    try:
        return httpx.get(gateway.url + "/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_batch_killed_mid_way_is_taken_over_by_another_replica(
    gate: tuple[Gate, str],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
    tmp_path: Path,
) -> None:
    held, sim_url = gate
    settings = {"files_dir": tmp_path / "files", "batch_lease_ttl_s": 2}
    replicas = [gateway_processes(sim_url, database_url, **settings) for _ in range(2)]
    key, sdk, batch_id = batch_under_way(replicas[0], held, make_key)
    [running] = [r for r in replicas if r.pid == holder_pid(database_url, batch_id)]
    [standby] = [r for r in replicas if r is not running]
    running.kill()
    held.open()
    survivor = sdk_for(standby, key)
    assert completed(survivor, batch_id) < LINES, "the batch ended before the kill: nothing was proved"
    answered_once(survivor, batch_id, timeout_s=120)


def test_a_batch_stopped_mid_way_resumes_at_once_on_restart(
    gate: tuple[Gate, str],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
    tmp_path: Path,
) -> None:
    held, sim_url = gate
    # a lease of 600 s: only its release lets a restarted gateway resume within the test's wait
    settings = {"files_dir": tmp_path / "files", "batch_lease_ttl_s": 600}
    first = gateway_processes(sim_url, database_url, **settings)
    key, sdk, batch_id = batch_under_way(first, held, make_key)
    first.terminate()
    # the lines in flight may end once the gateway drains (it sends no more): only then
    wait_until(lambda: not ready(first), timeout_s=60, what="the gateway draining")
    held.open()
    assert first.wait(30) == 0
    restarted = sdk_for(gateway_processes(sim_url, database_url, **settings), key)
    assert completed(restarted, batch_id) < LINES, "the batch ended before the stop: nothing was proved"
    answered_once(restarted, batch_id, timeout_s=120)  # well within the lease: it was given back


def test_a_gateway_killed_while_running_two_keys_batches_leaves_both_to_another(
    gate: tuple[Gate, str],
    gateway_processes: Callable[..., GatewayProcess],
    make_key: Callable[..., str],
    database_url: str,
    tmp_path: Path,
) -> None:
    held, sim_url = gate
    settings = {"files_dir": tmp_path / "files", "batch_lease_ttl_s": 2, "batch_max_running": 2}
    first = gateway_processes(sim_url, database_url, **settings)
    keys = [make_key("first-key"), make_key("second-key")]
    started = [start_batch(first, key) for key in keys]
    batch_ids = [batch_id for _, batch_id in started]

    def both_running_here() -> bool:
        statuses = {sdk.batches.retrieve(batch_id).status for sdk, batch_id in started}
        return statuses == {"in_progress"} and holders(database_url, batch_ids) == [first.pid] * 2

    wait_until(both_running_here, timeout_s=120, what="both batches running on the first gateway")
    wait_until(lambda: held.held == 2, timeout_s=120, what="lines in both slots, held at the gate")
    standby = gateway_processes(sim_url, database_url, **settings)
    first.kill()
    survivors = [sdk_for(standby, key) for key in keys]
    for survivor, batch_id in zip(survivors, batch_ids, strict=True):  # the gate holds what is left
        assert completed(survivor, batch_id) < LINES, "a batch ended before the kill: nothing was proved"
    held.open()
    for survivor, batch_id in zip(survivors, batch_ids, strict=True):
        answered_once(survivor, batch_id, timeout_s=120)
