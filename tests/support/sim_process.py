"""``python -m dspark_sim`` as a real child process on a free loopback port: start, wait until its
``/health`` answers, kill -9 (a backend pair that dies mid-run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.probes import START_TIMEOUT_S, wait_serving
from tests.support.servers import free_port


class SimProcess:
    """One simulator with command-line ``args`` (``--slots 1 --decode-tps 50``), output to ``log_path``."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.args = ["--port", str(self.port), "--log-level", "warning", *args]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = START_TIMEOUT_S) -> SimProcess:
        with self.log_path.open("ab") as log:
            command = [sys.executable, "-m", "dspark_sim", *self.args]
            self.process = subprocess.Popen(command, stdout=log, stderr=log)

        wait_serving(self.process, self.url + "/health", self.log_path, timeout_s, "simulator")
        return self

    def kill(self) -> None:
        """kill -9: every connection to it cut at once."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
