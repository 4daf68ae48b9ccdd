"""The gateway's prefix-cache view as a test reads it: ``/admin/status``'s figures, a chat turn and its
ledger row, and genuine KV event batches published until the gateway's subscription takes one."""

from __future__ import annotations

import time
from typing import Protocol

import httpx

from tests.support.kv_publisher import Publisher, payload, stored
from tests.support.probes import wait_until
from tests.support.servers import free_port

MODEL = "deepseek-v4-flash-0731"


class Served(Protocol):
    """A gateway on loopback: in this process (``start_gateway``) or its own (``GatewayProcess``)."""

    url: str


def endpoints() -> tuple[str, str]:
    """A KV events endpoint and a replay endpoint on free loopback ports."""
    return f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"


def status(gateway: Served, admin: str) -> dict:
    return httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}).json()


def prefix_cache(gateway: Served, admin: str) -> dict:
    """The first backend's ``prefix_cache`` in ``/admin/status``."""
    return status(gateway, admin)["backends"][0]["prefix_cache"]


def feed(gateway: Served, admin: str) -> dict:
    """The first backend's KV events feed figures (``last_seq``, ``batches``, ``replayed`` …)."""
    status = httpx.get(
        gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}, timeout=10
    )
    return status.json()["backends"][0]["prefix_cache"]["events"]


def turn(gateway: Served, key: str, admin: str, messages: list[dict]) -> dict:
    """One chat turn; its ledger row."""
    body = {"model": MODEL, "messages": messages, "max_tokens": 8}
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    request_id = answer.headers["x-request-id"]

    def row() -> dict | None:
        listed = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"})
        rows = listed.json()["data"]
        return next((r for r in rows if r["request_id"] == request_id), None)

    wait_until(lambda: row() is not None, what="its row")
    found = row()
    assert found is not None
    assert found["cached_tokens"] == answer.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    return found


def publish_until_taken(
    publisher: Publisher, gateway: Served, admin: str, first: int = 0, block: int = 16
) -> int:
    """Publish genuine batches from ``first`` (a block of ``block`` tokens each) until the gateway took
    one (a subscription takes a moment to reach the publisher); the last number sent."""
    seq = first
    deadline = time.monotonic() + 60
    while feed(gateway, admin)["last_seq"] < first:
        assert time.monotonic() < deadline, "no batch taken within 60 s"
        publisher.publish(seq, payload(stored(1000 + seq, block)))
        seq += 1
        time.sleep(0.05)
    wait_until(lambda: feed(gateway, admin)["last_seq"] == seq - 1, 60, "the batches sent")
    return seq - 1
