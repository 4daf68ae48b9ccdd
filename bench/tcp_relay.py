"""A zero-work TCP relay: the benchmark's floor for any proxy pinned beside the gateway.

``python -m bench.tcp_relay LISTEN_PORT UPSTREAM_PORT`` accepts on 127.0.0.1 and copies bytes both
ways to the upstream (one upstream connection per client connection), on uvloop like the gateway. It
parses nothing and authenticates nothing, so what it adds to latency and what it costs per chunk is
what putting *any* process on CPU 0 in the path costs on this machine: the extra loopback hop, the
wakeups across the two CPUs, and a read and a write per chunk. At high concurrency it also takes load
off CPU 1 (the client-facing sends move to CPU 0), so "direct" is not the floor there; see
docs/performance.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import uvloop

from tests.support.probes import wait_until
from tests.support.servers import free_port

READ_BYTES = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(READ_BYTES):
            writer.write(data)
            await writer.drain()
    writer.close()


async def _serve(upstream_port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def main(listen_port: int, upstream_port: int) -> None:
    """Relay 127.0.0.1:``listen_port`` to 127.0.0.1:``upstream_port`` until killed."""
    server = await asyncio.start_server(lambda r, w: _serve(upstream_port, r, w), "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


def accepts(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def relaying(command: list[str], cpu: int | None, log_path: Path, port: int) -> Iterator[tuple[str, int]]:
    """``command`` pinned to ``cpu`` (None: not pinned), its output in ``log_path``, until the block
    ends; yield (``http://127.0.0.1:port``, its pid) once it accepts connections on ``port``."""
    pinned = ["taskset", "-c", str(cpu)] if cpu is not None else []
    with log_path.open("wb") as log:
        proc = subprocess.Popen([*pinned, *command], stdout=log, stderr=log)
    try:
        wait_until(lambda: accepts(port), timeout_s=30, what=f"{log_path.stem} listening")
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@contextlib.contextmanager
def tcp_relay(workdir: Path, upstream_port: int, cpu: int | None) -> Iterator[tuple[str, int]]:
    """The relay in front of 127.0.0.1:``upstream_port``, pinned to ``cpu`` (None: not pinned); yield
    (base URL, pid)."""
    port = free_port()
    command = [sys.executable, "-m", "bench.tcp_relay", str(port), str(upstream_port)]
    with relaying(command, cpu, workdir / "relay.log", port) as served:
        yield served


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2])))
