"""Which ZMQ endpoints may carry vLLM's KV cache events, and the directory of an ``ipc://`` one.

The events hold the token ids of every tenant's cached prompts, and whoever can publish into the
gateway's subscription can make it believe any prefix is cached (and so size and place requests by
it). An endpoint is therefore one of:

- ``ipc:///absolute/path``: a Unix socket in a directory that gives *others* no access (its mode
  ends in 0: 0700, 0750, 2750). Then no other user can bind a socket there (a forger) nor connect
  to one (a reader), whatever the modes of the sockets themselves: only the directory's owner and
  group — vLLM's user and the gateway's — reach it. :func:`private_ipc_dir` creates a missing
  directory 0700 and refuses one that others can enter, list or write.
- ``tcp://<loopback>:port`` (``127.0.0.0/8``, ``::1``, ``localhost``): reachable by every process
  of the host, so only where all of them are trusted.

Anything else — ``tcp://*:5557``, ``tcp://0.0.0.0:…``, another host — would hand every tenant's token
ids to the network: refused.
"""

from __future__ import annotations

import ipaddress
import re
import stat
from pathlib import Path

__all__ = ["check_endpoint", "ipc_path", "private_ipc_dir"]

#: The longest path a Unix socket address holds (``sun_path``, Linux), bytes, its NUL excluded.
MAX_IPC_PATH_BYTES = 107
_TCP = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):(\d{1,5})")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_endpoint(endpoint: str) -> str:
    """``endpoint`` if it may carry KV events (the module's rules); ``ValueError`` saying why not."""
    if endpoint.startswith("ipc://"):
        path = endpoint.removeprefix("ipc://")
        if not path.startswith("/") or "*" in path:
            raise ValueError(
                f"{endpoint}: an ipc:// endpoint is an absolute path (ipc:///run/dspark/kv/events)"
            )
        if len(path.encode()) > MAX_IPC_PATH_BYTES:
            raise ValueError(f"{endpoint}: a Unix socket path holds at most {MAX_IPC_PATH_BYTES} bytes")
        return endpoint
    match = _TCP.fullmatch(endpoint)
    if match is None:
        raise ValueError(f"{endpoint}: a ZMQ endpoint is ipc:///path or tcp://host:port")
    if not _loopback(match.group(1)):
        raise ValueError(
            f"{endpoint}: KV events carry every tenant's token ids; use ipc:// in a private directory, "
            "or a loopback address (tcp://127.0.0.1:port), never a wildcard or another interface"
        )
    return endpoint


def ipc_path(endpoint: str) -> Path | None:
    """The socket file of an ``ipc://`` endpoint; None for another transport."""
    return Path(endpoint.removeprefix("ipc://")) if endpoint.startswith("ipc://") else None


def private_ipc_dir(endpoint: str) -> None:
    """Make sure the directory of ``endpoint``'s socket (``ipc://`` only) exists and gives others no
    access: created 0700 if missing; ``ValueError`` if it is not a directory or others may use it."""
    path = ipc_path(endpoint)
    if path is None:
        return
    directory = path.parent
    if not directory.exists():  # else not even tried: it may sit on a read-only mount
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = directory.stat().st_mode
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{endpoint}: {directory} is not a directory")
    if mode & 0o007:
        raise ValueError(
            f"{endpoint}: {directory} (mode {stat.S_IMODE(mode):04o}) lets other users bind or reach "
            "KV event sockets there; give others no access (chmod o-rwx: 0700, 0750 or 2750)"
        )
