"""Helpers shared by the simulator tests (clients, SSE parsing, metric scraping, polling)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dspark_sim import SimConfig
from tests.support.probes import wait_until as wait_for
from tests.support.servers import ThreadedServer

__all__ = [
    "FAST",
    "MODEL",
    "STREAM_USAGE",
    "chat_body",
    "load_data",
    "named_events",
    "scrape",
    "serve_app",
    "sse_events",
    "stream_chat",
    "wait_for",
]

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


def named_events(base_url: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming Responses or Messages request; its events' data, each checked to be framed as
    ``event: <type>`` + ``data: <json with that type>``, nothing else in the stream."""
    with httpx.Client(base_url=base_url, timeout=30) as client, client.stream("POST", path, json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    frames = raw.split("\n\n")
    assert frames[-1] == ""
    events = []
    for frame in frames[:-1]:
        name_line, data_line = frame.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {event['type']}" and data_line.startswith("data: ")
        events.append(event)
    return events


def load_data(name: str) -> dict[str, Any]:
    """A JSON file of ``tests/sim/data`` (e.g. trimmed requests captured from real clients)."""
    return json.loads((Path(__file__).parent / "data" / name).read_text(encoding="utf-8"))


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


@contextmanager
def serve_app(app: Any) -> Iterator[str]:
    """Any ASGI app under a real uvicorn on a free loopback port, in a thread; yields its base URL."""
    server = ThreadedServer(app).start()
    try:
        yield server.url
    finally:
        server.stop()
