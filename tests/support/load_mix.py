"""Clients that finish, or give up at every point of a request's life, against a live gateway.

One client call sends one chat completion through ``httpx`` and returns an :class:`Outcome`. A client
that gives up closes its connection, exactly what a user's Ctrl-C or a closed browser tab does. The
simulator upstream reads ``#sim:stall=S`` in the prompt (a prefill that takes S seconds).

Behaviours (``BEHAVIOURS``):

- ``stream`` / ``complete``: a stream read to ``[DONE]`` / a non-stream answer read in full;
- ``cancel_queued``: a stream, given up at its first ``: queued N`` comment (while it waits for a slot);
- ``cancel_headers``: a non-stream request whose upstream stalls 0.25 s, given up 0.1-0.3 s after it
  was sent (while queued or waiting for the upstream's headers);
- ``cancel_mid_stream``: a stream given up after 1-5 data events;
- ``cancel_usage``: a stream with ``include_usage``, given up right after the chunk carrying
  ``finish_reason``, before the usage chunk and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Any

import httpx

MODEL = "deepseek-v4-flash-0731"
BEHAVIOURS = ("stream", "complete", "cancel_queued", "cancel_headers", "cancel_mid_stream", "cancel_usage")


@dataclass(slots=True)
class Outcome:
    """What one client saw. ``phase`` is where it ended: ``done``, ``queued``, ``headers``, ``stream``,
    ``usage`` (gave up at those points) or ``refused`` (an error status, in ``status``)."""

    request_id: str
    behaviour: str
    sent: bool = False
    """The request body was written in full (so the gateway may have a row for it)."""
    status: int | None = None
    phase: str = "unsent"
    error: str | None = None


def _body(behaviour: str, rng: random.Random) -> dict[str, Any]:
    stall = " #sim:stall=0.25" if behaviour == "cancel_headers" else ""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"count to {rng.randint(1, 99)}{stall}"}],
        "max_tokens": rng.randint(8, 32),
        "stream": behaviour != "complete" and behaviour != "cancel_headers",
    }
    if behaviour == "cancel_usage":
        body["stream_options"] = {"include_usage": True}
    return body


async def run_client(http: httpx.AsyncClient, behaviour: str, request_id: str, rng: random.Random) -> Outcome:
    """Run one client of ``behaviour`` against ``http`` (base URL and bearer key set); never raises."""
    outcome = Outcome(request_id, behaviour)

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_body.complete":
            outcome.sent = True

    request = http.build_request(
        "POST",
        "/v1/chat/completions",
        json=_body(behaviour, rng),
        headers={"x-request-id": request_id},
        extensions={"trace": trace},
    )
    try:
        if behaviour == "cancel_headers":
            give_up_after = rng.uniform(0.1, 0.3)
            try:
                response = await asyncio.wait_for(http.send(request), give_up_after)
            except TimeoutError:
                outcome.phase = "headers"
                return outcome
            outcome.status = response.status_code
            outcome.phase = "done" if response.status_code == 200 else "refused"
            return outcome
        response = await http.send(request, stream=behaviour != "complete")
        outcome.status = response.status_code
        if response.status_code != 200:
            await response.aread()
            await response.aclose()
            outcome.phase = "refused"
            return outcome
        if behaviour == "complete":
            outcome.phase = "done" if response.json()["choices"] else "empty"
            return outcome
        try:
            outcome.phase = await _read_stream(response, behaviour, rng.randint(1, 5))
        finally:
            await response.aclose()
    except httpx.HTTPError as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome


async def _read_stream(response: httpx.Response, behaviour: str, events_before_cancel: int) -> str:
    """Read SSE lines until ``behaviour`` says to give up; return the phase reached."""
    data_events = 0
    async for line in response.aiter_lines():
        if line.startswith(": queued") and behaviour == "cancel_queued":
            return "queued"
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return "done"
        event = json.loads(line[6:])
        if "error" in event:
            raise httpx.RemoteProtocolError(f"error event: {event['error']}")
        data_events += 1
        if behaviour == "cancel_queued" or (
            behaviour == "cancel_mid_stream" and data_events >= events_before_cancel
        ):
            return "stream"
        if behaviour == "cancel_usage" and any(c.get("finish_reason") for c in event.get("choices", [])):
            return "usage"
    return "truncated"
