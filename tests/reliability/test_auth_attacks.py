"""Auth attacks on a real gateway in front of a recording simulator: every refused request is refused in
OpenAI error shape (or by the HTTP parser, before the app) and never reaches the upstream."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from jose import jwt

from dspark_sim import SimConfig, create_sim_app
from gateway.auth import Authenticator, KeyStore
from gateway.auth.secrets import hash_key
from tests.conftest import FAST_SIM
from tests.support.probes import START_TIMEOUT_S, wait_until
from tests.support.servers import ThreadedServer, free_port

MODEL = "deepseek-v4-flash-0731"
CHAT = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
POLLS = {("GET", "/metrics"), ("GET", "/health")}  # the gateway's own backend poll and /ready probe
SECRET = "attack-secret-0123456789abcdef0123456789"
CLI = str(Path(sys.executable).parent / "dspark-gateway")


class Recorder:
    """Pure ASGI wrapper around the simulator: every HTTP request it receives, headers included."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str, dict[bytes, bytes]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append((scope["method"], scope["raw_path"].decode("latin-1"), dict(scope["headers"])))
        await self.app(scope, receive, send)

    def calls(self) -> list[tuple[str, str, dict[bytes, bytes]]]:
        """What reached the upstream besides the gateway's own polls."""
        return [c for c in self.seen if (c[0], c[1]) not in POLLS]


class Stack(NamedTuple):
    upstream: Recorder
    sim: ThreadedServer
    gateway: ThreadedServer
    key: str


@pytest.fixture
def stack_factory(start_gateway, make_key):
    """``stack(**Settings fields)``: a recording simulator, a gateway in front of it, a client key."""
    sims: list[ThreadedServer] = []

    def build(**settings: Any) -> Stack:
        recorder = Recorder(create_sim_app(SimConfig(**FAST_SIM)))
        sims.append(sim := ThreadedServer(recorder).start())
        gateway = start_gateway(sim.url, backend_poll_s=60, **settings)
        return Stack(recorder, sim, gateway, make_key("client"))

    yield build
    for sim in sims:
        sim.stop()


@pytest.fixture
def stack(stack_factory) -> Stack:
    return stack_factory()


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self, status: int, code: str | None = None) -> dict[str, Any]:
        """The OpenAI error object, after checking status, shape and (if given) code."""
        assert self.status == status, (self.status, self.body[:300])
        error = json.loads(self.body)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert code is None or error["code"] == code, error
        return error


def raw(port: int, path: bytes = b"/v1/chat/completions", headers: bytes = b"", method: bytes = b"POST",
        host: bytes = b"Host: gateway.test\r\n", body: bytes = CHAT.encode()) -> Answer:  # fmt: skip
    """One request as raw bytes over a socket (no client-side normalisation of path or headers)."""
    body = body if method == b"POST" else b""
    head = b"%s %s HTTP/1.1\r\n%s%sContent-Type: application/json\r\nContent-Length: %d\r\n" % (
        method, path, host, headers, len(body))  # fmt: skip
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + b"Connection: close\r\n\r\n" + body)
        data = b""
        with contextlib.suppress(ConnectionResetError):  # a refused request may be cut after the answer
            while chunk := sock.recv(65536):
                data += chunk
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    fields = dict(line.split(":", 1) for line in lines[1:])
    return Answer(int(lines[0].split()[1]), {k.lower(): v.strip() for k, v in fields.items()}, payload)


def bearer(key: str) -> bytes:
    return b"Authorization: Bearer " + key.encode() + b"\r\n"


def test_malformed_credentials_are_refused_before_the_upstream(stack) -> None:
    """Missing/empty/foreign-scheme/extra-token/embedded-whitespace/10,000-char credentials are 401 in
    OpenAI shape; bytes HTTP forbids in a header (LF, folding, NUL, VT) are the parser's plain 400; a
    100 KB header is 431; duplicated Authorization (or x-priority, x-max-wait-s) is 400. None reaches
    the upstream. Per RFC 7235 the scheme is case-insensitive and per RFC 6750 ``1*SP`` separates it,
    and SP/HTAB around the field value is not part of it (RFC 9110 5.5): those forms of a valid key
    work (and are counted)."""
    up, _, gw, key = stack
    k = key.encode()
    refused_401 = [
        b"",
        b"Authorization: Bearer \r\n",
        b"Authorization: Basic " + base64.b64encode(k + b":") + b"\r\n",
        b"Authorization: Bearer a b\r\n",
        b"Authorization: Bearer " + k + b" " + k + b"\r\n",
        b"Authorization: Bearer\t" + k + b"\r\n",
        b"Authorization: Bearer " + k[:12] + b"\t" + k[12:] + b"\r\n",
        b"Authorization: Bearer " + k + b"\xa0\r\n",  # NBSP is not HTTP whitespace
        b"Authorization: Bearer dsk-" + b"A" * 9996 + b"\r\n",
        b"Authorization: " + k + b"\r\n",
        b"X-Api-Key: " + k + b"\r\n",
    ]
    for headers in refused_401:
        answer = raw(gw.port, headers=headers)
        assert answer.error(401, "invalid_api_key")["type"] == "authentication_error", headers[:60]
        assert answer.headers["www-authenticate"].startswith("Bearer")
    for bad_bytes in [b"\n", b"\r\n ", b"\x00", b"\x0b"]:
        answer = raw(gw.port, headers=b"Authorization: Bearer " + k[:12] + bad_bytes + k[12:] + b"\r\n")
        assert answer.status == 400, bad_bytes  # uvicorn's parser: the app never sees the request
    for huge in [
        b"X-Junk: " + b"a" * 100_000 + b"\r\n",
        b"Authorization: Bearer " + b"a" * 100_000 + b"\r\n",
    ]:
        raw(gw.port, headers=bearer(key) + huge).error(431, "request_headers_too_large")
    for twice in [
        bearer(key) + b"Authorization: Bearer dsk-x\r\n",
        b"Authorization: Bearer dsk-x\r\n" + bearer(key),
        bearer(key) + b"x-priority: interactive\r\nx-priority: batch\r\n",  # which would count?
        bearer(key) + b"x-max-wait-s: 5\r\nX-Max-Wait-S: 500\r\n",
    ]:
        raw(gw.port, headers=twice).error(400, "invalid_request")
    assert up.calls() == []
    accepted = [b"bearer " + k, b"BEARER " + k, b"Bearer   " + k, b"  Bearer " + k + b" \t"]
    for value in accepted:
        assert raw(gw.port, headers=b"Authorization: " + value + b"\r\n").status == 200, value
    assert [(m, p) for m, p, _ in up.calls()] == [("POST", "/v1/chat/completions")] * len(accepted)


def test_ambiguous_anthropic_credentials_are_refused(stack) -> None:
    """On the Messages route a repeated ``x-api-key`` is 400 (as a repeated ``Authorization``), and an
    ``x-api-key`` beside a Bearer token naming another key is 401 — both in Anthropic's error shape —
    instead of one silently winning; the same key in both is just that key."""
    up, _, gw, key = stack
    k = key.encode()
    body = json.dumps({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    post = lambda headers: raw(gw.port, b"/v1/messages", headers, body=body.encode())  # noqa: E731
    refused = {
        b"X-Api-Key: " + k + b"\r\nX-Api-Key: dsk-x\r\n": (400, "invalid_request_error"),
        b"X-Api-Key: dsk-x\r\nX-Api-Key: " + k + b"\r\n": (400, "invalid_request_error"),
        b"X-Api-Key: " + k + b"\r\n" + bearer("dsk-" + "x" * 43): (401, "authentication_error"),
        b"X-Api-Key: dsk-" + b"x" * 43 + b"\r\n" + bearer(key): (401, "authentication_error"),
    }
    for headers, (status, kind) in refused.items():
        answer = post(headers)
        assert answer.status == status, (headers, answer.body[:200])
        assert json.loads(answer.body)["error"]["type"] == kind
    assert up.calls() == []
    assert post(b"X-Api-Key: " + k + b"\r\n" + bearer(key)).status == 200
    assert [(m, p) for m, p, _ in up.calls()] == [("POST", "/v1/messages")]


def test_the_upstream_gets_the_gateways_request_id_never_the_clients(stack) -> None:
    """A client's ``x-request-id`` could name another client's sequence in vLLM (or forge a ledger
    entry's): the upstream gets the gateway's own id, the one the answer carries."""
    up, _, gw, key = stack
    answer = raw(gw.port, headers=bearer(key) + b"x-request-id: victim-sequence-1\r\n")
    assert answer.status == 200 and answer.headers["x-request-id"].startswith("req-")
    [(_, _, headers)] = up.calls()
    assert headers[b"x-request-id"].decode() == answer.headers["x-request-id"]


Results = list[tuple[float, int]]


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def hammer(url: str, key: str, revoke: Callable[[], Awaitable[None]],
                 ready: Callable[[Results], bool], done: Callable[[Results, float], bool],
                 then: Callable[[], None] = lambda: None) -> tuple[Results, float, float]:  # fmt: skip
    """Six tasks send ``GET /v1/models`` with ``key`` back to back; once ``ready(results)``, ``revoke()``
    runs, then ``then()``; they stop when ``done(results, returned)``. Returns ``[(start time, status)]``
    and the monotonic times just before (``called``) and after (``returned``) ``revoke()``."""
    results: Results = []
    stop = asyncio.Event()
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:

        async def worker() -> None:
            while not stop.is_set():
                started = time.monotonic()
                results.append((started, (await client.get("/v1/models")).status_code))

        workers = [asyncio.create_task(worker()) for _ in range(6)]
        await until(lambda: ready(results), "the key in use")
        called = time.monotonic()
        await revoke()
        returned = time.monotonic()
        then()
        await until(lambda: done(results, returned), "requests after the revoke")
        stop.set()
        await asyncio.gather(*workers)
    return results, called, returned


def test_a_key_revoked_through_the_admin_api_admits_nothing_started_after_the_call(
    stack_factory, make_key, monkeypatch
) -> None:
    """A key in use by six tasks is revoked through the admin API while their lookup (one store query
    that all six share), which read the key as active before the revoke, is held until the revoke
    call has returned (a slow database): those requests may pass, but the stale record must not be
    cached over the invalidation — no request started after the call returned is admitted. Admitted
    requests reached the upstream once."""
    find_by_hash, released, held = KeyStore.find_by_hash, threading.Event(), []
    lookup, waiting = Authenticator._lookup, []

    async def held_find_by_hash(self: KeyStore, key_hash: str, now: Any = None) -> Any:
        record = await find_by_hash(self, key_hash, now)
        if record is not None and record.name == "victim" and not released.is_set():
            held.append(record)
            await asyncio.to_thread(released.wait, 15)  # read before the revoke, answered after it
        return record

    async def counted_lookup(self: Authenticator, key_hash: str) -> Any:  # the six requests all waiting
        waiting.append(key_hash)
        return await lookup(self, key_hash)

    monkeypatch.setattr(KeyStore, "find_by_hash", held_find_by_hash)
    monkeypatch.setattr(Authenticator, "_lookup", counted_lookup)
    up, _, gw, _ = stack_factory()  # the default cache TTL (1 s)
    admin = {"Authorization": f"Bearer {make_key('root', scopes=['admin'])}"}
    victim = make_key("victim")

    async def revoke() -> None:
        async with httpx.AsyncClient(base_url=gw.url, headers=admin, timeout=10) as client:
            assert (await client.post("/admin/keys/victim/revoke")).status_code == 200

    results, called, returned = asyncio.run(
        hammer(gw.url, victim, revoke, then=released.set,
               ready=lambda _: len(held) == 1 and len(waiting) == 6,
               done=lambda results, returned: sum(started > returned for started, _ in results) >= 12)
    )  # fmt: skip
    assert {status for _, status in results} <= {200, 401}
    assert sum(status == 200 for started, status in results if started < called) == 6  # the held ones
    late = [status for started, status in results if started > returned]
    assert set(late) == {401}, late
    assert len([c for c in up.calls() if c[1] == "/v1/models"]) == 6


def test_a_key_revoked_by_another_process_stops_within_the_cache_ttl(stack_factory, revoke_key) -> None:
    """Revoked directly in the database (as the CLI on another host would), a key in use by six tasks is
    refused for every request started ``GATEWAY_KEY_CACHE_TTL_S`` after the revoke committed."""
    ttl = 0.3
    # the failures would soon be throttled to 429s for this address (test_hardening.py): not here
    up, _, gw, key = stack_factory(key_cache_ttl_s=ttl, auth_failures_per_minute=None)

    async def revoke() -> None:
        await asyncio.to_thread(revoke_key, "client")

    results, called, returned = asyncio.run(
        hammer(gw.url, key, revoke, ready=lambda results: sum(s == 200 for _, s in results) >= 6,
               done=lambda results, returned: sum(t >= returned + ttl for t, _ in results) >= 12)
    )  # fmt: skip
    assert {status for _, status in results} <= {200, 401}
    assert any(status == 200 for started, status in results if started < called)
    late = [status for started, status in results if started >= returned + ttl]
    assert set(late) == {401}, late
    last_admitted = max(started for started, status in results if status == 200)
    assert last_admitted < returned + ttl
    assert len([c for c in up.calls() if c[1] == "/v1/models"]) == sum(s == 200 for _, s in results)


def test_path_tricks_reach_only_the_exact_allow_listed_routes(stack) -> None:
    """Dot segments (plain and percent-encoded), doubled or trailing slashes, vLLM-only routes, matrix
    parameters, case changes and an encoded NUL are 404/405 in OpenAI shape and reach nothing
    upstream (a trailing slash is not redirected). Spellings that decode to an allow-listed route are
    forwarded to that exact path only, without the client's query string. ``/metrics`` is the
    gateway's own exposition, never vLLM's."""
    up, sim, gw, key = stack
    for method, path in [
        (b"GET", b"/v1/../tokenize"), (b"POST", b"/v1/%2e%2e/tokenize"), (b"GET", b"/v1/%2E%2E/metrics"),
        (b"POST", b"//v1/chat/completions"), (b"POST", b"/v1//chat/completions"),
        (b"POST", b"/v1/chat/completions/"), (b"POST", b"/v1/./chat/completions"),
        (b"POST", b"/invocations"), (b"POST", b"/tokenize"), (b"POST", b"/detokenize"),
        (b"POST", b"/pooling"), (b"POST", b"/v1/chat/completions;x"), (b"POST", b"/V1/CHAT/COMPLETIONS"),
        (b"POST", b"/v1/chat/completions%00"), (b"POST", b"/v1/chat/completions%2500"),
        (b"POST", b"/metrics"), (b"GET", b"/v1/chat/completions"), (b"POST", b"/v1/models"),
    ]:  # fmt: skip
        answer = raw(gw.port, path, bearer(key), method)
        assert answer.status in (404, 405), (path, answer)
        answer.error(answer.status, "not_found" if answer.status == 404 else "method_not_allowed")
        assert "location" not in answer.headers
    assert up.calls() == []
    aliases = [b"/v1/chat%2Fcompletions", b"/v1/chat/%63ompletions", b"/v1/chat/completions?x=../tokenize",
               b"http://127.0.0.1:1/v1/chat/completions"]  # fmt: skip
    for path in aliases:
        assert raw(gw.port, path, bearer(key)).status == 200, path
    assert [(m, p) for m, p, _ in up.calls()] == [("POST", "/v1/chat/completions")] * len(aliases)
    ours = raw(gw.port, b"/metrics", method=b"GET")
    theirs = httpx.get(sim.url + "/metrics").text
    assert ours.status == 200 and b"gateway_slots_total" in ours.body and b"vllm:" not in ours.body
    assert "vllm:" in theirs and "gateway_slots_total" not in theirs


def test_host_header_games_change_nothing_upstream(stack) -> None:
    """Whatever Host or X-Forwarded-* the client sends, the gateway forwards only to its configured
    upstream, with the upstream's own Host and none of the client's forwarding or credential headers;
    a missing Host (HTTP/1.1) or two Host headers are 400 in OpenAI shape (RFC 9112 3.2) and reach
    nothing; a forged X-Forwarded-For from loopback grants nothing."""
    up, sim, gw, key = stack
    upstream_host = sim.url.removeprefix("http://").encode()
    spoofs = [b"Host: 127.0.0.1:8000\r\n", b"Host: evil.example\r\n",
              b"Host: gateway.test\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-For: 10.6.6.6\r\n"
              b"X-Forwarded-Proto: https\r\nForwarded: for=10.6.6.6;host=evil.example\r\n"]  # fmt: skip
    for host in spoofs:
        assert raw(gw.port, headers=bearer(key), host=host).status == 200, host
    calls = up.calls()
    assert len(calls) == len(spoofs)
    for _, path, headers in calls:
        assert path == "/v1/chat/completions" and headers[b"host"] == upstream_host
        assert not {b"authorization", b"x-forwarded-host", b"x-forwarded-for", b"forwarded"} & set(headers)
    for host in [b"", b"Host: a.example\r\nHost: b.example\r\n"]:
        raw(gw.port, headers=bearer(key), host=host).error(400, "invalid_request")
    forged = raw(gw.port, headers=b"X-Forwarded-For: 127.0.0.1\r\nX-Real-IP: 127.0.0.1\r\n")
    forged.error(401, "invalid_api_key")
    assert len(up.calls()) == len(spoofs)


def test_admin_routes_refuse_client_keys_and_bad_tokens(stack_factory, make_key) -> None:
    """Admin routes not covered elsewhere answer 403 to a client key and change nothing; gateway
    tokens (HS256) signed with a wrong secret, alg=none (any spelling), another HMAC size, expired,
    for another audience or issuer, or without ``exp``/``aud`` are 401; none of it reaches upstream."""
    up, _, gw, key = stack_factory(jwt_secret=SECRET)
    make_key("target")
    client = httpx.Client(base_url=gw.url)
    for method, path in [("GET", "/admin/usage"), ("GET", "/admin/requests"), ("GET", "/admin/keys/target"),
                         ("PATCH", "/admin/keys/target"), ("POST", "/admin/keys/target/rotate"),
                         ("POST", "/admin/keys/target/revoke"),
                         ("DELETE", "/admin/keys/target")]:  # fmt: skip
        answer = client.request(method, path, json={}, headers={"Authorization": f"Bearer {key}"})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "admin_required", path
    now = int(time.time())
    good = {"iss": "dspark-gateway", "aud": "dspark-gateway", "sub": "mallory", "scope": "admin",
            "iat": now, "exp": now + 300}  # fmt: skip

    def unsigned(alg: str) -> str:
        parts = [{"alg": alg, "typ": "JWT"}, good]
        return (
            ".".join(base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=").decode() for p in parts)
            + "."
        )

    assert client.get(
        "/admin/status", headers={"Authorization": f"Bearer {jwt.encode(good, SECRET)}"}
    ).is_success
    bad = [jwt.encode(good, "not-the-secret-0123456789abcdef"), unsigned("none"), unsigned("None"),
           unsigned("NONE"), jwt.encode(good, SECRET, algorithm="HS512"),
           jwt.encode({**good, "exp": now - 30, "iat": now - 600}, SECRET),
           jwt.encode({**good, "aud": "someone-else"}, SECRET), jwt.encode({**good, "iss": "evil"}, SECRET),
           jwt.encode({k: v for k, v in good.items() if k != "exp"}, SECRET),
           jwt.encode({k: v for k, v in good.items() if k != "aud"}, SECRET)]  # fmt: skip
    for index, token in enumerate(bad):
        for method, path in [("GET", "/admin/status"), ("POST", "/admin/keys")]:
            answer = client.request(
                method, path, json={"name": "minted"}, headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 401, (index, path, answer.text)
            assert answer.json()["error"]["code"] == "invalid_api_key"
    owner = {"Authorization": f"Bearer {make_key('root', scopes=['admin'])}"}
    keys = client.get("/admin/keys", headers=owner).json()["data"]
    assert {(k["name"], k["status"]) for k in keys} >= {("target", "active")}
    assert "minted" not in {k["name"] for k in keys}
    assert up.calls() == []
    client.close()


def test_cors_is_off_by_default(stack) -> None:
    """No route answers with ``Access-Control-Allow-*``: not a preflight, not a GET or POST with an
    Origin, authenticated or not, so browsers on other origins cannot read the gateway's answers."""
    _, _, gw, key = stack
    origin = b"Origin: https://evil.example\r\n"
    preflight = (
        origin + b"Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n"
    )
    answers = [
        raw(gw.port, path, preflight, b"OPTIONS") for path in (b"/v1/chat/completions", b"/admin/keys")
    ]
    answers += [raw(gw.port, b"/v1/models", origin + bearer(key), b"GET"),
                raw(gw.port, headers=origin + bearer(key)), raw(gw.port, b"/health", origin, b"GET"),
                raw(gw.port, b"/v1/models", origin, b"GET")]  # fmt: skip
    assert [a.status for a in answers] == [405, 405, 200, 200, 200, 401]
    for answer in answers:
        assert not [h for h in answer.headers if h.startswith("access-control-")], answer.headers


RUN_VERBOSE = (
    "import logging, runpy, sys; logging.basicConfig(level=logging.DEBUG); "
    "logging.getLogger('sqlalchemy').setLevel(logging.DEBUG); "  # SQL, parameters and rows too
    "sys.argv = [sys.argv[1], *sys.argv[2:]]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def test_canaries_never_reach_logs_or_the_database(make_key, database_url, tmp_path: Path) -> None:
    """``dspark-gateway serve`` as a child process (embedded simulator; every Python logger, SQLAlchemy's
    too, at DEBUG; uvicorn's access log on): a canary prompt and a canary key — valid and invalid,
    as bearer, as ``?api_key=``, as ``X-Api-Key``, in succeeding, 400, 403 and 401 requests — appear
    neither in its output nor in any byte of the SQLite files, while the key's hash and the request
    rows do."""
    prompt = "CANARY-PROMPT-4e1f9b2d"
    valid = make_key("canary")
    invalid = "dsk-CANARYinvalid" + "Q" * 26
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(GATEWAY_DATABASE_URL=database_url, GATEWAY_LEDGER_FLUSH_S="0.2")
    log = (tmp_path / "gateway.log").open("wb")
    process = subprocess.Popen([sys.executable, "-c", RUN_VERBOSE, CLI, "serve", "--port", str(port)],
                               env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _up(url), timeout_s=START_TIMEOUT_S, what="the gateway subprocess")
        chat = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
        broken = f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": "{prompt}'
        invalid_text = {"model": MODEL, "prompt": prompt, "max_tokens": "x" + prompt}
        answers = []
        with httpx.Client(base_url=url, timeout=30) as client:
            for key in (valid, invalid):
                auth = {"Authorization": f"Bearer {key}"}
                answers += [
                    client.post("/v1/chat/completions", json=chat, headers=auth),
                    client.post("/v1/chat/completions", json={**chat, "stream": True}, headers=auth),
                    client.post("/v1/chat/completions", content=broken, headers=auth),
                    client.post("/v1/completions", json=invalid_text, headers=auth),
                    client.get("/admin/keys", headers=auth),
                    client.get("/v1/models", params={"api_key": key}),
                    client.post("/v1/chat/completions", params={"api_key": key}, json=chat),
                    client.get("/v1/models", headers={"X-Api-Key": key}),
                ]  # fmt: skip
        assert [a.status_code for a in answers] == [200, 200, 400, 400, 403, 401, 401, 401] + [401] * 8
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=START_TIMEOUT_S) == 0  # a drain, then a flush: bounded, not timed
        log.close()
    output = (tmp_path / "gateway.log").read_bytes()
    assert b"GET /v1/models" in output and b"401" in output and b"DEBUG" in output  # it did log, verbosely
    path = Path(database_url.split(":///", 1)[1])
    with contextlib.closing(sqlite3.connect(path)) as db:  # the right file: it holds the ledger rows
        assert db.execute("SELECT count(*) FROM usage_ledger").fetchone()[0] >= 2
    stored = b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))  # -wal, -shm
    assert hash_key(valid).encode() in stored  # the key is there, as its hash only
    for canary in (prompt, valid, invalid, valid[4:], invalid[4:]):
        assert canary.encode() not in output, canary
        assert canary.encode() not in stored, canary


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
