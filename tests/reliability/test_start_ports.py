"""A gateway started for a test on a port it chose free, which another server took before the gateway
bound it, is not mistaken for that server (its 200 on ``/ready`` is not the gateway's): the gateway,
refused the port, starts on another, and requests reach it."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import httpx

from tests.support.gateway_process import GatewayProcess, clean_env


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # another test's server: ready, and no gateway
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_port_taken_before_the_gateway_binds_it_is_chosen_again(start_sim, tmp_path: Path) -> None:
    sim = start_sim()
    env = clean_env(upstream=sim.url, database_url=f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}")
    gateway = GatewayProcess(env, tmp_path / "gateway.log")
    taken = gateway.port
    other = http.server.HTTPServer(("127.0.0.1", taken), _Ready)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        gateway.start()
        assert gateway.port != taken and "another process listens there" in gateway.log()
        assert httpx.get(gateway.url + "/v1/models").status_code == 401  # the gateway's answer
    finally:
        gateway.stop()
        other.shutdown()
        other.server_close()
