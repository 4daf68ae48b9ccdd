"""Prometheus config + alert rules and Grafana provisioning: they parse, promtool accepts them, and
every metric an alert uses is one the gateway exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.admission import Admission
from gateway.backends.kv_index import ResidentBlocks
from gateway.backends.kv_view import KVView
from gateway.telemetry.metrics import GatewayMetrics
from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.spec import SpecStats
from tests.deploy.conftest import DEPLOY, load_yaml

PROMETHEUS = DEPLOY / "prometheus"
GRAFANA = DEPLOY / "grafana"
#: Series Prometheus records itself for every target; all others must come from the gateway.
PROMETHEUS_SERIES = {"up"}
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(PROMETHEUS / "alerts.yml")["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords or labels."""
    expr = re.sub(r'"[^"]*"|\{[^}]*\}|\[[^]]*\]', "", expr)  # strings, label matchers, ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\boffset\s+\w+", "", expr)
    expr = re.sub(r"\b\d+(\.\d+)?([eE][-+]?\d+)?\b", "", expr)
    tokens = re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr)
    return {word for word, call in tokens if not call} - PROMQL_KEYWORDS  # a call is a function


def exported_names() -> set[str]:
    """Sample names of the gateway's /metrics registry after one fully populated request record."""
    metrics = GatewayMetrics()
    admission = Admission(slots=2, queue_max=4, queue_timeout_s=1)
    metrics.watch(admission)
    metrics.watch_backend("default", admission)
    metrics.watch_holds("default", admission)
    metrics.watch_prefix_cache("default", KVView(ResidentBlocks(256, 16, "estimate")))
    for polled in (
        metrics.upstream_up,
        metrics.backend_running,
        metrics.backend_waiting,
        metrics.backend_kv_usage,
    ):
        polled.labels("default").set(1)  # as a backend poll sets them
    record = RequestTelemetry(
        request_id="req-1",
        key_id="key_1",
        key_name="team-a",
        model="deepseek-v4-flash-0731",
        route="/v1/chat/completions",
        api="chat",
        stream=True,
        arrived_at=datetime.now(UTC),
        status=200,
        queue_wait_s=0.1,
        upstream_ttft_s=0.4,
        ttft_s=0.5,
        decode_tokens_per_s=60.0,
        e2e_s=2.0,
        prompt_tokens=10,
        completion_tokens=20,
        cached_tokens=4,
        cached_tokens_predicted=4,
        cache_source="events",
        reasoning_tokens=5,
        spec=SpecStats("stream", 4, 16, 20, 0.8, 5.0),
        clamped=["cached_tokens"],
    )
    metrics.observe(record)
    text = generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metric_name_extraction() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, model) (rate(x_bucket{a="b"}[5m]))) > 1 and y offset 1d'
    assert metric_names(expr) == {"x_bucket", "y"}


def test_every_alert_uses_only_exported_metrics() -> None:
    exported = exported_names() | PROMETHEUS_SERIES
    used: set[str] = set()
    for rule in alert_rules():
        names = metric_names(rule["expr"])
        assert names, f"{rule['alert']}: no metric found in its expression"
        assert names - exported == set(), f"{rule['alert']} uses metrics the gateway does not export"
        used |= names
    assert {
        "gateway_upstream_up",
        "gateway_slots_in_use",
        "gateway_queue_depth",
        "gateway_ttft_seconds_bucket",
        "gateway_spec_acceptance_rate_sum",
        "gateway_requests_total",
        "gateway_telemetry_clamped_total",
    } <= used


def test_alerts_watch_the_prefix_cache_source() -> None:
    used = {name for rule in alert_rules() for name in metric_names(rule["expr"])}
    assert "gateway_backend_prefix_cache_source" in used


def test_alert_rules_are_labelled_and_described() -> None:
    rules = alert_rules()
    assert len({rule["alert"] for rule in rules}) == len(rules)
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]


def test_prometheus_scrapes_the_gateway_with_the_metrics_token(compose: dict[str, Any]) -> None:
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    for rule_file in config["rule_files"]:
        assert (PROMETHEUS / rule_file).is_file()
    (job,) = config["scrape_configs"]
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:8080"]
    assert job["authorization"]["type"] == "Bearer"
    # Compose mounts secret `metrics_token` (from GATEWAY_METRICS_TOKEN) at /run/secrets/<name>.
    assert job["authorization"]["credentials_file"] == "/run/secrets/metrics_token"
    assert compose["services"]["prometheus"]["secrets"] == ["metrics_token"]
    assert "./prometheus:/etc/prometheus:ro" in compose["services"]["prometheus"]["volumes"]


@pytest.fixture(scope="module")
def promtool() -> str:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: run `make test-deps` (apt-get install prometheus)"
    return binary


@pytest.mark.parametrize("config_path", ["prometheus.yml", "../scale/prometheus.yml"])
def test_promtool_accepts_the_config(promtool: str, tmp_path: Path, config_path: str) -> None:
    # promtool checks that the credentials file exists: point it at a stand-in for the compose secret.
    # Laid out as the containers mount them: alerts.yml at the top, the scale-out config under scale/.
    token = tmp_path / "metrics_token"
    token.write_text("test-token\n")
    config = (PROMETHEUS / config_path).read_text()
    assert "/run/secrets/metrics_token" in config
    target = (
        tmp_path / Path(config_path).name if "/" not in config_path else tmp_path / "scale" / "prometheus.yml"
    )
    target.parent.mkdir(exist_ok=True)
    target.write_text(config.replace("/run/secrets/metrics_token", str(token)))
    shutil.copy(PROMETHEUS / "alerts.yml", tmp_path / "alerts.yml")
    checked = subprocess.run([promtool, "check", "config", str(target)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_promtool_accepts_the_rules(promtool: str) -> None:
    checked = subprocess.run(
        [promtool, "check", "rules", str(PROMETHEUS / "alerts.yml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- Grafana -------------------------------------------------------------------------------------


def container_to_host(service: dict[str, Any], container_path: str) -> Path:
    """Where a container path of ``service`` lives in the repository, through its bind mounts."""
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith(".") and (container_path + "/").startswith(target.rstrip("/") + "/"):
            return (DEPLOY / source / container_path[len(target) :].lstrip("/")).resolve()
    raise AssertionError(f"{container_path} is not bind-mounted from the repository")


def test_grafana_provisioning(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    provisioning = container_to_host(grafana, "/etc/grafana/provisioning")
    assert provisioning == (GRAFANA / "provisioning").resolve()

    (datasource,) = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    assert datasource["type"] == "prometheus"
    listen = next(a for a in compose["services"]["prometheus"]["command"] if a.startswith("--web.listen"))
    assert datasource["url"] == "http://" + listen.split("=", 1)[1]

    (provider,) = load_yaml(provisioning / "dashboards" / "dspark-gateway.yml")["providers"]
    dashboards = container_to_host(grafana, provider["options"]["path"])
    assert dashboards == (GRAFANA / "dashboards").resolve()
    assert (dashboards / "dspark-gateway.json").is_file()


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((GRAFANA / "dashboards" / "dspark-gateway.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_the_dashboard_shows_only_exported_metrics() -> None:
    exported = exported_names() | PROMETHEUS_SERIES
    for expr in dashboard_exprs():
        names = metric_names(expr)
        assert names and names <= exported, f"{expr}: {names - exported} not exported"


def test_the_dashboard_shows_the_prefix_cache() -> None:
    """Its source per backend, the hit ratio (cached / prompt tokens), the prediction error, the holds."""
    exprs = dashboard_exprs()
    shown = {name for expr in exprs for name in metric_names(expr)}
    assert {
        "gateway_backend_prefix_cache_source",
        "gateway_prefix_cache_prediction_error_tokens_sum",
        "gateway_prefix_cache_prediction_error_tokens_count",
        "gateway_backend_session_holds",
    } <= shown
    assert any('kind="cached"' in expr and 'kind="prompt"' in expr for expr in exprs)
