"""runtime/ compose files: valid against the Compose Specification, fed entirely by the env templates,
and launching exactly the command ``dspark_runtime.render`` prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark_runtime import load_profile, render
from dspark_runtime.profile import PROFILES_DIR, read_env_file
from tests.runtime.conftest import HEAD_TEMPLATE, RUNTIME, TEMPLATES, WORKER_TEMPLATE, argv_dict
from tests.support.compose_spec import compose_spec_errors

COMPOSE_FILES = sorted(p for pattern in ("*.yml", "*.yaml") for p in RUNTIME.rglob(pattern))
COMPOSE = RUNTIME / "docker-compose.yml"
#: ``${NAME}`` or ``${NAME<op>arg}``, the arg holding at most one level of ``${…}`` of its own
VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+?])((?:\$\{[^}]*\}|[^}])*))?\}")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:+alt}``, ``${VAR+alt}``;
    the default or alt interpolated in turn (``${VAR:+--flag ${VAR}}``)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), interpolate(match.group(3) or "", env)
        value = env.get(name)
        if op == ":-":
            return value if value else arg
        if op == "-":
            return value if value is not None else arg
        if op == ":+":
            return arg if value else ""
        if op == "+":
            return arg if value is not None else ""
        return value or ""

    return VARIABLE.sub(one, text)


def strings(node: Any) -> list[str]:
    """Every string (keys and values) of a parsed YAML document: what Compose interpolates."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*strings(k), *strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return [node] if isinstance(node, str) else []


def test_compose_files_exist() -> None:
    assert COMPOSE in COMPOSE_FILES


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: str(p.relative_to(RUNTIME)))
def test_compose_file_matches_the_compose_spec(path: Path) -> None:
    assert compose_spec_errors(path) == []


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: str(p.relative_to(RUNTIME)))
@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_compose_variable_is_in_the_env_template(path: Path, template: Path) -> None:
    used = {m.group(1) for text in strings(yaml.safe_load(path.read_text())) for m in VARIABLE.finditer(text)}
    assert used, "no ${VAR} found: the extraction is broken"
    missing = used - set(read_env_file(template))
    assert not missing, f"{template.name} lacks {sorted(missing)} used by {path.name}"


def test_service_shape() -> None:
    service = yaml.safe_load(COMPOSE.read_text())["services"]["vllm"]
    assert service["image"] == "${DSPARK_VLLM_IMAGE:-ghcr.io/anemll/dspark-vllm-gx10:0.1.1}"
    assert service["network_mode"] == "host" and service["ipc"] == "host"
    assert "/dev/infiniband:/dev/infiniband" in service["devices"]
    gpu = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and gpu["capabilities"] == ["gpu"]


@pytest.mark.parametrize(("rank", "template"), [(0, HEAD_TEMPLATE), (1, WORKER_TEMPLATE)])
@pytest.mark.parametrize("profile", ["balanced", "throughput"])
@pytest.mark.parametrize("traces", ["", "http://127.0.0.1:4318/v1/traces"])
def test_compose_launches_the_rendered_command(
    rank: int, template: Path, profile: str, traces: str, tmp_path: Path
) -> None:
    """The compose command, interpolated as ``--env-file NODE --env-file PROFILE`` does, equals render();
    with and without an OTLP traces endpoint in the node's file."""
    node = tmp_path / template.name
    node.write_text(
        template.read_text().replace("OTLP_TRACES_ENDPOINT=\n", f"OTLP_TRACES_ENDPOINT={traces}\n")
    )
    service = yaml.safe_load(COMPOSE.read_text())["services"]["vllm"]
    env = {**read_env_file(node), **read_env_file(PROFILES_DIR / f"{profile}.env")}
    assert env["OTLP_TRACES_ENDPOINT"] == traces
    assert service["entrypoint"] == ["/bin/bash", "-c"]
    words = shlex.split(interpolate(service["command"][0], env))
    assert words[:4] == ["umask", "0007", "&&", "exec"]
    expected_argv, expected_env = render(load_profile(profile, node), rank)
    assert ("--otlp-traces-endpoint" in expected_argv) == bool(traces)
    composed = argv_dict(words[4:])
    expected = argv_dict(expected_argv)
    # render prints the utilisation as a number (0.8); the env file says 0.80
    util = "--gpu-memory-utilization"
    assert float(str(composed.pop(util))) == float(str(expected.pop(util)))
    assert composed == expected
    environment = {k: interpolate(str(v), env) for k, v in service["environment"].items()}
    assert environment == expected_env


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_template_profile_section_is_the_balanced_profile(template: Path) -> None:
    balanced = read_env_file(PROFILES_DIR / "balanced.env")
    values = read_env_file(template)
    assert {k: values.get(k) for k in balanced} == balanced


def test_templates_document_the_fabric_variables() -> None:
    for template in TEMPLATES:
        text = template.read_text()
        for name in ("VLLM_HOST_IP", "NCCL_IB_GID_INDEX", "MASTER_ADDR"):
            lines = text.splitlines()
            index = next(i for i, line in enumerate(lines) if line.startswith(f"{name}="))
            assert lines[index - 1].startswith("#"), f"{template.name}: {name} has no comment"
    head, worker = (read_env_file(t) for t in TEMPLATES)
    assert (head["NODE_RANK"], head["HEADLESS"]) == ("0", "")
    assert (worker["NODE_RANK"], worker["HEADLESS"]) == ("1", "1")


def test_throughput_profile_is_marked_unqualified() -> None:
    text = (PROFILES_DIR / "throughput.env").read_text()
    assert text.startswith("# UNQUALIFIED")
    assert "DSPARK_ALLOW_UNQUALIFIED" not in read_env_file(PROFILES_DIR / "throughput.env")


@pytest.mark.parametrize(
    "value", ["http://c:4318/v1/traces; rm -rf /", "http://c/$(id)", "c:4318 --x", "ftp://c"]
)
def test_the_traces_endpoint_must_be_a_url(value: str, tmp_path: Path) -> None:
    """The compose file puts it into a ``bash -c`` line unquoted: nothing but a URL is accepted."""
    node = tmp_path / HEAD_TEMPLATE.name
    node.write_text(
        HEAD_TEMPLATE.read_text().replace("OTLP_TRACES_ENDPOINT=\n", f"OTLP_TRACES_ENDPOINT={value}\n")
    )
    with pytest.raises(ValueError, match="OTLP_TRACES_ENDPOINT"):
        load_profile("balanced", node)
