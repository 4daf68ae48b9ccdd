"""A client that stops reading its stream does not hold the backend (DESIGN.md §9).

A real gateway and simulator on loopback, the simulator as a process of its own: it writes megabytes
as fast as it can, and as a thread of the test's process it held the GIL the test's probes need (a
``/metrics`` scrape took over 5 s on a loaded machine). The stalled clients are raw sockets with a
small receive buffer that send their request, read the response head and then read nothing. The upstream is
read into the stream's buffer as fast as the backend produces, so the slot goes to the next request
when the backend finishes; a client that reads nothing while its buffer is full is cut after
``GATEWAY_CLIENT_WRITE_TIMEOUT_S``, its upstream aborted, and its record ends ``client_slow``; so is
one that reads nothing for as long once the backend has finished.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until
from tests.support.sim_process import SimProcess
from tests.support.stalled_client import stalled_request

MODEL = "deepseek-v4-flash-0731"
#: A stalled stream's prompt: its answer is ~3 MB of SSE from the simulator (0.2 s of its decode).
LONG = "count from 1 to 20000"
#: A prompt whose answer (~15 MB of SSE) is more than every buffer between the backend and a stalled
#: client holds: the gateway's stream buffer, a 4 KB receive buffer, and a send buffer the kernel may
#: grow to ``net.ipv4.tcp_wmem``'s maximum (4 MB by default) — so the gateway's writes block for sure.
LONGER = "count from 1 to 100000"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimProcess]:
    """A simulator process: two slots, 100,000 tokens/s, no prefill time."""
    process = SimProcess(
        tmp_path / "sim.log", "--slots", "2", "--decode-tps", "100000", "--ttft-base-s", "0",
        "--prefill-tps", "1e7",
    ).start()  # fmt: skip
    yield process
    process.kill()


def stalled_stream(gateway_port: int, key: str, prompt: str = LONG) -> socket.socket:
    """A streamed chat of ``prompt`` whose client reads the response head, then nothing; the open socket.
    Its ``max_tokens`` holds the whole count (~200k tokens at most; without one, the gateway's output
    reserve would cut it)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "stream": True,
            "max_tokens": 250_000}  # fmt: skip
    return stalled_request(gateway_port, key, "/v1/chat/completions", body)


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the gateway still sends, until it closes or ends the chunked body."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.settimeout(60)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        part = sock.recv(1 << 20)
        if not part:
            break
        data += part
    return data


def test_two_stalled_streams_leave_the_slots_to_another_key(sim, start_gateway, make_key) -> None:
    gateway = start_gateway(sim.url, slots=2, stream_buffer_bytes=64 * 1024 * 1024)
    stalled = [stalled_stream(gateway.port, make_key(f"stalled-{i}")) for i in range(2)]
    try:
        # the backend finishes both sequences although neither client reads: their slots are free
        wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 0, what="slots freed")
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("other"), max_retries=0)
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, timeout=60
        )
        assert answer.choices[0].finish_reason == "length"
        # each stalled client still gets its whole stream once it reads
        for sock in stalled:
            data = read_to_end(sock)
            assert b"data: [DONE]\n\n" in data and b'"error"' not in data
    finally:
        for sock in stalled:
            sock.close()


def test_a_client_that_reads_nothing_with_its_buffer_full_is_cut(sim, start_gateway, make_key) -> None:
    gateway = start_gateway(sim.url, slots=2, stream_buffer_bytes=64 * 1024, client_write_timeout_s=1.0)
    admin = make_key("ops", scopes=["admin"])
    sock = stalled_stream(gateway.port, make_key("stalled"), LONGER)
    try:
        # cut: the slot freed and the backend's sequence aborted before it could finish
        wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 0, what="cut")
        wait_until(lambda: scrape(sim.url)["vllm:num_requests_running"] == 0, what="abort")
        data = read_to_end(sock)  # what was buffered on the way, then the connection closes
        assert b"data: [DONE]" not in data and not data.endswith(b"\r\n0\r\n\r\n")
    finally:
        sock.close()
    metrics = scrape(gateway.url)
    assert metrics["gateway_request_ends_total{end=client_slow}"] == 1

    def record() -> dict:
        auth = {"Authorization": f"Bearer {admin}"}
        rows = httpx.get(gateway.url + "/admin/requests", headers=auth, timeout=60)
        return next((r for r in rows.json()["data"] if r["key_name"] == "stalled"), {})

    wait_until(lambda: record().get("end_reason") == "client_slow", what="the record")
    assert record()["status"] == 499


def test_a_client_that_stops_reading_after_the_backend_finished_is_cut(sim, start_gateway, make_key) -> None:
    """The whole answer fits the gateway's buffer, so the backend finishes and nothing ever fills up:
    the client that reads nothing is still cut once the writer took nothing for the write timeout, and
    its request is recorded (and its usage settled) then, not when it closes."""
    gateway = start_gateway(
        sim.url, slots=2, stream_buffer_bytes=64 * 1024 * 1024, client_write_timeout_s=1.0
    )
    admin = make_key("ops", scopes=["admin"])
    sock = stalled_stream(gateway.port, make_key("stopped"))

    def record() -> dict:
        auth = {"Authorization": f"Bearer {admin}"}
        rows = httpx.get(gateway.url + "/admin/requests", headers=auth, timeout=60)
        return next((r for r in rows.json()["data"] if r["key_name"] == "stopped"), {})

    try:
        wait_until(lambda: record().get("end_reason") == "client_slow", what="the record")
        assert record()["status"] == 499 and record()["completion_tokens"] > 10_000  # the whole answer's
        assert record()["request_class"] == "interactive"
        data = read_to_end(sock)  # what it had been sent, then the connection ends
        assert not data.endswith(b"\r\n0\r\n\r\n")
    finally:
        sock.close()
    assert scrape(gateway.url)["gateway_request_ends_total{end=client_slow}"] == 1
