"""One gateway in front of two backend pairs (two simulator processes): requests spread to the less
loaded, a conversation keeps its backend, each backend shows in ``/admin/status`` and ``/metrics``,
and a backend killed with -9 mid-run loses no request without an error and leaks no slot: its
streams end with an error event, its queued requests are served by the other."""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import httpx
import pytest

from tests.support.clients import MODEL, chat
from tests.support.gateway_process import BIN, clean_env
from tests.support.probes import scrape, wait_until
from tests.support.sim_process import SimProcess


@pytest.fixture
def two_backends(tmp_path: Path):
    """Two simulators, one slot each, tracing their sequences; killed at the end."""
    sims = [
        SimProcess(tmp_path / f"sim-{name}.log", "--slots", "1", "--decode-tps", "200",
                   "--trace-file", str(tmp_path / f"trace-{name}.jsonl")).start()
        for name in ("a", "b")
    ]  # fmt: skip
    yield sims
    for sim in sims:
        sim.kill()


#: A long stream's tokens: 100 s at the simulators' 200 tokens/s, far longer than it is let run.
LONG_TOKENS = 20_000


def traced(tmp_path: Path, name: str) -> list[dict]:
    path = tmp_path / f"trace-{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def admin_status(gateway, key: str) -> dict:
    return httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {key}"}).json()


def test_requests_spread_over_both_and_each_backend_shows(two_backends, start_gateway, make_key, tmp_path):
    a, b = two_backends
    gateway = start_gateway(f"a={a.url},b={b.url}", slots=1, backend_poll_s=0.2)
    key, admin = make_key("spread"), make_key("admin", scopes=["admin"])
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: chat(gateway.url, key, max_tokens=20), range(8)))
    assert [answer.status_code for answer in answers] == [200] * 8
    wait_until(lambda: len(traced(tmp_path, "a")) + len(traced(tmp_path, "b")) == 8, what="8 traced")
    assert len(traced(tmp_path, "a")) >= 2 and len(traced(tmp_path, "b")) >= 2
    status = admin_status(gateway, admin)
    assert status["slots_total"] == 2 and [s["name"] for s in status["backends"]] == ["a", "b"]
    assert all(s["up"] and s["slots_total"] == 1 for s in status["backends"])
    metrics = scrape(gateway.url, {"Authorization": f"Bearer {admin}"})
    assert metrics["gateway_upstream_up{backend=a}"] == metrics["gateway_upstream_up{backend=b}"] == 1
    assert metrics["gateway_slots_total"] == 2 and "gateway_backend_slots_in_use{backend=b}" in metrics
    shown = subprocess.run(
        [BIN, "status", "--url", gateway.url],
        env={**clean_env(), "DSPARK_ADMIN_KEY": admin, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [line.split() for line in shown.splitlines() if line.split()[:1] in (["a"], ["b"])]
    assert [row[:3] for row in rows] == [["a", "yes", "0/1"], ["b", "yes", "0/1"]], shown


def test_a_conversation_keeps_its_backend(two_backends, start_gateway, make_key, tmp_path):
    a, b = two_backends
    gateway = start_gateway(f"a={a.url},b={b.url}", slots=1)
    key = make_key("affinity")
    for _ in range(6):
        assert chat(gateway.url, key, max_tokens=2, user="conversation-7").status_code == 200
    wait_until(lambda: len(traced(tmp_path, "a")) + len(traced(tmp_path, "b")) == 6, what="6 traced")
    assert sorted([len(traced(tmp_path, "a")), len(traced(tmp_path, "b"))]) == [0, 6]


def test_a_conversation_without_affinity_goes_back_to_the_backend_holding_its_prefix(
    two_backends, start_gateway, make_key, tmp_path
):
    """No session affinity: the least loaded is "a" (a tie, by name), but "b" holds the first turn's
    prompt in its prefix cache, so the second turn runs there and is served from it."""
    a, b = two_backends
    gateway = start_gateway(f"a={a.url},b={b.url}", slots=1, tokenize_min_bytes=1, backend_poll_s=0.2)
    key = make_key("agent")
    history = [{"role": "user", "content": "read the whole repository " * 400}]
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(chat, gateway.url, key, 300)  # 1.5 s on "a"
        wait_until(lambda: scrape(gateway.url)["gateway_backend_slots_in_use{backend=a}"] == 1, what="a busy")
        first = chat(gateway.url, key, 2, messages=history)
        assert first.status_code == 200 and busy.result().status_code == 200
    more = [{"role": "assistant", "content": "done"}, {"role": "user", "content": "now fix the bug"}]
    second = chat(gateway.url, key, 2, messages=history + more)
    assert second.status_code == 200, second.text
    wait_until(lambda: len(traced(tmp_path, "b")) == 2, what="both turns on b")
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 1000
    assert [t["output_tokens"] for t in traced(tmp_path, "a")] == [300]


def test_a_backend_killed_mid_run_loses_nothing_silently_and_leaks_no_slot(
    two_backends, start_gateway, make_key, tmp_path
):
    """Two long streams run, one on each backend, four short ones wait; b is killed once they all are
    there (killed before its stream's response began, b's request would be a 503, no stream): its
    stream ends with an error event, the four are served by a once a's long stream is let go."""
    a, b = two_backends
    gateway = start_gateway(f"a={a.url},b={b.url}", slots=1, backend_poll_s=0.2, affinity=False)
    key, admin = make_key("survive"), make_key("admin", scopes=["admin"])
    running: list[int] = []  # one item per long stream that has received its first event
    let_go = threading.Event()  # a's long stream leaves (its client closes it) once this is set

    def stream(max_tokens: int) -> tuple[int, str]:
        """A stream of ``max_tokens`` (a long one is read until ``let_go``); its status and last event."""
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens,
                "stream": True, "ignore_eos": True}  # fmt: skip
        lines: list[str] = []
        with httpx.stream(
            "POST", gateway.url + "/v1/chat/completions", json=body,
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        ) as response:  # fmt: skip
            for line in response.iter_lines():
                if line.startswith("data: "):
                    lines.append(line)
                    if len(lines) == 1 and max_tokens == LONG_TOKENS:
                        running.append(1)
                if let_go.is_set() and max_tokens == LONG_TOKENS:
                    break
        return response.status_code, lines[-1] if lines else ""

    with ThreadPoolExecutor(6) as pool:
        long = [pool.submit(stream, LONG_TOKENS) for _ in range(2)]
        wait_until(lambda: len(running) == 2, what="a long stream running on each backend")
        short = [pool.submit(stream, 20) for _ in range(4)]
        wait_until(lambda: admin_status(gateway, admin)["queue_depth"] == 4, what="four queued")
        b.kill()
        wait(long, return_when=FIRST_COMPLETED, timeout=60)  # b's, cut
        let_go.set()
        cut = [future.result(timeout=60)[1] for future in long]
        served = [future.result(timeout=60) for future in short]
    errors = [last for last in cut if '"error"' in last]
    assert len(errors) == 1, cut  # b's stream says it broke; a's was left by its client
    assert served == [(200, "data: [DONE]")] * 4  # the four queued ones served by a
    state = admin_status(gateway, admin)
    assert (state["slots_in_use"], state["queue_depth"]) == (0, 0)
    assert [s["up"] for s in state["backends"]] == [True, False]
    wait_until(lambda: len(traced(tmp_path, "a")) == 5, what="a's five sequences traced")


def test_what_one_backend_shows_is_learnt_for_it_alone(start_gateway, make_key, tmp_path):
    """A backend without vLLM's tokenizer route answers the prompt count 404: its prompts are
    estimated from then on, while the other backend's are still counted by it."""
    sims = {
        "a": SimProcess(tmp_path / "sim-a.log", "--no-tokenize-route").start(),
        "b": SimProcess(tmp_path / "sim-b.log").start(),
    }
    try:
        gateway = start_gateway(f"a={sims['a'].url},b={sims['b'].url}", slots=1, tokenize_min_bytes=1)
        key, admin = make_key("counted"), make_key("admin", scopes=["admin"])

        def served_by(user: str) -> str:
            """Send one chat of ``user``'s conversation (affinity keeps it on one backend); the name of
            the backend that ran it."""
            before = {name: scrape(sim.url)["vllm:request_success_total"] for name, sim in sims.items()}
            assert chat(gateway.url, key, max_tokens=2, user=user).status_code == 200
            after = {name: scrape(sim.url)["vllm:request_success_total"] for name, sim in sims.items()}
            [name] = [name for name in sims if after[name] > before[name]]
            return name

        def counts(name: str) -> float:
            return scrape(sims[name].url).get("dspark_sim_token_counts_total", 0.0)

        on = {}
        for user in (f"user-{n}" for n in range(32)):
            on.setdefault(served_by(user), user)
            if len(on) == 2:
                break
        assert set(on) == {"a", "b"}
        assert served_by(on["a"]) == "a"  # a answered its count 404 (at the latest) here
        counted = counts("b")
        assert served_by(on["b"]) == "b"
        assert counts("b") == counted + 1
        backends = {b["name"]: b["upstream"] for b in admin_status(gateway, admin)["backends"]}
        assert backends["a"]["counts_prompts"] is False and backends["b"]["counts_prompts"] is True
    finally:
        for sim in sims.values():
            sim.kill()


def affinity_for(name: str, names: tuple[str, ...] = ("a", "b")) -> str:
    """A ``user`` whose rendezvous hash (gateway/backends/pool.py, ``Backends.route``) picks ``name``."""
    for n in range(1000):
        user = f"user-{n}"
        digests = {b: hashlib.sha256(f"{user}|{b}".encode()).digest() for b in names}
        if max(digests, key=digests.__getitem__) == name:
            return user
    raise AssertionError(f"no user hashes to {name}")


def test_a_turn_moved_to_another_backend_takes_its_sessions_hold_with_it(
    two_backends, start_gateway, make_key
):
    """An agent's first turn ends on "a": its session is held there. "a" is then busy (a request
    running, one waiting), so the next turn runs on "b": the hold leaves "a" (its cold prompts are no
    longer held back for a turn that won't come) and the turn's end holds the session on "b"."""
    a, b = two_backends
    gateway = start_gateway(
        f"a={a.url},b={b.url}", slots=1, tokenize_min_bytes=1, backend_poll_s=0.2, session_hold_s=60
    )
    key, admin = make_key("agent"), make_key("admin", scopes=["admin"])
    history = [{"role": "user", "content": "read the whole repository " * 400}]

    def turn(messages: list[dict]) -> None:
        answer = httpx.post(
            gateway.url + "/v1/chat/completions",
            json={"model": MODEL, "messages": messages, "max_tokens": 2},
            headers={"Authorization": f"Bearer {key}", "x-session-id": "task-9"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text

    turn(history)

    def holds() -> dict[str, int]:
        return {s["name"]: len(s["session_holds"]) for s in admin_status(gateway, admin)["backends"]}

    assert holds() == {"a": 1, "b": 0}
    busy = make_key("busy")
    on_a = affinity_for("a")
    for _ in range(2):  # one runs on "a", one waits there: "a" is past the prefix placement's slack
        threading.Thread(target=lambda: chat(gateway.url, busy, LONG_TOKENS, user=on_a), daemon=True).start()
    wait_until(lambda: scrape(gateway.url)["gateway_backend_queue_depth{backend=a}"] == 1, what="a busy")
    more = [{"role": "assistant", "content": "done"}, {"role": "user", "content": "now fix the bug"}]
    turn(history + more)
    assert holds() == {"a": 0, "b": 1}
