"""The access log of ``dspark-gateway serve``: uvicorn's line, one per response, written at its end."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
CHAT_LINE = re.compile(
    r'INFO: +127\.0\.0\.1:\d+ - "POST /v1/chat/completions HTTP/1\.1" 200 OK'
    r" request_id=(req-[0-9a-f]{32}) client_request_id=(\S+)\n"
)


@pytest.fixture
def gateway(tmp_path: Path, database_url: str) -> Iterator[GatewayProcess]:
    """The gateway with its built-in simulator (~90 tokens/s per stream)."""
    process = GatewayProcess(clean_env(database_url=database_url), tmp_path / "gateway.log").start()
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout_s=30)


def test_one_line_per_response_written_when_it_ends(gateway: GatewayProcess, make_key: Callable[..., str]):
    """A stream's line appears once its last byte is sent, not at its first (uvicorn would write it
    before the status line, on the way to the first token); it is uvicorn's format, once, followed by
    the gateway's request id (the one the answer carries) and the one the client sent."""
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("logged"), max_retries=0)
    messages = [{"role": "user", "content": "Count slowly."}]
    stream = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=60, stream=True, extra_headers={"x-request-id": "trace-7"}
    )
    request_id = stream.headers["x-request-id"]
    stream = stream.parse()
    chunks = iter(stream)
    next(chunks)
    assert not CHAT_LINE.search(gateway.log()), gateway.log()  # started, not ended: no line yet
    rest = list(chunks)
    assert rest and rest[-1].choices[0].finish_reason == "length"
    wait_until(lambda: CHAT_LINE.search(gateway.log()) is not None, timeout_s=10, what="the access line")
    assert CHAT_LINE.findall(gateway.log()) == [(request_id, "trace-7")]


def test_statuses_as_answered_and_no_query_string(gateway: GatewayProcess) -> None:
    """Refusals are logged with their status; a key sent in the query string never reaches the log,
    a WebSocket upgrade's included (uvicorn would refuse it itself and log its whole URL)."""
    secret = "dsk-QUERYSTRINGCANARY" + "x" * 22
    upgrade = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    }
    refused = httpx.get(gateway.url + "/v1/models", params={"api_key": secret})
    missing = httpx.post(gateway.url + "/v1/embeddings?x=1", json={})
    socket = httpx.get(gateway.url + "/v1/realtime", params={"api_key": secret}, headers=upgrade)
    assert (refused.status_code, missing.status_code, socket.status_code) == (401, 404, 404)
    expected = (
        '"GET /v1/models HTTP/1.1" 401',
        '"POST /v1/embeddings HTTP/1.1" 404',
        '"GET /v1/realtime HTTP/1.1" 404',
    )
    wait_until(lambda: all(line in gateway.log() for line in expected), timeout_s=10, what="the lines")
    assert secret not in gateway.log() and "api_key" not in gateway.log()
    assert re.search(
        r'"GET /v1/models HTTP/1.1" 401 Unauthorized request_id=req-\w+ client_request_id=-\n', gateway.log()
    )
