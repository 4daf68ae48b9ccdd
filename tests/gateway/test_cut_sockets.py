"""A stream cut for not reading (``client_slow``) does not keep its connection (issue 57, item 8).

The real ``dspark-gateway serve`` (it sets ``TCP_USER_TIMEOUT`` on its listening socket) before a
simulator; the stalled client is a raw socket with a small receive buffer that reads the response head,
then nothing, and stays open. The gateway cuts the stream after ``GATEWAY_CLIENT_WRITE_TIMEOUT_S``;
the kernel then aborts the connection once its bytes stayed unacknowledged for
``GATEWAY_CLIENT_ACK_TIMEOUT_S`` — without it the gateway's socket lives as long as the client's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.probes import wait_until
from tests.support.stalled_client import stalled_request

#: A streamed chat whose answer (~15 MB of SSE) is more than every buffer between the backend and the
#: stalled client holds, so the gateway's writes block for sure; its ``max_tokens`` holds the whole
#: count (without one, the gateway's output reserve would cap it).
LONGER = {
    "model": "deepseek-v4-flash-0731",
    "messages": [{"role": "user", "content": "count from 1 to 100000"}],
    "stream": True,
    "max_tokens": 250_000,
}


def connected(pid: int, local_port: int, remote_port: int) -> bool:
    """Whether a TCP socket ``local_port`` → ``remote_port`` on 127.0.0.1 exists in ``pid``'s network
    namespace, in any state (``/proc/<pid>/net/tcp``: ``local rem`` as ``HEXIP:HEXPORT``)."""
    rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    pairs = {tuple(int(address.split(":")[1], 16) for address in row.split()[1:3]) for row in rows}
    return (local_port, remote_port) in pairs


def test_a_cut_streams_connection_is_aborted_while_its_client_stays(
    start_sim, database_url: str, tmp_path: Path, make_key: Callable[..., str]
) -> None:
    sim = start_sim(slots=2, decode_tps=20000)
    env = clean_env(
        upstream=sim.url,
        database_url=database_url,
        stream_buffer_bytes=64 * 1024,
        client_write_timeout_s=1.0,
        # the kernel's abort must come after the cut: it counts from when the client's window closed,
        # before the gateway's buffers (megabytes, filled at the loaded simulator's pace) are full
        client_ack_timeout_s=20.0,
    )
    gateway = GatewayProcess(env, tmp_path / "gateway.log").start()
    admin = make_key("ops", scopes=["admin"])

    def record() -> dict:
        rows = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}).json()
        return next((r for r in rows["data"] if r["key_name"] == "stalled"), {})

    sock = stalled_request(gateway.port, make_key("stalled"), "/v1/chat/completions", LONGER)
    try:
        client_port = sock.getsockname()[1]
        assert connected(gateway.pid, gateway.port, client_port)
        # a loaded machine takes a while to fill every buffer; any other ending is a failure at once
        wait_until(lambda: record().get("end_reason") is not None, timeout_s=180, what="the cut")
        assert record()["end_reason"] == "client_slow", record()
        # the client still holds its socket open, reading nothing: the gateway's side goes all the same
        wait_until(
            lambda: not connected(gateway.pid, gateway.port, client_port), timeout_s=90, what="the abort"
        )
    finally:
        sock.close()
        gateway.stop()
