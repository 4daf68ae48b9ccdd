"""Read a live server's state the way an operator would: its Prometheus ``/metrics``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

#: Seconds a server started for a test may take to answer (a bound on a wait, not a measurement: a
#: Python process importing the gateway on a loaded 2-core machine has taken over 30 s).
START_TIMEOUT_S = 120.0
#: Seconds one request of a probe may take: a server sharing a loaded machine (or, in a thread, the
#: test process's GIL with a busy simulator) may answer late; a bound, not a measurement.
PROBE_TIMEOUT_S = 60.0


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    """Samples of `url`/metrics: `{name{sorted labels}: value}` and `{name: sum over labels}`."""
    text = httpx.get(url + "/metrics", headers=headers, timeout=PROBE_TIMEOUT_S).text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
            if sample.labels:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def wait_until(predicate: Callable[[], bool], timeout_s: float = 60.0, what: str = "condition") -> None:
    """Poll ``predicate`` every 20 ms; raise ``AssertionError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def wait_serving(process: subprocess.Popen[bytes], url: str, log: Path, timeout_s: float, what: str) -> None:
    """Wait until ``GET url`` answers 200 from ``process`` itself; ``AssertionError`` with ``log`` if
    ``process`` exits first. A port chosen free may be taken by another test's server before
    ``process`` binds it: that server's 200 is not this one's (it would then serve its requests)."""
    port = urlsplit(url).port
    assert port is not None

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited early:\n{log.read_text(errors='replace')}")
        try:
            return httpx.get(url, timeout=1).status_code == 200 and listens(process.pid, port)
        except httpx.HTTPError:
            return False

    wait_until(answers, timeout_s=timeout_s, what=f"{what} ready")


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` (a listening socket's inode in
    ``/proc/net/tcp`` or ``tcp6`` among ``/proc/<pid>/fd``'s links)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    with contextlib.suppress(OSError):  # the process is gone: it listens nowhere
        return any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir())
    return False
