"""nginx as a pure HTTP relay: the benchmark's C baseline for what a proxy beside the gateway costs.

One nginx process (``master_process off``, one worker's work in it, so its CPU is one pid's) pinned
beside the gateway, passing every request to the upstream over pooled HTTP/1.1 connections with
response and request buffering off (an SSE stream goes through as each chunk arrives), no access log.
It parses HTTP and does nothing else: no authentication, no admission, no rewriting. ``nginx`` from
Debian's package (``make test-deps`` does not need it; the benchmark skips the path without it).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from bench.tcp_relay import relaying
from tests.support.servers import free_port

CONFIG = """daemon off;
master_process off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 65536; multi_accept on; }}
http {{
  access_log off;
  client_body_temp_path {workdir}/nginx-body;
  proxy_temp_path {workdir}/nginx-proxy;
  fastcgi_temp_path {workdir}/nginx-fastcgi;
  uwsgi_temp_path {workdir}/nginx-uwsgi;
  scgi_temp_path {workdir}/nginx-scgi;
  keepalive_requests 100000;
  upstream backend {{ server 127.0.0.1:{upstream_port}; keepalive 1024; keepalive_requests 100000; }}
  server {{
    listen 127.0.0.1:{port} backlog=65535;
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 3600s;
    }}
  }}
}}
"""


def available() -> bool:
    """Whether an ``nginx`` binary is on the PATH."""
    return shutil.which("nginx") is not None


@contextlib.contextmanager
def nginx_relay(workdir: Path, upstream_port: int, cpu: int | None) -> Iterator[tuple[str, int]]:
    """nginx in front of 127.0.0.1:``upstream_port``, pinned to ``cpu`` (None: not pinned); yield
    (base URL, pid)."""
    port = free_port()
    config = workdir / "nginx.conf"
    config.write_text(CONFIG.format(workdir=workdir, port=port, upstream_port=upstream_port))
    command = ["nginx", "-c", str(config), "-p", str(workdir)]
    with relaying(command, cpu, workdir / "nginx.log", port) as served:
        yield served
