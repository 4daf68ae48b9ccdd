"""Every upstream fault ends cleanly: an OpenAI-shaped error (a status before any byte, a final
``data: {"error": ...}`` event after), the slot and queue back to zero, exactly one ledger row, and the
next request served. Real sockets throughout: the gateway under uvicorn in a thread, a raw asyncio
fake upstream (:mod:`tests.support.faulty_upstream`) that resets, stalls, talks nonsense or floods, and
raw-socket or httpx clients. (Keep-alive comments during a long silence without a read timeout are
covered by ``tests/gateway/test_slots_and_streams.py``.)
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.faulty_upstream import BIG_CHUNKS, BIG_TEXT, GOOD_CHUNKS, FaultyUpstream
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer, free_port

MODEL = "deepseek-v4-flash-0731"
#: The gateway against the fake: no counter scrapes around requests, no background /metrics polls, and
#: thinking off — the fake answers plain text, as a model does with thinking off, so each chunk goes on
#: as it comes (with thinking on, the first answers of an upstream not known yet wait for a reasoning
#: marker: tests/gateway/test_openai_shapes.py).
QUIET = {"spec_counters": "never", "backend_poll_s": 60.0, "default_thinking": "off"}


def chat(text: str, stream: bool, **extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": stream, **extra}


class Stack:
    """A gateway, a client key and an admin key; the checks every fault test ends with."""

    def __init__(self, gateway: ThreadedServer, key: str, admin: str) -> None:
        self.gateway = gateway
        self.url = gateway.url + "/v1/chat/completions"
        self.auth = {"Authorization": f"Bearer {key}"}
        self.admin = {"Authorization": f"Bearer {admin}"}

    def post(self, text: str, stream: bool = False, timeout: float = 10.0) -> httpx.Response:
        """One request; a stream's body is read whole (``response.text``)."""
        with httpx.Client(timeout=timeout) as client:
            response = client.post(self.url, json=chat(text, stream), headers=self.auth)
        return response

    def status(self) -> dict:
        response = httpx.get(self.gateway.url + "/admin/status", headers=self.admin, timeout=5)
        assert response.status_code == 200, response.text
        return response.json()

    def ledger_rows(self, request_id: str) -> list[dict]:
        response = httpx.get(self.gateway.url + "/admin/requests?limit=1000", headers=self.admin, timeout=5)
        return [row for row in response.json()["data"] if row["request_id"] == request_id]

    def settled(self, request_id: str, status: int) -> None:
        """Slots and queue back to zero, one ledger row with ``status``, and the next request served."""
        wait_until(
            lambda: self.status()["slots_in_use"] == 0 and self.status()["queue_depth"] == 0, what="idle"
        )
        wait_until(lambda: len(self.ledger_rows(request_id)) >= 1, what="ledger row")
        rows = self.ledger_rows(request_id)
        assert [row["status"] for row in rows] == [status]
        for stream in (False, True):
            ok = self.post("hello", stream)
            assert ok.status_code == 200, ok.text
            if stream:
                assert data_events(ok)[-1] == "[DONE]"
            else:
                assert ok.json()["choices"][0]["finish_reason"] == "stop"


def data_events(response: httpx.Response) -> list[str]:
    return [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]


def assert_openai_error(response: httpx.Response, statuses: tuple[int, ...], code: str) -> None:
    """An HTTP error in OpenAI shape: ``{"error": {message, type, param, code}}``, never a traceback."""
    assert response.status_code in statuses, (response.status_code, response.text)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["type"] and error["message"]
    assert "Traceback" not in response.text


def assert_stream_error(response: httpx.Response, code: str = "upstream_stream_error") -> list[dict]:
    """A 200 stream whose last event is an OpenAI error (no ``[DONE]``); returns the chunks before it."""
    assert response.status_code == 200
    events = data_events(response)
    assert "[DONE]" not in events and "Traceback" not in response.text
    error = json.loads(events[-1])["error"]
    assert error["code"] == code and error["type"] and error["message"]
    return [json.loads(e) for e in events[:-1]]


@pytest.fixture
def faulty() -> Iterator[FaultyUpstream]:
    upstream = FaultyUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def stack_on(start_gateway, make_key) -> Callable[..., Stack]:
    """``stack_on(upstream_url, **settings)``: a gateway in front of that upstream, with keys."""

    def build(upstream: str, **settings: object) -> Stack:
        gateway = start_gateway(upstream, **{**QUIET, **settings})
        return Stack(gateway, make_key("client"), make_key("ops", scopes=["admin"]))

    return build


def test_refused_connection_is_503_and_the_upstream_coming_back_is_served(stack_on) -> None:
    """A closed upstream port and no restart hold: 503 ``upstream_unavailable`` for stream and
    non-stream at once, the slot back, one ledger row per request (the hold itself:
    ``test_backend_restart.py``)."""
    port = free_port()
    stack = stack_on(f"http://127.0.0.1:{port}", upstream_restart_hold_s=0)
    responses = [stack.post("hi", stream) for stream in (False, True)]
    for response in responses:
        assert_openai_error(response, (503,), "upstream_unavailable")
    back = FaultyUpstream(port).start()
    try:
        # the refusals opened the backend's circuit: its cool-down (1 s), then a trial closes it
        served = lambda: stack.post("hello").status_code == 200  # noqa: E731
        wait_until(served, timeout_s=5, what="the circuit's trial served")
        for response in responses:
            stack.settled(response.headers["x-request-id"], 503)
    finally:
        back.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_reset_before_headers_is_an_error_status(stack_on, faulty, stream: bool) -> None:
    """The upstream reads the request, then answers with a TCP RST: an HTTP error status before any
    byte of the answer (the stream never started), not a 500 or a hang."""
    stack = stack_on(faulty.url)
    response = stack.post("fault:reset_before_headers", stream)
    assert_openai_error(response, (502, 503), "upstream_unavailable")
    stack.settled(response.headers["x-request-id"], response.status_code)


def test_reset_mid_stream_gives_the_chunks_then_an_error_event(stack_on, faulty) -> None:
    """RST after a few chunks: the client has every chunk sent, then a typed error event, then the end."""
    stack = stack_on(faulty.url)
    response = stack.post("fault:reset_mid_stream", stream=True)
    chunks = assert_stream_error(response)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == "".join(f"part{i} " for i in range(GOOD_CHUNKS))
    stack.settled(response.headers["x-request-id"], 502)


@pytest.mark.parametrize("stream", [False, True])
def test_stall_before_headers_is_504_with_a_read_timeout(stack_on, faulty, stream: bool) -> None:
    """No byte for longer than ``upstream_read_timeout_s``: 504 ``upstream_timeout``, slot freed."""
    stack = stack_on(faulty.url, upstream_read_timeout_s=1.0)
    started = time.monotonic()
    response = stack.post("fault:stall_before_headers", stream)
    assert time.monotonic() - started < 5
    assert_openai_error(response, (504,), "upstream_timeout")
    stack.settled(response.headers["x-request-id"], 504)


def test_stall_mid_stream_ends_the_stream_with_an_error_event(stack_on, faulty) -> None:
    """Silence after a few chunks longer than ``upstream_read_timeout_s``: the stream ends with an
    error event (no endless wait), the slot is freed."""
    stack = stack_on(faulty.url, upstream_read_timeout_s=1.0)
    response = stack.post("fault:stall_mid_stream", stream=True)
    assert len(assert_stream_error(response, "upstream_timeout")) == GOOD_CHUNKS
    stack.settled(response.headers["x-request-id"], 504)


@pytest.mark.parametrize("fault", ["bad_json", "not_object", "long_line"])
def test_malformed_sse_ends_the_stream_with_an_error_event(stack_on, faulty, fault: str) -> None:
    """A data line that is not JSON, JSON that is not an object, or an endless line (past the
    decoder's bound, 2 x ``max_body_bytes`` = 2 MiB here): the good chunks, then an error event
    instead of garbage, a hang, unbounded memory or a 500."""
    stack = stack_on(faulty.url, max_body_bytes=1 << 20)
    response = stack.post(f"fault:{fault}", stream=True)
    chunks = assert_stream_error(response)
    assert len(chunks) == GOOD_CHUNKS and all(isinstance(c, dict) for c in chunks)
    stack.settled(response.headers["x-request-id"], 502)


@pytest.mark.parametrize("fault", ["status_500_json", "status_500_html"])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_500_is_relayed_in_openai_shape(stack_on, faulty, fault: str, stream: bool) -> None:
    """An upstream 500 keeps its status (as ``test_upstream_error_status_is_relayed_in_openai_shape``)
    in OpenAI shape: vLLM's message when it sent JSON, a generic one for an HTML page."""
    stack = stack_on(faulty.url)
    response = stack.post(f"fault:{fault}", stream)
    assert_openai_error(response, (500,), "upstream_error")
    message = response.json()["error"]["message"]
    assert message == ("EngineCore died" if fault.endswith("json") else "The model server answered HTTP 500.")
    stack.settled(response.headers["x-request-id"], 500)


def rss_bytes() -> int:
    """Resident set size of this process (gateway and simulator run in its threads)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_a_slow_client_is_backpressured_not_buffered(stack_on, faulty) -> None:
    """A client that stops reading a ~170 MB stream: the gateway stops pulling from upstream (which
    pauses) instead of buffering, so memory grows by far less than the stream (what is left is socket
    read-ahead, independent of the stream's size); when the client reads again it gets all of it,
    ending with ``[DONE]``. The fake upstream, not the simulator, makes the volume: relaying ~64 KB
    chunks costs the in-process gateway seconds where 80 MB of small simulator chunks cost minutes."""
    stack = stack_on(faulty.url)
    upstream_total = BIG_CHUNKS * len(BIG_TEXT)
    body = json.dumps(chat("fault:big", True)).encode()
    before = rss_bytes()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", stack.gateway.port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        + f"authorization: {stack.auth['Authorization']}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = b""
    while b"\r\n\r\n" not in received:  # the response head
        part = sock.recv(4096)
        assert part, "no response"
        received += part
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    request_id = received.split(b"x-request-id: ", 1)[1].split(b"\r\n", 1)[0].decode()
    sent = -1
    while sent != faulty.sent:  # until the upstream is stuck: every buffer on the way is full
        sent = faulty.sent
        time.sleep(0.5)
    growth, paused_at = rss_bytes() - before, faulty.sent
    assert faulty.sent < upstream_total / 2, "the upstream was never paused"
    total, tail = len(received), received
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # now read it all, quickly
    sock.settimeout(30)
    while not tail.endswith(b"\r\n0\r\n\r\n"):
        part = sock.recv(1 << 20)
        assert part, "the stream ended without its last chunk"
        total += len(part)
        tail = (tail + part)[-4096:]
    sock.close()
    assert b"data: [DONE]\n\n" in tail and b'"error"' not in tail
    assert total > upstream_total  # all of it (the reasoning went out under both field names)
    assert growth < total / 4, (growth, total)
    print(
        f"slow client: {total / 1e6:.0f} MB stream, upstream paused after {paused_at / 1e6:.0f} MB,",
        f"RSS +{growth / 1e6:.0f} MB",
    )
    stack.settled(request_id, 200)
