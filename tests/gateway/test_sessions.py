"""Agent sessions through a real gateway and simulator: a session is what the agent names (Claude Code's
``X-Claude-Code-Session-Id``, Codex's ``session-id``, ``x-session-id``) or a fingerprint of the
conversation, always scoped to the key; when a session's turn ends its prefix is held, and a cold
request that would evict it waits behind the session's next turn — at most the hold."""

from __future__ import annotations

import threading

import httpx

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
#: ~5,700 simulated tokens.
HISTORY = [{"role": "user", "content": "summarise the design notes " * 850}]
#: ~5,000 tokens of something else: with the held ~5,700 it would not fit a 10,000-token pool.
COLD = [{"role": "user", "content": "translate this manual please " * 700}]


def post(gateway, key: str, messages: list[dict], **headers: str) -> httpx.Response:
    body = {"model": MODEL, "messages": messages, "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key}", **headers}
    answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer


def session(gateway, admin: str, answer: httpx.Response) -> str | None:
    request_id = answer.headers["x-request-id"]
    auth = {"Authorization": f"Bearer {admin}"}

    def row() -> dict | None:
        rows = httpx.get(gateway.url + "/admin/requests", headers=auth).json()["data"]
        return next((r for r in rows if r["request_id"] == request_id), None)

    wait_until(lambda: row() is not None, what="its row")
    return row()["session"]  # type: ignore[index]


def status(gateway, admin: str) -> dict:
    return httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}).json()


def test_a_session_is_the_agents_name_scoped_to_the_key(start_sim, start_gateway, make_key, admin) -> None:
    gateway = start_gateway(start_sim().url)
    one, other = make_key("one"), make_key("other")
    hi = [{"role": "user", "content": "hi"}]
    named = {"X-Claude-Code-Session-Id": "fc17c8fe-64c1-4f33-b208-43bcace90410"}
    first = session(gateway, admin, post(gateway, one, hi, **named))
    again = session(gateway, admin, post(gateway, one, hi + hi, **named))
    stolen = session(gateway, admin, post(gateway, other, hi, **named))  # another key: another session
    codex = session(gateway, admin, post(gateway, one, hi, **{"session-id": "01a24b69"}))
    fingerprint = session(gateway, admin, post(gateway, one, hi))
    assert first == again and len(first or "") == 16
    assert len({first, stolen, codex, fingerprint}) == 4
    assert fingerprint == session(gateway, admin, post(gateway, one, hi + [{"role": "user", "content": "x"}]))


def test_a_cold_request_waits_behind_the_held_sessions_next_turn(
    start_sim, start_gateway, make_key, admin
) -> None:
    sim = start_sim(prefill_tps=50_000)
    gateway = start_gateway(
        sim.url,
        slots=2,
        kv_budget_tokens=10_000,
        tokenize_min_bytes=1,
        session_hold_s=5,
        long_prompt_tokens=4_000,  # the cold prompt is long; the agent's next turn, mostly cached, is not
    )
    agent, cold_key = make_key("agent"), make_key("cold")
    named = {"x-session-id": "task-7"}
    post(gateway, agent, HISTORY, **named)  # its turn ends: ~5,700 tokens held for 5 s
    assert [h["tokens"] > 5_000 for h in status(gateway, admin)["session_holds"]] == [True]
    assert scrape(gateway.url)["gateway_backend_session_holds{backend=default}"] == 1
    cold: dict[str, httpx.Response] = {}
    waiting = threading.Thread(target=lambda: cold.setdefault("answer", post(gateway, cold_key, COLD)))
    waiting.start()
    wait_until(lambda: status(gateway, admin)["waiting_for"]["held"] == 1, what="the cold one held back")
    nxt = HISTORY + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
    second = post(gateway, agent, nxt, **named)  # admitted while the cold one waits
    assert "answer" not in cold and second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 5_000
    waiting.join(timeout=30)  # the hold of the second turn runs out: then it is served
    assert cold["answer"].status_code == 200
    rows = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}).json()
    [row] = [r for r in rows["data"] if r["key_name"] == "cold"]
    assert 0 < row["waited_for"]["held"] <= 5.5
