"""The console without I/O: sessions in memory (expiry, bound, CSRF), live figures."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from gateway.auth.principal import Principal
from gateway.console import live
from gateway.console.sessions import MemorySessions

ADMIN = Principal(key_id="key_1", name="root", scopes=frozenset({"admin"}))


async def test_a_session_is_found_by_its_token_until_it_expires() -> None:
    sessions = MemorySessions(ttl_s=0.05)
    token = await sessions.open(ADMIN, "dsk-secret")
    session = await sessions.get(token)
    assert session is not None and session.principal is ADMIN
    assert session.credential == hashlib.sha256(b"dsk-secret").hexdigest()  # as the key store holds it
    assert (
        session.allows(session.csrf)
        and not session.allows("x" * len(session.csrf))
        and not session.allows(None)
    )
    assert await sessions.get("not-" + token) is None and await sessions.get(None) is None
    await asyncio.sleep(0.06)
    assert await sessions.get(token) is None


async def test_sessions_are_bounded_and_sign_out_forgets() -> None:
    sessions = MemorySessions(ttl_s=60, limit=2)
    first, second, third = [await sessions.open(ADMIN, "dsk-secret") for _ in range(3)]
    assert await sessions.get(first) is None and await sessions.get(second) and await sessions.get(third)
    await sessions.close(third)
    assert await sessions.get(third) is None


def test_live_figures_over_the_window() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    rows = [
        {"arrived_at": (now - timedelta(seconds=10 * i)).isoformat(), "ttft_s": 0.1 * (i + 1),
         "decode_tokens_per_s": 80.0 + i, "spec": {"draft_tokens": 10, "accepted_tokens": 7}}
        for i in range(20)
    ] + [{"arrived_at": (now - timedelta(hours=1)).isoformat(), "ttft_s": 99.0}]  # fmt: skip
    figures = live.figures(rows, now)
    assert figures["requests"] == 20
    assert figures["ttft_p50_s"] == pytest.approx(1.0) and figures["ttft_p95_s"] == pytest.approx(1.9)
    assert figures["decode_tokens_per_s"] == 89.5 and figures["acceptance_rate"] == 0.7
    assert figures["cache_hit_ratio"] is None and figures["cache_prediction_error_tokens"] is None
    assert live.figures([], now) == {
        "requests": 0, "ttft_p50_s": None, "ttft_p95_s": None, "decode_tokens_per_s": None,
        "acceptance_rate": None, "cache_hit_ratio": None, "cache_prediction_error_tokens": None,
        "cache_predicted": 0, "cache_unpredicted": {},
    }  # fmt: skip
    at = now.isoformat()
    turns = [  # (prompt, cached reported, cached predicted, source)
        {"arrived_at": at, "prompt_tokens": p, "cached_tokens": c, "cached_tokens_predicted": guess,
         "cache_source": source}
        for p, c, guess, source in (
            (1000, 768, 768, "events"), (1000, 0, 256, "events"),
            (2000, 0, None, "image"), (10, 0, None, None),
        )
    ]  # fmt: skip
    cache = live.figures(turns, now)
    assert cache["cache_hit_ratio"] == 768 / 4010 and cache["cache_prediction_error_tokens"] == 128
    assert cache["cache_predicted"] == 2 and cache["cache_unpredicted"] == {"image": 1}
