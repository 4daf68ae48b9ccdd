"""What tests ask a running gateway the way its clients do: a chat completion with the official
OpenAI SDK or with plain httpx, and reading the durations OpenAI's rate-limit headers carry."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai

MODEL = "deepseek-v4-flash-0731"


def chat_ok(url: str, key: str) -> bool:
    """Whether ``key`` is let through to a short chat completion at the gateway at ``url`` (False: a
    401), asked with the OpenAI SDK."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
    except openai.AuthenticationError:
        return False
    return True


def chat(url: str, key: str, max_tokens: int = 8, **extra: Any) -> httpx.Response:
    """A non-stream chat completion of exactly ``max_tokens`` tokens (``ignore_eos``) at ``url``."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    return httpx.post(
        url + "/v1/chat/completions",
        json={**body, "ignore_eos": True, **extra},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def seconds_of(duration: str) -> float:
    """``1h2m3.5s`` / ``120ms`` (OpenAI's ``x-ratelimit-reset-*``) -> seconds."""
    if duration.endswith("ms"):
        return int(duration[:-2]) / 1000
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?([\d.]+)s", duration)
    assert match, duration
    hours, minutes, secs = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(secs)
