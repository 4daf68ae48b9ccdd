"""What the front proxy does that uvicorn cannot: a real Caddy with the shipped server options
(deploy/caddy/Caddyfile's global ``servers`` block) in front of a gateway. A connection that never
finishes its request headers is closed after ``read_header``; headers over ``max_header_size`` are
refused before they are buffered; everything else goes through."""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.probes import wait_until
from tests.support.servers import free_port

CADDYFILE = (Path(__file__).resolve().parents[2] / "deploy" / "caddy" / "Caddyfile").read_text()


def servers_block() -> str:
    """The shipped global options' ``servers { ... }`` block, as written."""
    start = CADDYFILE.index("\tservers {")
    depth, end = 0, start
    for end in range(start, len(CADDYFILE)):
        depth += {"{": 1, "}": -1}.get(CADDYFILE[end], 0)
        if depth == 0 and CADDYFILE[end] == "}":
            break
    return CADDYFILE[start : end + 1]


def header_timeout_s() -> float:
    match = re.search(r"read_header (\d+)s", servers_block())
    assert match, "the shipped Caddyfile sets no read_header timeout"
    return float(match.group(1))


@pytest.fixture
def front(start_sim, start_gateway, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """Caddy on a free port, the shipped server options, proxying to a gateway; yields (url, port)."""
    caddy = shutil.which("caddy")
    assert caddy, "caddy is not installed: run `make test-deps` (apt-get install caddy)"
    gateway = start_gateway(start_sim().url)
    port = free_port()
    config = tmp_path / "Caddyfile"
    config.write_text(
        "{\n\tadmin off\n\tauto_https off\n" + servers_block() + "\n}\n"
        f"http://127.0.0.1:{port} {{\n\treverse_proxy {gateway.url.removeprefix('http://')}\n}}\n"
    )
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    process = subprocess.Popen(
        [caddy, "run", "--config", str(config), "--adapter", "caddyfile"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "caddy.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, (tmp_path / "caddy.log").read_text()
        try:
            return httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, timeout_s=20, what="caddy in front of the gateway")
        yield url, port
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_headers_over_the_cap_are_refused_by_the_front_proxy(front) -> None:
    url, _ = front
    refused = httpx.get(url + "/health", headers={"x-padding": "a" * 40_000})
    assert refused.status_code == 431
    through = httpx.get(url + "/health")
    assert through.status_code == 200 and through.headers["x-request-id"].startswith("req-")


def test_a_connection_that_never_finishes_its_headers_is_closed(front) -> None:
    """Slowloris: a request line and half a header, then silence."""
    _, port = front
    limit = header_timeout_s()
    assert limit <= 30
    with socket.create_connection(("127.0.0.1", port), timeout=limit + 20) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        started = time.monotonic()
        with contextlib.suppress(ConnectionError):  # closed or reset; any answer first is read through
            while sock.recv(65536):
                pass
        waited = time.monotonic() - started
    assert limit - 1 < waited < limit + 15, waited
