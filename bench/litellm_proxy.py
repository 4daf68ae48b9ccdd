"""Part 4 of the gateway benchmark: the LiteLLM proxy in front of the same upstream, for comparison.

``litellm_proxy()`` starts the LiteLLM proxy the documented way (``litellm --config FILE``, from its
own venv, installed by ``scripts/install-litellm.sh``) as one uvicorn worker on a free loopback port,
with a config that routes one model name to an OpenAI-compatible upstream (``hosted_vllm/``, LiteLLM's
provider for a vLLM server) and a ``master_key``, so that every request is authenticated as it is
through our gateway. It runs fully offline: the bundled model cost map and other bundled catalogues
instead of GitHub fetches, no telemetry, no database (no ``DATABASE_URL``: no spend logs, no key
table; the master key is checked in memory), no callbacks, no background health checks, logging at
WARNING (no access log, no debug). What is left is LiteLLM as a user would run it in front of vLLM.

The pid yielded is the one process that serves: ``taskset`` execs the ``litellm`` console script,
which runs ``uvicorn.run(..., workers=1)`` in-process (no supervisor, no forked worker), so
``/proc/<pid>/stat`` of that pid counts all of LiteLLM's CPU (its threads included).

Seen with LiteLLM 1.108.7: extra body fields such as ``ignore_eos`` reach vLLM unchanged; streamed
chunks carry the same text in the same number of chunks, vLLM's ``reasoning`` renamed
``reasoning_content``, plus one last empty-delta chunk for ``finish_reason``. Without a database only
the master key is accepted (another key gets 400 "No connected db", none gets 401). Startup imports
take about 15 s of CPU.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from tests.support.probes import wait_until
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
LITELLM_VENV = ROOT / ".venv-litellm"
LITELLM_PYTHON = LITELLM_VENV / "bin" / "python"
LITELLM_BIN = LITELLM_VENV / "bin" / "litellm"
MASTER_KEY = "sk-litellm-bench-master"  # LiteLLM requires master keys to start with "sk-"
START_TIMEOUT_S = 180  # importing the proxy alone takes ~15 s of CPU; more on a loaded machine
STOP_TIMEOUT_S = 20

#: Environment of the proxy: offline, no telemetry, quiet. Anything naming a database, a cache or a
#: callback destination is removed from the inherited environment (see ``_env``).
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_TELEMETRY_DISABLED": "True",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "LITELLM_LOG": "WARNING",  # also uvicorn's level: no access log, as our gateway at --log-level warning
    "HF_HUB_OFFLINE": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
_DROPPED_ENV_PREFIXES = ("DATABASE_", "DIRECT_URL", "REDIS_", "LITELLM_", "OTEL_", "LANGFUSE_", "SENTRY_")


def available() -> bool:
    """LiteLLM's venv is installed (``bash scripts/install-litellm.sh``)."""
    return LITELLM_PYTHON.is_file() and LITELLM_BIN.is_file()


def proxy_config(upstream_url: str, model: str, master_key: str = MASTER_KEY) -> dict[str, object]:
    """The proxy's config: ``model`` routed to the vLLM-compatible ``upstream_url``, master key auth."""
    return {
        "model_list": [
            {
                "model_name": model,
                "litellm_params": {
                    "model": f"hosted_vllm/{model}",
                    "api_base": upstream_url + "/v1",
                    "api_key": "sk-dummy",  # the upstream checks none
                },
            }
        ],
        "litellm_settings": {
            "callbacks": [],
            "success_callback": [],
            "failure_callback": [],
            "telemetry": False,
        },
        "general_settings": {
            "master_key": master_key,
            "disable_spend_logs": True,
            "background_health_checks": False,
        },
    }


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_ENV_PREFIXES)}
    env.update(OFFLINE_ENV)
    return env


@contextlib.contextmanager
def litellm_proxy(
    workdir: Path, upstream_url: str, model: str, cpu: int | None
) -> Iterator[tuple[str, str, int]]:
    """Run the LiteLLM proxy in front of ``upstream_url``; yield ``(base_url, master_key, pid)``.

    Pinned to core ``cpu`` with ``taskset`` unless it is None. Config in ``workdir/litellm.yaml``,
    output in ``workdir/litellm.log``. Stopped with SIGTERM on exit, SIGKILL after 20 s.
    """
    if not available():
        raise RuntimeError(f"LiteLLM is not installed in {LITELLM_VENV}: run scripts/install-litellm.sh")
    config_path = workdir / "litellm.yaml"
    config_path.write_text(yaml.safe_dump(proxy_config(upstream_url, model), sort_keys=False))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    command = [str(LITELLM_BIN), "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--num_workers", "1"]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    log_path = workdir / "litellm.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, env=_env(), cwd=workdir, stdout=log, stderr=log)
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"LiteLLM exited early ({process.returncode}):\n{log_path.read_text()}")
        try:
            response = httpx.get(base_url + "/v1/models", headers=headers, timeout=2)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and model in response.text

    try:
        wait_until(ready, timeout_s=START_TIMEOUT_S, what="LiteLLM proxy ready")
        yield base_url, MASTER_KEY, process.pid
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
