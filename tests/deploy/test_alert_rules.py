"""The alert rules, and the dashboard's prefix cache source panel, evaluated by Prometheus's own engine:
``promtool test rules`` over series as the gateway exports them, at one-minute scrapes, with the alerts
(and the panel's values) expected at each instant."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.telemetry.metrics import CACHE_SOURCES
from tests.deploy.conftest import DEPLOY, load_yaml

ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "dspark-gateway.json"


def rule(name: str) -> dict[str, Any]:
    rules = [r for group in load_yaml(ALERTS)["groups"] for r in group["rules"] if r.get("alert") == name]
    (found,) = rules
    return found


def source_series(backend: str, replica: str, sources: str) -> list[dict[str, str]]:
    """``gateway_backend_prefix_cache_source`` of one backend on one gateway replica, a minute a letter
    of ``sources``: ``v`` events, ``e`` estimate, ``o`` off (each minute one source is 1, the others 0)."""
    letters = dict(zip("veo", CACHE_SOURCES, strict=True))
    return [
        {
            "series": f'gateway_backend_prefix_cache_source{{backend="{backend}",instance="{replica}",'
            f'job="dspark-gateway",source="{source}"}}',
            "values": " ".join("1" if letters[letter] == source else "0" for letter in sources),
        }
        for source in CACHE_SOURCES
    ]


def requests(per_minute: int, minutes: int = 12) -> dict[str, str]:
    """``gateway_requests_total`` of one key's chat requests, ``per_minute`` more each minute."""
    labels = 'api="chat",instance="a",job="dspark-gateway",key="team-a",model="m",status="200"'
    return {"series": f"gateway_requests_total{{{labels}}}", "values": f"0+{per_minute}x{minutes}"}


def firing(backend: str) -> dict[str, Any]:
    """The alert as Prometheus fires it for ``backend``: its labels and its rendered annotations."""
    annotations = rule("GatewayPrefixCacheOnEstimate")["annotations"]
    return {
        "exp_labels": {"backend": backend, "severity": "warning"},
        "exp_annotations": {k: v.replace("{{ $labels.backend }}", backend) for k, v in annotations.items()},
    }


@pytest.fixture(scope="module")
def promtool() -> str:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: run `make test-deps` (apt-get install prometheus)"
    return binary


def run(promtool: str, tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "alerts_test.yml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": tests})
    )
    return subprocess.run([promtool, "test", "rules", str(spec)], capture_output=True, text=True)


def test_a_backend_on_the_estimate_for_five_minutes_fires(promtool: str, tmp_path: Path) -> None:
    series = [
        # never subscribed (the first start without GATEWAY_RUNTIME_PROFILE): fires after 5 minutes
        *source_series("spark1", "a", "e" * 12),
        # on its events throughout: quiet
        *source_series("spark2", "a", "v" * 12),
        # the estimate for 3 minutes twice (a vLLM restart, a reconnect), events between: quiet
        *source_series("spark3", "a", "eeevvveeevvv"),
        # no prefix cache at all (GATEWAY_PREFIX_CACHING=false): nothing to subscribe to, quiet
        *source_series("spark4", "a", "o" * 12),
        # one replica of two lost the events 2 minutes in: fires for the backend, from that replica
        *source_series("spark5", "a", "v" * 12),
        *source_series("spark5", "b", "vveeeeeeeeee"),
        requests(5),
    ]
    case = {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "GatewayPrefixCacheOnEstimate", "exp_alerts": []},
            {
                "eval_time": "6m",
                "alertname": "GatewayPrefixCacheOnEstimate",
                "exp_alerts": [firing("spark1")],
            },
            {
                "eval_time": "11m",
                "alertname": "GatewayPrefixCacheOnEstimate",
                "exp_alerts": [firing("spark1"), firing("spark5")],
            },
        ],
    }
    checked = run(promtool, tmp_path, [case])
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_idle_gateway_on_the_estimate_is_quiet(promtool: str, tmp_path: Path) -> None:
    """Started on an idle vLLM, a gateway is on the estimate until a request computes a block: no alert
    while no request comes; one once they come and the events do not."""
    idle = {
        "interval": "1m",
        "input_series": [*source_series("spark1", "a", "e" * 30), requests(0, 30)],
        "alert_rule_test": [
            {"eval_time": "29m", "alertname": "GatewayPrefixCacheOnEstimate", "exp_alerts": []}
        ],
    }
    busy = {**idle, "input_series": [*source_series("spark1", "a", "e" * 30), requests(1, 30)]}
    busy["alert_rule_test"] = [
        {"eval_time": "29m", "alertname": "GatewayPrefixCacheOnEstimate", "exp_alerts": [firing("spark1")]}
    ]
    checked = run(promtool, tmp_path, [idle, busy])
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_names_each_backends_source_as_the_alert_sees_it(promtool: str, tmp_path: Path) -> None:
    """The stat panel's value per backend, through its value mappings: ``estimate`` where a replica is
    on it (as the alert), ``events`` where every replica reads them, ``off`` without a prefix cache."""
    (panel,) = [
        p
        for p in json.loads(DASHBOARD.read_text())["panels"]
        if p["title"] == "Prefix cache source by backend"
    ]
    (target,) = panel["targets"]
    (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
    value = {shown["text"]: float(raw) for raw, shown in mapping["options"].items()}
    assert set(value) == set(CACHE_SOURCES)
    case = {
        "interval": "1m",
        "input_series": [
            *source_series("spark1", "a", "e" * 12),
            *source_series("spark2", "a", "v" * 12),
            *source_series("spark4", "a", "o" * 12),
            *source_series("spark5", "a", "v" * 12),
            *source_series("spark5", "b", "vveeeeeeeeee"),
        ],
        "promql_expr_test": [
            {
                "expr": target["expr"],
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": f'{{backend="{backend}"}}', "value": value[shown]}
                    for backend, shown in (
                        ("spark1", "estimate"),
                        ("spark2", "events"),
                        ("spark4", "off"),
                        ("spark5", "estimate"),
                    )
                ],
            }
        ],
    }
    checked = run(promtool, tmp_path, [case])
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_check_sees_a_wrong_expectation(promtool: str, tmp_path: Path) -> None:
    """The harness itself: promtool fails a case whose expected alerts are not what the rule does."""
    case = {
        "interval": "1m",
        "input_series": source_series("spark2", "a", "v" * 12),
        "alert_rule_test": [
            {
                "eval_time": "11m",
                "alertname": "GatewayPrefixCacheOnEstimate",
                "exp_alerts": [firing("spark2")],
            }
        ],
    }
    checked = run(promtool, tmp_path, [case])
    assert checked.returncode != 0 and "GatewayPrefixCacheOnEstimate" in checked.stdout + checked.stderr
