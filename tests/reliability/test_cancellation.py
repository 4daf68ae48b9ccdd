"""2,000 clients that give up at random points of their requests' lives leave nothing behind: no slot
in use, no one queued, nothing running on the backend, and exactly one usage row per request."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.load_mix import BEHAVIOURS, Outcome, run_client
from tests.support.probes import scrape, wait_until
from tests.support.servers import ThreadedServer

CLIENTS = 2000
ARRIVALS_PER_S = 30.0  # below what 2 slots serve of this mix on a loaded 2-core machine
KEYS = 4


async def _crowd(url: str, keys: list[str], seed: int) -> list[Outcome]:
    """``CLIENTS`` clients arriving as a Poisson process, each with a random key and behaviour."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=50)
    clients = [
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=120, limits=limits)
        for k in keys
    ]
    tasks = []
    try:
        for index in range(CLIENTS):
            behaviour = rng.choice(BEHAVIOURS)
            client_rng = random.Random(rng.random())
            http = rng.choice(clients)
            tasks.append(asyncio.create_task(run_client(http, behaviour, f"cx-{index}", client_rng)))
            await asyncio.sleep(rng.expovariate(ARRIVALS_PER_S))
        return list(await asyncio.gather(*tasks))
    finally:
        for http in clients:
            await http.aclose()


#: The second run's pool holds one or two of these requests' KV (prompt ~30 + 8-32 output tokens) and
#: about half their prompts are long: they also wait for KV and the lane, and pass each other.
KV_TIGHT = {"kv_budget_tokens": 90, "long_prompt_tokens": 33}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("admission", [{}, KV_TIGHT], ids=["slots", "kv-and-lane"])
def test_two_thousand_clients_giving_up_anywhere_leave_no_slot_queue_or_lost_row(
    start_sim: Callable[..., ThreadedServer],
    make_key: Callable[..., str],
    database_url: str,
    tmp_path: Path,
    admission: dict[str, int],
) -> None:
    """Clients finish or give up while queued, waiting for upstream headers, mid-stream or during the
    usage chunk. Afterwards: slots in use 0, no KV reserved, no long request running and queue 0
    (admin status), the simulator runs and waits for nothing, every request the gateway received has
    exactly one ledger row and no row is extra."""
    sim = start_sim(decode_tps=5000.0)
    keys = [make_key(f"crowd-{n}") for n in range(KEYS)]
    admin = make_key("ops", scopes=["admin"])
    env = clean_env(
        upstream=sim.url,
        database_url=database_url,
        queue_max=CLIENTS,
        queue_max_per_key=CLIENTS,
        ledger_flush_s=0.5,
        **admission,
    )
    gateway = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        outcomes = asyncio.run(_crowd(gateway.url, keys, seed=20261130))

        errors = [o for o in outcomes if o.error or o.phase in ("truncated", "refused", "empty")]
        assert not errors, errors[:5]
        phases = Counter(o.phase for o in outcomes)
        print(f"{CLIENTS} clients, phases reached: {dict(phases)}")
        for phase in ("done", "queued", "headers", "stream", "usage"):
            assert phases[phase] >= 50, f"too few clients ended in phase {phase!r}: {dict(phases)}"

        admin_headers = {"Authorization": f"Bearer {admin}"}

        def idle() -> bool:
            status = httpx.get(gateway.url + "/admin/status", headers=admin_headers, timeout=5).json()
            held = (
                status[name] for name in ("slots_in_use", "queue_depth", "kv_reserved_tokens", "long_in_use")
            )
            return not any(held)

        wait_until(idle, timeout_s=30, what="gateway slots and queue back to 0")
        backend = scrape(sim.url)
        assert backend["vllm:num_requests_running"] == 0 and backend["vllm:num_requests_waiting"] == 0

        sent = {o.request_id for o in outcomes if o.sent}
        path = database_url.split("///", 1)[1]

        def rows() -> list[str]:
            with sqlite3.connect(path) as db:
                return [r[0] for r in db.execute("SELECT client_request_id FROM usage_ledger")]

        wait_until(lambda: len(rows()) >= len(sent), timeout_s=30, what="one ledger row per request")
        ids = rows()
        assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1][:5]
        issued = {o.request_id for o in outcomes}
        # a client that gave up as its body went out may not have seen it sent, yet have a row
        assert sent <= set(ids) <= issued, (sorted(sent - set(ids))[:5], sorted(set(ids) - issued)[:5])
        with sqlite3.connect(path) as db:
            waits = Counter(
                reason
                for (row,) in db.execute("SELECT waited_for FROM usage_ledger")
                for reason in json.loads(row or "{}")
            )
        print(f"waited for: {dict(waits)}")
        assert {"kv", "lane"} <= set(waits) if admission else "kv" not in waits
    finally:
        gateway.stop()


def test_a_request_whose_body_never_arrives_or_is_invalid_still_has_its_one_row(
    start_sim: Callable[..., ThreadedServer],
    start_gateway: Callable[..., ThreadedServer],
    make_key: Callable[..., str],
) -> None:
    """The ledger row starts at arrival: a client that sends 10 of its 100 body bytes and leaves is a
    499, an invalid body a 400, each recorded once with the key that sent it."""
    gateway = start_gateway(start_sim().url)
    key, admin = make_key("partial"), make_key("ops", scopes=["admin"])
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {key}\r\nx-request-id: half-body\r\nContent-Length: 100\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(head.encode() + b'{"model":')
        time.sleep(0.3)
    bad = httpx.post(
        gateway.url + "/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {key}", "x-request-id": "bad-body"},
    )
    assert bad.status_code == 400

    def rows() -> dict[str, dict[str, object]]:
        listing = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"})
        return {row["client_request_id"]: row for row in listing.json()["data"]}

    wait_until(lambda: {"half-body", "bad-body"} <= set(rows()), what="both rows")
    recorded = rows()
    assert recorded["half-body"]["status"] == 499 and recorded["half-body"]["client_disconnected"]
    assert recorded["bad-body"]["status"] == 400
    assert {recorded[r]["key_name"] for r in ("half-body", "bad-body")} == {"partial"}
