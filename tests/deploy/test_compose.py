"""deploy/docker-compose.yml, its env file, the Dockerfile and the Caddyfile, checked statically."""

from __future__ import annotations

import contextlib
import copy
import json
import re
import shutil
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import COMPOSE, DEPLOY, REPO, env_example, load_yaml
from tests.support.compose_spec import compose_spec_errors

COMPOSE_FILES = sorted(
    path for pattern in ("*compose*.yml", "*compose*.yaml") for path in DEPLOY.rglob(pattern)
)
DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
CADDYFILE = (DEPLOY / "caddy" / "Caddyfile").read_text()
SECRET_NAME = re.compile(r"TOKEN|PASSWORD|SECRET|KEY", re.IGNORECASE)


def test_there_is_a_compose_file() -> None:
    assert COMPOSE in COMPOSE_FILES


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_compose_file_follows_the_compose_spec(path: Path) -> None:
    assert compose_spec_errors(path) == []


def test_the_schema_check_catches_a_typo(compose: dict[str, Any], tmp_path: Path) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["gateway"]["stop_grace_periode"] = "30m"
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    (error,) = compose_spec_errors(path)
    assert error.startswith("$.services.gateway: ") and "'stop_grace_periode' was unexpected" in error


def test_every_interpolated_variable_is_in_env_example() -> None:
    defined = set(env_example())
    for path in COMPOSE_FILES:
        text = re.sub(r"\$\$", "", path.read_text())  # $$ is a literal dollar
        used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))
        used |= {secret["environment"] for secret in (load_yaml(path).get("secrets") or {}).values()}
        assert used - defined == set(), f"{path.name} uses variables missing from .env.example"


def test_env_example_has_the_bootstrap_and_secret_placeholders() -> None:
    values = env_example()
    assert re.fullmatch(r"[0-9a-f]{64}", values["GATEWAY_ADMIN_KEY_SHA256"])
    assert values["GATEWAY_UPSTREAM"] == "http://127.0.0.1:8000"
    assert "change-me" in values["GATEWAY_METRICS_TOKEN"]
    assert "change-me" in values["GRAFANA_ADMIN_PASSWORD"]


def test_the_real_env_file_is_not_committed() -> None:
    ignored = subprocess.run(["git", "check-ignore", "-q", "deploy/.env"], cwd=REPO, check=False)
    assert ignored.returncode == 0, "deploy/.env must be git-ignored"


def test_no_plaintext_secrets_in_compose(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        environment = service.get("environment") or {}
        assert isinstance(environment, dict), f"{name}: use the mapping form of environment"
        for variable, value in environment.items():
            if SECRET_NAME.search(variable) and not variable.endswith("_USER"):
                assert re.fullmatch(r"\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}", str(value)), (
                    f"{name}.{variable} must come from deploy/.env"
                )


def test_only_caddy_is_public(compose: dict[str, Any]) -> None:
    """Host networking everywhere (vLLM is on the host's loopback); every other service binds loopback."""
    services = compose["services"]
    for name, service in services.items():
        assert service["network_mode"] == "host", name
        assert "ports" not in service, name
    for name in ("gateway", "gateway-standby"):
        command = services[name]["command"]
        assert command[:2] == ["dspark-gateway", "serve"]
        assert command[command.index("--host") + 1] == "127.0.0.1", name
    assert "--web.listen-address=127.0.0.1:9090" in services["prometheus"]["command"]
    assert services["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"
    assert services["gateway-standby"]["profiles"] == ["upgrade"]


def test_gateway_service_settings(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway"]
    assert gateway["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert gateway["env_file"] == [".env"]
    assert gateway["environment"]["GATEWAY_DATABASE_URL"] == "sqlite+aiosqlite:////data/gateway.db"
    assert gateway["environment"]["GATEWAY_UPSTREAM"].startswith("${GATEWAY_UPSTREAM:?")
    assert "gateway-data:/data" in gateway["volumes"]
    assert gateway["stop_grace_period"] == "30m"
    secret = compose["secrets"]["metrics_token"]
    assert secret == {"environment": "GATEWAY_METRICS_TOKEN"}
    assert "metrics_token" in compose["services"]["prometheus"]["secrets"]


def test_bind_mounts_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"


# --- Dockerfile ----------------------------------------------------------------------------------


def test_dockerfile_is_slim_non_root_and_small_context() -> None:
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE)
    assert froms and all(image == "python:3.11-slim" for image in froms)
    user = re.findall(r"^USER (\S+)", DOCKERFILE, re.MULTILINE)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    copies = re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE, re.MULTILINE)
    sources = {word for line in copies for word in line.split()[:-1]}
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    names = (path.parent.name for path in REPO.glob("*/__init__.py"))
    packages = {f"{name}/" for name in names if any(fnmatch(name, pattern) for pattern in include["include"])}
    assert {"gateway/", "dspark_cli/", "dspark_sim/"} <= packages and "bench/" not in packages
    assert sources == {"pyproject.toml", "README.md", *packages}
    assert 'VOLUME ["/data"]' in DOCKERFILE
    assert "GATEWAY_DATABASE_URL=sqlite+aiosqlite:////data/gateway.db" in DOCKERFILE
    assert DOCKERFILE.rstrip().endswith(
        'CMD ["dspark-gateway", "serve", "--host", "0.0.0.0", "--port", "8080"]'
    )


def healthcheck_code(text: str) -> str:
    match = re.search(r'CMD \["python", "-c", "([^"]+)"\]', text)
    assert match, "HEALTHCHECK must run python -c"
    return match.group(1)


def test_dockerfile_healthcheck_probes_a_real_gateway(start_sim, start_gateway) -> None:
    code = healthcheck_code(DOCKERFILE.split("HEALTHCHECK", 1)[1])
    assert "http://127.0.0.1:8080/health" in code
    gateway = start_gateway(start_sim().url)
    healthy = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:8080", gateway.url[7:])])
    assert healthy.returncode == 0
    gateway.stop()
    down = subprocess.run(
        [sys.executable, "-c", code.replace("127.0.0.1:8080", gateway.url[7:])], capture_output=True
    )
    assert down.returncode != 0


def test_the_cli_accepts_the_serve_flags() -> None:
    cli = Path(sys.executable).parent / "dspark-gateway"
    shown = subprocess.run([cli, "serve", "--help"], capture_output=True, text=True, check=True)
    assert "--host" in shown.stdout and "--port" in shown.stdout


# --- Caddyfile -----------------------------------------------------------------------------------


def test_caddy_streams_to_the_loopback_gateway() -> None:
    assert re.search(r"^\{\$DOMAIN\} \{", CADDYFILE, re.MULTILINE)
    assert "tls {$CADDY_TLS}" in CADDYFILE
    assert re.search(r"^\s*flush_interval -1$", CADDYFILE, re.MULTILINE)
    assert re.search(r"^\s*read_timeout \d+h$", CADDYFILE, re.MULTILINE)
    assert not re.search(r"^\s*(encode|write|read_body)\b", CADDYFILE, re.MULTILINE)


def adapt(tmp_path: Path, **env: str) -> dict[str, Any]:
    """The shipped Caddyfile as Caddy's JSON, with ``env`` (DOMAIN and CADDY_TLS set for it)."""
    caddy = shutil.which("caddy")
    assert caddy, "caddy is not installed: run `make test-deps` (apt-get install caddy)"
    env = {"DOMAIN": "gw.example.org", "CADDY_TLS": "internal", "HOME": str(tmp_path), **env}
    adapted = subprocess.run(
        [caddy, "adapt", "--config", str(DEPLOY / "caddy" / "Caddyfile"), "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert adapted.returncode == 0, adapted.stderr
    return json.loads(adapted.stdout)


def proxy_of(config: Any) -> dict[str, Any]:
    """The reverse_proxy handler of the adapted config (searched depth first)."""
    if isinstance(config, dict):
        if config.get("handler") == "reverse_proxy":
            return config
        config = list(config.values())
    if isinstance(config, list):
        for item in config:
            with contextlib.suppress(LookupError):
                return proxy_of(item)
    raise LookupError("no reverse_proxy handler")


def test_caddyfile_is_valid_for_caddy_and_proxies_the_gateway_and_its_standby(tmp_path: Path) -> None:
    proxy = proxy_of(adapt(tmp_path))
    assert proxy["flush_interval"] == -1
    assert [u["dial"] for u in proxy["upstreams"]] == ["127.0.0.1:8080", "127.0.0.1:8081"]
    assert proxy["load_balancing"]["selection_policy"] == {"policy": "first"}


def test_the_scale_out_compose_sets_caddy_to_every_replica_least_connections(tmp_path: Path) -> None:
    scale = load_yaml(DEPLOY / "scale" / "docker-compose.yml")
    caddy = scale["services"]["caddy"]["environment"]
    proxy = proxy_of(
        adapt(tmp_path, GATEWAY_REPLICAS=caddy["GATEWAY_REPLICAS"], CADDY_LB_POLICY=caddy["CADDY_LB_POLICY"])
    )
    ports = sorted(
        int(service["command"][service["command"].index("--port") + 1])
        for name, service in scale["services"].items()
        if name.startswith("gateway-")
    )
    assert [u["dial"] for u in proxy["upstreams"]] == [f"127.0.0.1:{port}" for port in ports]
    assert len(ports) == 3 and proxy["load_balancing"]["selection_policy"] == {"policy": "least_conn"}


def test_scale_out_replicas_share_one_database_and_redis_on_loopback() -> None:
    scale = load_yaml(DEPLOY / "scale" / "docker-compose.yml")
    services = scale["services"]
    gateways = [service for name, service in services.items() if name.startswith("gateway-")]
    for gateway in gateways:
        assert gateway["extends"] == {"file": "../docker-compose.yml", "service": "gateway"}
        assert gateway["command"][gateway["command"].index("--host") + 1] == "127.0.0.1"
        env = gateway["environment"]
        assert env["GATEWAY_ADMISSION_STORE"] == env["GATEWAY_LIMITS_STORAGE"] == "redis://127.0.0.1:6379/0"
        assert env["GATEWAY_DATABASE_URL"].startswith("postgresql+asyncpg://dspark:${POSTGRES_PASSWORD")
        assert env["GATEWAY_DATABASE_URL"].endswith("@127.0.0.1:5432/dspark")
    assert "--bind" in services["redis"]["command"] and "127.0.0.1" in services["redis"]["command"]
    assert "listen_addresses=127.0.0.1" in services["postgres"]["command"]
    assert all(
        service.get("network_mode") == "host" for service in services.values() if "extends" not in service
    )
    assert not any("ports" in service for service in services.values())
    targets = load_yaml(DEPLOY / "scale" / "prometheus.yml")["scrape_configs"][0]["static_configs"]
    assert sorted(t["targets"][0] for t in targets) == ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"]
