"""Prometheus compatibility with a REAL Prometheus server, and the Grafana dashboard's metric names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until
from tests.support.servers import free_port

MODEL = "deepseek-v4-flash-0731"
DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "dashboards" / "dspark-gateway.json"
PROMQL_WORDS = {
    "sum", "rate", "by", "le", "histogram_quantile", "label_values", "model", "key", "kind", "status",
    "source", "backend", "instance", "avg", "max", "min", "count", "irate", "increase", "without", "on",
    "ignoring",
}  # fmt: skip


@pytest.fixture
def prometheus(tmp_path: Path):
    """Start `prometheus` (Debian package, installed by `make test-deps`) on a free loopback port."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: run `make test-deps` (apt-get install prometheus)"
    processes: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs:\n  - job_name: gateway\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        log = (tmp_path / "prometheus.log").open("wb")
        processes.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=log,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=20)


def query(url: str, promql: str) -> list:
    """Instant query; [] while Prometheus is still starting."""
    try:
        response = httpx.get(url + "/api/v1/query", params={"query": promql}, timeout=5)
    except httpx.HTTPError:
        return []
    return response.json()["data"]["result"] if response.status_code == 200 else []


def test_real_prometheus_scrapes_the_gateway(start_sim, start_gateway, make_key, prometheus) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("team-prom"), max_retries=0)
    for _ in range(3):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "count from 1 to 5"}]
        )
    prom = prometheus(gateway.url.removeprefix("http://"))

    def counted() -> bool:
        result = query(prom, 'sum(gateway_requests_total{key="team-prom", status="200"})')
        return bool(result) and float(result[0]["value"][1]) == 3

    wait_until(counted, timeout_s=30, what="Prometheus to scrape 3 requests")
    e2e = query(prom, "histogram_quantile(0.5, sum by (le) (gateway_e2e_seconds_bucket))")
    assert e2e and float(e2e[0]["value"][1]) > 0
    lag = query(prom, "sum(gateway_event_loop_lag_seconds_count)")
    assert lag and float(lag[0]["value"][1]) > 0


def dashboard_metric_names() -> set[str]:
    names: set[str] = set()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for expr in exprs:
        expr = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^]]*\]', "", expr)
        names |= {w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr) if w not in PROMQL_WORDS}
    return names


def test_every_metric_the_dashboard_queries_is_exported(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, backend_poll_s=0.1)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("dash"), max_retries=0)
    for _ in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        pass
    # a prompt counted by the backend (past GATEWAY_TOKENIZE_MIN_BYTES) gets a cache prediction
    long_prompt = [{"role": "user", "content": "explain the build in detail " * 700}]
    client.chat.completions.create(model=MODEL, messages=long_prompt, max_tokens=4)
    wait_until(lambda: "gateway_spec_acceptance_rate_bucket" in scrape(gateway.url), what="a finished record")
    wait_until(lambda: "gateway_backend_requests_running" in scrape(gateway.url), what="a backend poll")
    wait_until(
        lambda: any(n.startswith("gateway_prefix_cache_prediction_error") for n in scrape(gateway.url)),
        what="a cache prediction",
    )
    exported = set(scrape(gateway.url))
    wanted = dashboard_metric_names()
    assert {"gateway_ttft_seconds_bucket", "gateway_slots_in_use", "gateway_tokens_total"} <= wanted
    assert wanted - exported == set()


def test_metrics_have_the_process_series_and_no_created_series(start_sim, start_gateway, make_key) -> None:
    """What prometheus-client's default registry would export about the process is there (the
    gateway keeps a registry of its own), and no ``*_created`` series doubles every counter and
    histogram."""
    sim = start_sim()
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("proc"), max_retries=0)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    wait_until(lambda: "gateway_requests_total" in scrape(gateway.url), what="a finished record")
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
            "process_open_fds", "python_info", "python_gc_objects_collected_total"} <= names  # fmt: skip
    assert {"gateway_requests_total", "http_requests_total"} <= names
    assert not [name for name in names if name.endswith("_created")]
    assert "# TYPE gateway_requests_created" not in text
