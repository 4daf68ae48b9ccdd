"""Helpers shared by the simulator tests (clients, SSE parsing, metric scraping, polling)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from gateway.sim import SimConfig

FAST: dict[str, Any] = {"decode_tps": 2000.0, "prefill_tps": 200_000.0, "ttft_base_s": 0.002}
"""Config overrides that keep tests quick (steps of ~1 ms)."""

MODEL = SimConfig().served_model_name


def chat_body(text: str, **extra: Any) -> dict[str, Any]:
    """A chat request for the served model with one user message."""
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


STREAM_USAGE = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def sse_events(response: httpx.Response) -> list[Any]:
    """Every ``data:`` event of a (fully read) SSE response: parsed JSON, or the raw ``[DONE]``."""
    events: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def stream_chat(base_url: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> list[Any]:
    """POST a streaming request and return its SSE events."""
    with httpx.Client(base_url=base_url, timeout=30) as client, client.stream("POST", path, json=body) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r)


def scrape(base_url: str) -> dict[str, float]:
    """``/metrics`` as ``{"name{label=value,...}": value}`` (labels sorted, ``model_name`` dropped)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "model_name"}
            key = sample.name + (
                "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}" if labels else ""
            )
            values[key] = sample.value
    return values


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 10 ms until true; fail after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Any ASGI app under a real uvicorn on a free loopback port, in a thread; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, what="server start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
