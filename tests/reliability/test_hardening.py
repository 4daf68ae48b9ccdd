"""Attacks that froze, failed with a 500 or overran the gateway before it bounded its work, each against
a real gateway on loopback. While the heavy ones run, ``/health`` is asked every 50 ms: the longest
answer shows whether any request held the event loop."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
CHAT = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 8,
    "reasoning_effort": "none",
}
#: The longest ``/health`` answer allowed while an attack runs, s: the attacks held the loop 2.5 to 24 s;
#: a bound well below that and well above what a loaded 2-core machine's scheduling adds (a tenth of a
#: second was seen there with a free loop) tells a held loop from a busy machine.
HEALTH_BOUND_S = 1.0


class HealthWatch:
    """Asks ``/health`` every 50 ms in a thread; :attr:`longest` is the slowest answer, s."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._stop = threading.Event()
        self.longest = 0.0
        self.answers = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                assert client.get(self._url + "/health").status_code == 200
                self.longest = max(self.longest, time.perf_counter() - started)
                self.answers += 1
                self._stop.wait(0.05)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        self._answered(1)
        return self

    def __exit__(self, *_: object) -> None:
        self._answered(self.answers + 1)  # one more asked after the attack: it spans all of it
        self._stop.set()
        self._thread.join(timeout=30)

    def _answered(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while self.answers < count and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)


def send_raw(port: int, head: bytes, body: bytes) -> bytes:
    """Send ``head`` then ``body`` (from a thread, ignoring a connection the server closed) and return
    the response's status line."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)

        def push() -> None:
            with contextlib.suppress(OSError):
                sock.sendall(body)

        pusher = threading.Thread(target=push, daemon=True)
        pusher.start()
        received = b""
        while b"\r\n" not in received:
            part = sock.recv(65536)
            if not part:
                break
            received += part
        return received.split(b"\r\n", 1)[0]


def post_head(path: str, length: int, key: str | None = None) -> bytes:
    auth = f"authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{auth}"
        f"content-length: {length}\r\n\r\n"
    ).encode()


@pytest.fixture
def process(tmp_path: Path, database_url: str) -> Iterator[GatewayProcess]:
    """``dspark-gateway serve`` (its simulator behind it), a second's stalled body enough for a 408."""
    env = clean_env(database_url=database_url, public_requests_per_minute=100_000, body_idle_timeout_s=1)
    gateway = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        yield gateway
    finally:
        gateway.terminate()
        gateway.wait(timeout_s=30)


def test_unauthenticated_and_authenticated_floods_of_tiny_json_values_cost_nothing(process, make_key) -> None:
    """A 20 MiB body of tiny arrays to ``POST /admin/keys`` without a key (FastAPI parsed it before the
    401: 2.5 s of a stalled loop, +520 MiB), and a 30 MiB chat body of millions of values with a client
    key (22 s, 3.2 GB): a 401 and a 413 now, as soon as the headers or the first MiBs tell."""
    key = make_key("flooder")
    tiny_arrays = b'{"name":"x","metadata":{"a":[' + b"[]," * (7 * 2**20) + b"[]]}}"
    tiny_values = b'{"model":"%s","messages":[{"role":"user","content":"hi"}],"x":[' % MODEL.encode()
    tiny_values += b"0," * (15 * 2**20) + b"0]}"
    before = process.rss_bytes()
    with HealthWatch(process.url) as watch:
        admin = send_raw(process.port, post_head("/admin/keys", len(tiny_arrays)), tiny_arrays)
        chat = send_raw(process.port, post_head("/v1/chat/completions", len(tiny_values), key), tiny_values)
    grown_mib = (process.rss_bytes() - before) / 2**20
    assert admin.startswith(b"HTTP/1.1 401") and chat.startswith(b"HTTP/1.1 413"), (admin, chat)
    assert grown_mib < 64, f"RSS grew {grown_mib:.0f} MiB"
    assert watch.answers and watch.longest < HEALTH_BOUND_S, f"/health took {watch.longest * 1000:.0f} ms"


def test_a_body_that_stops_or_trickles_is_a_408(process, make_key) -> None:
    """Half a body, then silence: the gateway stops waiting after GATEWAY_BODY_IDLE_TIMEOUT_S (here 1 s)
    instead of holding the connection and its buffers for good; a body dripping a byte every 0.3 s
    (never idle that long) is cut once it has taken that long below 1 KiB/s."""
    key = make_key("staller")
    with socket.create_connection(("127.0.0.1", process.port), timeout=10) as sock:
        sock.sendall(post_head("/v1/chat/completions", 1000, key) + b'{"model": "')
        started = time.monotonic()
        status = sock.recv(65536).split(b"\r\n", 1)[0]
        waited = time.monotonic() - started
    assert status.startswith(b"HTTP/1.1 408") and 0.9 < waited < 5, (status, waited)
    with socket.create_connection(("127.0.0.1", process.port), timeout=10) as sock:
        sock.sendall(post_head("/v1/chat/completions", 1000, key))
        sock.settimeout(0.3)
        started, answer = time.monotonic(), b""
        while not answer and time.monotonic() - started < 10:
            with contextlib.suppress(OSError):
                sock.sendall(b" ")
            with contextlib.suppress(TimeoutError):
                answer = sock.recv(65536)
        sock.settimeout(5)
        while b"slower than" not in answer and (more := sock.recv(65536)):
            answer += more
    assert answer.startswith(b"HTTP/1.1 408") and b"slower than" in answer, answer


def test_a_connection_cap_and_a_keep_alive_timeout(tmp_path: Path, database_url: str) -> None:
    """Idle connections held open forever once took memory without bound: past
    GATEWAY_MAX_CONNECTIONS the server answers 503, and an idle keep-alive connection is closed after
    GATEWAY_KEEP_ALIVE_TIMEOUT_S."""
    env = clean_env(database_url=database_url, max_connections=8, keep_alive_timeout_s=1)
    gateway = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as kept:
            kept.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            response = b""
            while b'{"status":"ok"}' not in response:  # the whole answer, then the connection stays idle
                response += kept.recv(65536)
            assert response.startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            assert kept.recv(65536) == b""  # closed by the server
            assert time.monotonic() - started < 5
        idle = [socket.create_connection(("127.0.0.1", gateway.port), timeout=10) for _ in range(8)]
        try:
            time.sleep(0.2)
            assert httpx.get(gateway.url + "/health", timeout=10).status_code == 503
        finally:
            for sock in idle:
                sock.close()
        wait_until(
            lambda: httpx.get(gateway.url + "/health", timeout=10).status_code == 200, what="room again"
        )
    finally:
        gateway.terminate()
        gateway.wait(timeout_s=30)


@pytest.fixture
def stack(start_sim, start_gateway, make_key):
    """A gateway in front of the simulator, ``stack(**settings)``; keys: client, admin."""

    def build(**settings: object):
        gateway = start_gateway(start_sim().url, **settings)
        return gateway, make_key("client"), make_key("ops", scopes=["admin"])

    return build


def chat(gateway, key: str, **fields: object) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={**CHAT, **fields},
        headers={"Authorization": f"Bearer {key}"},
    )


def test_n_and_backend_fields_are_refused_unless_the_key_may(stack, make_key) -> None:
    """``n: 64`` reached the backend as 64 sequences on one slot; vLLM's scheduling, template and KV
    fields passed through verbatim, and template variables a prompt is rendered from. Now: 400 naming
    the field, unless the key has ``backend_fields``."""
    gateway, key, _ = stack()
    trusted = make_key("bench", scopes=["backend_fields"])
    fields = [
        ("n", 64), ("priority", -10), ("request_id", "x"), ("chat_template", "{{ 1 }}"),
        ("kv_transfer_params", {}), ("vllm_xargs", {}), ("logits_processors", ["os.system"]),
        ("cache_salt", "s"), ("prompt_logprobs", 20),
    ]  # fmt: skip
    refused = {field: chat(gateway, key, **{field: value}) for field, value in fields}
    in_template = chat(gateway, key, chat_template_kwargs={"chat_template": "x"})
    refused["chat_template_kwargs.chat_template"] = in_template
    unsized = [{"role": "user", "content": "word " * 100_000}]  # a prompt admission never sized
    refused["chat_template_kwargs.messages"] = chat(gateway, key, chat_template_kwargs={"messages": unsized})
    batch = {"model": MODEL, "prompt": ["a"] * 64, "max_tokens": 4}  # 64 prompts: 64 sequences
    auth = {"Authorization": f"Bearer {key}"}
    refused["prompt"] = httpx.post(gateway.url + "/v1/completions", json=batch, headers=auth)
    for field, response in refused.items():
        assert response.status_code == 400, (field, response.text)
        assert response.json()["error"] | {"message": ""} == {
            "message": "", "type": "invalid_request_error", "param": field, "code": "unsupported_field"
        }  # fmt: skip
    assert chat(gateway, trusted, priority=0, cache_salt="s").status_code == 200
    assert chat(gateway, trusted, n=2).status_code == 400  # n is bounded for every key (GATEWAY_MAX_N)
    assert chat(gateway, key, n=1).status_code == 200


def test_deep_metadata_is_refused_and_a_deep_stored_row_breaks_no_listing(stack, database_url) -> None:
    """Metadata nested 300 levels made ``GET /admin/keys`` and ``GET /admin/audit`` answer 500, the
    audit one for good. Now it is a 400, and a row stored before the bounds is shown as unreadable."""
    gateway, _, admin = stack()
    headers = {"Authorization": f"Bearer {admin}"}
    deep: object = "x"
    for _ in range(300):
        deep = {"a": deep}
    body = json.dumps({"name": "deep", "metadata": deep})
    refused = httpx.post(gateway.url + "/admin/keys", content=body, headers=headers)
    assert refused.status_code in (400, 413), refused.text  # past the admin body's bounds
    wide = httpx.post(
        gateway.url + "/admin/keys", json={"name": "wide", "metadata": {"a": "x" * 5000}}, headers=headers
    )
    assert wide.status_code == 400 and wide.json()["error"]["param"] == "metadata", wide.text
    made = httpx.post(
        gateway.url + "/admin/keys", json={"name": "ok", "metadata": {"team": "a"}}, headers=headers
    )
    assert made.status_code == 201
    with sqlite3.connect(database_url.removeprefix("sqlite+aiosqlite:///")) as db:  # as an old version wrote
        db.execute("UPDATE api_keys SET metadata = ? WHERE name = 'ok'", (json.dumps(deep),))
        db.execute("UPDATE audit_log SET detail = ?", (json.dumps({"metadata": deep}),))
    listed = httpx.get(gateway.url + "/admin/keys", headers=headers)
    audit = httpx.get(gateway.url + "/admin/audit", headers=headers)
    assert listed.status_code == 200 and audit.status_code == 200, (listed.text, audit.text)
    [ok] = [k for k in listed.json()["data"] if k["name"] == "ok"]
    assert "unreadable" in ok["metadata"] and all("unreadable" in a["detail"] for a in audit.json()["data"])


def test_reserved_names_extreme_values_and_a_forged_forwarded_for(stack) -> None:
    """A key named ``jwt:alice`` or ``bootstrap-admin`` would pass for that identity in the audit trail
    and share its queue; extreme values made 500s; ``X-Forwarded-For`` from loopback set the audit's
    client address."""
    gateway, _, admin = stack()
    headers = {"Authorization": f"Bearer {admin}"}

    def post(body: dict, **extra: str) -> httpx.Response:
        return httpx.post(gateway.url + "/admin/keys", json=body, headers={**headers, **extra})

    for name in ("jwt:alice", "bootstrap-admin", "Bootstrap-x"):
        assert post({"name": name}).status_code == 400, name
    assert post({"name": "huge", "rpm": 2**63}).status_code == 400
    made = post({"name": "team"}, **{"X-Forwarded-For": "10.6.6.6"})
    assert made.status_code == 201
    rotate = httpx.post(
        f"{gateway.url}/admin/keys/{made.json()['id']}/rotate", json={"grace_s": 1e300}, headers=headers
    )
    assert rotate.status_code == 400, rotate.text
    for extreme in ("99999999999d", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):
        since = httpx.get(gateway.url + "/admin/usage", params={"since": extreme}, headers=headers)
        assert since.status_code == 400 and since.json()["error"]["param"] == "since", since.text
    [entry] = httpx.get(gateway.url + "/admin/audit", headers=headers).json()["data"]
    assert entry["client"] == "127.0.0.1"  # the peer, not the forged header
    assert (entry["actor"], entry["actor_kind"]) == ("ops", "key") and entry["actor_id"].startswith("key_")


def test_a_burst_of_one_key_cannot_overrun_its_tokens_per_minute(stack, make_key) -> None:
    """12 parallel requests of a ``tpm=100`` key all ran (360 tokens) when only the prompt was
    reserved. Each now reserves its prompt estimate and max_tokens: at most 100 a minute pass."""
    gateway, _, _ = stack()
    key = make_key("tight", tpm=100)
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(lambda _: chat(gateway, key, max_tokens=20).status_code, range(12)))
    assert statuses.count(200) <= 3 and set(statuses) <= {200, 429}, statuses


def test_key_guessing_and_public_route_floods_are_throttled_per_address(stack, make_key) -> None:
    """Failed authentications from one address: 429 with Retry-After once they pass the limit for
    every secret that never authenticated — a guess that is right included —, while a client whose
    key already worked from there (behind the same NAT as the guesser) goes on; the public routes
    answer an address a bounded number of times a minute."""
    gateway, key, _ = stack(auth_failures_per_minute=5, public_requests_per_minute=10)
    unseen = make_key("unseen")
    assert chat(gateway, key).status_code == 200
    guesses = [chat(gateway, "dsk-" + "A" * 43).status_code for _ in range(5)]
    assert guesses == [401] * 5
    throttled = chat(gateway, unseen)
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "too_many_failed_authentications"
    assert int(throttled.headers["Retry-After"]) >= 1
    assert chat(gateway, key).status_code == 200
    probes = [httpx.get(gateway.url + "/ready").status_code for _ in range(11)]
    assert probes[:10] == [200] * 10 and probes[10] == 429
    assert httpx.get(gateway.url + "/health").status_code == 200  # liveness is never throttled
