"""Clients that give up at every point of their requests' lives leave nothing behind: no slot in use,
no one queued, no KV reserved, nothing running on the backend, and exactly one usage row per request.

Each client's phase is made, not drawn: in each round the backend's capacity is held by blockers (non-stream
requests whose prefill stalls a minute) while the round's other clients arrive and wait; those meant
to give up while queued leave at their first ``: queued`` comment, all at once; once they have, the
blockers give up while waiting for the upstream's headers, and the others run: some to the end
(streamed or not), some leave after a few chunks, some right after the chunk with ``finish_reason``,
before the usage chunk and ``[DONE]``. On a tight KV pool with an express lane (one long prompt at a
time) the blocker holds the lane and nearly all the KV, so the waiting short prompts wait for KV and
the long ones for the lane, and once it leaves they pass each other.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.probes import scrape, wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
KEYS = 4
ROUNDS = 2
#: A round's clients other than its blockers, by what each does: give up at its first ``: queued``
#: comment; read its stream to ``[DONE]``; a non-stream answer in full; give up after 1-3 chunks; give
#: up after the chunk with ``finish_reason``.
ROUND = {"queued": 24, "stream": 4, "complete": 4, "mid_stream": 6, "usage": 4}
#: The phase each behaviour ends in (``headers``: a blocker, given up waiting for the upstream's headers).
PHASE = {"queued": "queued", "stream": "done", "complete": "done", "mid_stream": "stream", "usage": "usage"}
#: Body sizes, bytes: the gateway estimates a small body's prompt at 4 bytes a token, so a short body is
#: 50 tokens and a long one 70 — long on the tight pool (``long_prompt_tokens`` 60).
SHORT_BYTES, LONG_BYTES = 200, 280
#: The tight pool: nearly all of it is the blocker's (a long prompt of 75 tokens and 40 of output: 115)
#: while it runs, so every other request (8-16 tokens of output) waits: a short one for KV, a long one
#: for the lane; each fits alone.
KV_TIGHT = {"kv_budget_tokens": 120, "long_prompt_tokens": 60, "express_slots": 1}
BLOCKER_BYTES, BLOCKER_OUTPUT = 300, 40


def body(
    request_id: str, size: int, max_tokens: int, stream: bool, usage: bool = False, stall: bool = False
) -> bytes:
    """A chat body of exactly ``size`` bytes (its content padded; unique by ``request_id``, so no
    prompt is a cached prefix of another)."""
    fields: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "stream": stream}
    if usage:
        fields["stream_options"] = {"include_usage": True}
    content = f"{request_id}: count to 9" + (" #sim:stall=60" if stall else "")

    def encoded(text: str) -> bytes:
        message = {"messages": [{"role": "user", "content": text}]}
        return json.dumps({**fields, **message}, separators=(",", ":")).encode()

    padding = size - len(encoded(content))
    assert padding >= 1, (request_id, size)
    return encoded(content + " " + "x" * (padding - 1))


@dataclass(slots=True)
class Client:
    """One client: its ``request_id``, what it does (a ``ROUND`` key or ``blocker``), the phase it
    reached (``phase``) and any error it met."""

    request_id: str
    behaviour: str
    phase: str = "unsent"
    error: str | None = None


async def run(
    http: httpx.AsyncClient, client: Client, content: bytes, chunks_before_leaving: int = 1
) -> None:
    """Send ``content`` and behave as ``client.behaviour`` says; a blocker is cancelled by the round
    (phase ``headers``). Never raises but the cancellation."""
    headers = {"x-request-id": client.request_id, "content-type": "application/json"}
    request = http.build_request("POST", "/v1/chat/completions", content=content, headers=headers)
    client.phase = "sent"
    try:
        if client.behaviour in ("complete", "blocker"):
            try:
                response = await http.send(request)
            except asyncio.CancelledError:
                client.phase = "headers"
                raise
            answer = response.json()
            ok = response.status_code == 200 and answer["choices"]
            client.phase, client.error = ("done", None) if ok else ("refused", response.text)
            return
        response = await http.send(request, stream=True)
        try:
            if response.status_code != 200:
                client.phase, client.error = "refused", (await response.aread()).decode()
                return
            client.phase = await read(response, client.behaviour, chunks_before_leaving)
        finally:
            await response.aclose()  # given up: the connection closes
    except httpx.HTTPError as exc:
        client.error = f"{type(exc).__name__}: {exc}"


async def read(response: httpx.Response, behaviour: str, chunks_before_leaving: int) -> str:
    """Read SSE lines until ``behaviour`` gives up; the phase reached."""
    chunks = 0
    async for line in response.aiter_lines():
        if line.startswith(": queued") and behaviour == "queued":
            return "queued"
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return "done"
        event = json.loads(line[6:])
        if "error" in event:
            raise httpx.RemoteProtocolError(f"error event: {event['error']}")
        chunks += 1
        if behaviour == "queued":
            return "admitted"  # it was to be blocked: the round is wrong
        if behaviour == "mid_stream" and chunks >= chunks_before_leaving:
            return "stream"
        if behaviour == "usage" and any(c.get("finish_reason") for c in event.get("choices", [])):
            return "usage"
    return "truncated"


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``check`` every 20 ms until it is true; ``AssertionError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.02)


async def crowd(url: str, keys: list[str], admin: str, tight: bool) -> list[Client]:
    """``ROUNDS`` rounds (see the module doc), their clients spread over ``keys``; every client."""
    # a connection each, as separate clients have: a pooled one idle for the server's keep-alive timeout
    # may be closed by the server just as the next request goes out on it (a ReadError, no request)
    fresh = httpx.Limits(max_keepalive_connections=0)
    https = [
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=120, limits=fresh)
        for k in keys
    ]
    ops = httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60, limits=fresh
    )
    clients: list[Client] = []

    async def status() -> dict[str, Any]:
        return (await ops.get("/admin/status")).json()

    def start(client: Client, content: bytes, chunks: int = 1) -> asyncio.Task[None]:
        clients.append(client)
        return asyncio.create_task(run(https[len(clients) % KEYS], client, content, chunks))

    try:
        for number in range(ROUNDS):
            blockers = [
                start(
                    Client(f"r{number}-blocker-{n}", "blocker"),
                    body(f"r{number}-blocker-{n}", BLOCKER_BYTES, BLOCKER_OUTPUT, False, stall=True)
                    if tight
                    else body(f"r{number}-blocker-{n}", SHORT_BYTES, 8, False, stall=True),
                )
                for n in range(1 if tight else 2)
            ]
            held = len(blockers)
            await until(
                lambda held=held: _holding(status, held), f"round {number}'s blockers holding the backend"
            )
            waiting: list[asyncio.Task[None]] = []
            queued: list[asyncio.Task[None]] = []
            for behaviour, count in ROUND.items():
                for n in range(count):
                    request_id = f"r{number}-{behaviour}-{n}"
                    size = LONG_BYTES if n % 2 else SHORT_BYTES
                    content = body(
                        request_id, size, 8 + n % 3 * 4, behaviour != "complete", behaviour == "usage"
                    )
                    task = start(Client(request_id, behaviour), content, 1 + n % 3)
                    (queued if behaviour == "queued" else waiting).append(task)
            await asyncio.gather(*queued)  # each left at its first ": queued"
            depth = len(waiting)
            await until(
                lambda depth=depth: _queue(status, depth),
                f"round {number}: the others waiting behind the blockers",
            )
            for task in blockers:
                task.cancel()
            await asyncio.gather(*blockers, return_exceptions=True)
            await asyncio.gather(*waiting)
        return clients
    finally:
        for http in [*https, ops]:
            await http.aclose()


async def _holding(status: Callable[[], Awaitable[dict[str, Any]]], slots: int) -> bool:
    state = await status()
    return bool(state["slots_in_use"] == slots and state["queue_depth"] == 0)


async def _queue(status: Callable[[], Awaitable[dict[str, Any]]], depth: int) -> bool:
    return bool((await status())["queue_depth"] == depth)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("admission", [{}, KV_TIGHT], ids=["slots", "kv-and-lane"])
def test_clients_giving_up_at_every_phase_leave_no_slot_queue_or_lost_row(
    start_sim: Callable[..., ThreadedServer],
    start_gateway: Callable[..., ThreadedServer],
    make_key: Callable[..., str],
    database_url: str,
    admission: dict[str, int],
) -> None:
    """Afterwards: slots in use 0, no KV reserved, no long request running and queue 0 (admin status),
    the simulator runs and waits for nothing, every request has exactly one ledger row; each client
    ended in the phase it was made to reach."""
    sim = start_sim(decode_tps=5000.0)
    keys = [make_key(f"crowd-{n}") for n in range(KEYS)]
    admin = make_key("ops", scopes=["admin"])
    gateway = start_gateway(
        sim.url, slots=2, queue_max=1000, queue_max_per_key=1000, ledger_flush_s=0.5, **admission
    )
    clients = asyncio.run(crowd(gateway.url, keys, admin, bool(admission)))

    wrong = [c for c in clients if c.error or c.phase != PHASE.get(c.behaviour, "headers")]
    assert not wrong, wrong[:5]
    admin_headers = {"Authorization": f"Bearer {admin}"}

    def idle() -> bool:
        status = httpx.get(gateway.url + "/admin/status", headers=admin_headers, timeout=60).json()
        held = (status[name] for name in ("slots_in_use", "queue_depth", "kv_reserved_tokens", "long_in_use"))
        return not any(held)

    wait_until(idle, what="gateway slots, KV and queue back to 0")
    wait_until(
        lambda: (
            scrape(sim.url)["vllm:num_requests_running"] == scrape(sim.url)["vllm:num_requests_waiting"] == 0
        ),
        what="the simulator idle",
    )
    path = database_url.split("///", 1)[1]

    def rows() -> list[str]:
        with sqlite3.connect(path) as db:
            return [r[0] for r in db.execute("SELECT client_request_id FROM usage_ledger")]

    issued = {c.request_id for c in clients}
    wait_until(lambda: len(rows()) >= len(issued), what="one ledger row per request")
    ids = rows()
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1][:5]
    assert set(ids) == issued, (sorted(issued - set(ids))[:5], sorted(set(ids) - issued)[:5])
    with sqlite3.connect(path) as db:
        waits = Counter(
            reason
            for (row,) in db.execute("SELECT waited_for FROM usage_ledger")
            for reason in json.loads(row or "{}")
        )
    assert {"kv", "lane"} <= set(waits) if admission else "kv" not in waits and "lane" not in waits, waits


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
