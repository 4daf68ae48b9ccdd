"""A client that stops reading: a raw socket with a small receive buffer that sends one request, reads
the response head, then nothing, and stays open until the test closes it."""

from __future__ import annotations

import json
import socket
from typing import Any


def stalled_request(port: int, key: str, path: str, body: dict[str, Any]) -> socket.socket:
    """POST ``body`` (JSON) to ``path`` on 127.0.0.1:``port`` with ``key``; the open socket once the
    response head (200) has been read. Its 4 KB receive buffer fills at once: the server's sends then
    wait for a window the client never opens."""
    data = json.dumps(body).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n".encode()
        + f"authorization: Bearer {key}\r\ncontent-length: {len(data)}\r\n\r\n".encode()
        + data
    )
    head = b""
    while b"\r\n\r\n" not in head:
        part = sock.recv(1024)
        assert part, "no response head"
        head += part
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return sock
