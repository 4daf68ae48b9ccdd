"""``dspark-gateway serve`` as a real child process: start, wait ready, signal, kill -9, read its RSS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.probes import START_TIMEOUT_S, wait_serving
from tests.support.servers import free_port

BIN = str(Path(sys.executable).parent / "dspark-gateway")
#: Ports a gateway process chooses before it gives up (each taken by another server in between).
PORT_TRIES = 3


def clean_env(**settings: object) -> dict[str, str]:
    """This process's environment without any ``GATEWAY_*`` or ``OTEL_*`` (a shell's tracing would turn
    the gateway's on), plus ``settings`` as ``GATEWAY_<NAME>``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "OTEL_"))}
    env.update({f"GATEWAY_{name.upper()}": str(value) for name, value in settings.items()})
    return env


class GatewayProcess:
    """One ``dspark-gateway serve`` on a free loopback port, its output appended to ``log_path``."""

    def __init__(self, env: dict[str, str], log_path: Path, port: int | None = None) -> None:
        self.env = env
        self.log_path = log_path
        self._chosen = port is None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> GatewayProcess:
        """Start and wait until ``/ready`` answers 200; raise ``AssertionError`` with the log if not.
        A port this process chose, taken by another test's server before the gateway bound it, is
        chosen again (at most :data:`PORT_TRIES` times)."""
        for _ in range(PORT_TRIES):
            written = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    [BIN, "serve", "--port", str(self.port)], env=self.env, stdout=log, stderr=log
                )
            try:
                wait_serving(self.process, self.url + "/ready", self.log_path, timeout_s, "gateway")
                return self
            except AssertionError:
                with self.log_path.open("rb") as log:
                    log.seek(written)
                    taken = b"another process listens there" in log.read()
                if not (self._chosen and taken and self.process.poll() is not None):
                    raise
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
        raise AssertionError(f"no free port taken in {PORT_TRIES} tries")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace")

    def rss_bytes(self) -> int:
        """Resident set size now, bytes (``VmRSS`` of ``/proc/<pid>/status``)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS line")

    def terminate(self) -> None:
        """Send SIGTERM (the gateway drains, then exits)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int:
        """Wait for the exit; return the status."""
        assert self.process is not None
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        """kill -9: no drain, no shutdown, no ledger flush."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Make sure the process is gone (SIGTERM, then SIGKILL after 20 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()
