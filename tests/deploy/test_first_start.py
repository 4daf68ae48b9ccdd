"""The documented first start reads vLLM's KV cache events: a gateway process given exactly
deploy/.env.example's settings (as compose's ``env_file`` hands them over; only what points at this
machine replaced) subscribes to the sockets the runtime profile makes vLLM bind, and the check that ends
docs/deploy.md's bring-up, ``/admin/status`` → ``prefix_cache.source``, says ``events``. The compose
files mount the directory every shipped profile puts those sockets in."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from dspark_runtime.profile import PROFILES_DIR, load_profile, profile_path
from tests.deploy.conftest import REPO, env_example, load_yaml
from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"


def documented_check(url: str, admin: str) -> str:
    """What the check that ends docs/deploy.md's bring-up prints: its ``python -c`` over ``/admin/status``
    (which it fetches with curl through Caddy)."""
    (script,) = re.findall(r"\| python -c '([^']+)'", (REPO / "docs" / "deploy.md").read_text())
    status = httpx.get(url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}, timeout=10)
    done = subprocess.run(
        [sys.executable, "-c", script], input=status.text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_documented_first_start_subscribes_to_vllms_events(
    start_sim, database_url: str, make_key, admin: str, tmp_path: Path
) -> None:
    settings = env_example()
    named = settings["GATEWAY_RUNTIME_PROFILE"]
    profile = load_profile(named)
    # The profile as shipped, its sockets' directory moved to one of this test's (/run is root's).
    sockets = tmp_path / "kv"
    sockets.mkdir(mode=0o700)
    moved = tmp_path / f"{named}.env"
    moved.write_text(profile_path(named).read_text() + f"\nKV_EVENTS_DIR={sockets}\n")
    vllm = start_sim(
        block_size=profile.block_size,
        kv_events_endpoint=f"ipc://{sockets}/events",
        kv_events_replay_endpoint=f"ipc://{sockets}/replay",
    )
    env = clean_env()
    env.update({name: value for name, value in settings.items() if name.startswith("GATEWAY_")})
    env.update(
        GATEWAY_UPSTREAM=vllm.url, GATEWAY_RUNTIME_PROFILE=str(moved), GATEWAY_DATABASE_URL=database_url
    )
    gateway = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        key = make_key("agent")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "plan the build " * 300}]}
        answer = httpx.post(
            gateway.url + "/v1/chat/completions",
            json={**body, "max_tokens": 8},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text

        def prefix_cache() -> dict:
            status = httpx.get(
                gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}, timeout=10
            )
            return status.json()["backends"][0]["prefix_cache"]

        wait_until(lambda: prefix_cache()["source"] == "events", what="prefix_cache.source events")
        assert documented_check(gateway.url, admin) == "default events\n"
        feed = prefix_cache()["events"]
        assert feed["endpoint"] == f"ipc://{sockets}/events" and feed["blocks"] > 0, feed
        token = {"Authorization": f"Bearer {settings['GATEWAY_METRICS_TOKEN']}"}
        metrics = scrape(gateway.url, headers=token)
        assert metrics["gateway_backend_prefix_cache_source{backend=default,source=events}"] == 1
    finally:
        gateway.stop()


def test_the_compose_files_mount_the_directory_of_every_profiles_sockets() -> None:
    """vLLM's (runtime/), each gateway's of deploy/ (the upgrade's standby too) and, through
    ``extends``, the scale-out replicas'."""
    runtime = load_yaml(REPO / "runtime" / "docker-compose.yml")["services"]["vllm"]
    assert "${KV_EVENTS_DIR}:${KV_EVENTS_DIR}" in runtime["volumes"]
    services = load_yaml(REPO / "deploy" / "docker-compose.yml")["services"]
    scale = load_yaml(REPO / "deploy" / "scale" / "docker-compose.yml")["services"]
    replicas = [name for name in scale if name.startswith("gateway")]
    assert replicas and all(
        scale[name]["extends"] == {"file": "../docker-compose.yml", "service": "gateway"} for name in replicas
    )
    for shipped in sorted(PROFILES_DIR.glob("*.env")):
        directory = load_profile(shipped).kv_events_dir
        for name in ("gateway", "gateway-standby"):
            assert f"{directory}:{directory}" in services[name]["volumes"], (shipped.name, name)
