"""``runtime check`` against the gateway's env file: deploy/.env.example agrees with the profile it names
(KV cache events, slots, model, block size); a gateway env that would run on the estimate, or
disagree with vLLM, is refused with the variable to set."""

from __future__ import annotations

from pathlib import Path

from dspark_runtime import load_profile
from dspark_runtime.gateway_check import check_gateway
from dspark_runtime.profile import read_env_file
from tests.runtime.conftest import HEAD_TEMPLATE, REPO, TEMPLATE_ARGS, runtime

ENV_EXAMPLE = REPO / "deploy" / ".env.example"


def example() -> dict[str, str]:
    return read_env_file(ENV_EXAMPLE)


def settings(problems: list) -> set[str]:
    assert all(p.where == "gateway" for p in problems), problems
    return {p.setting for p in problems}


def test_the_example_agrees_with_the_profile_it_names() -> None:
    env = example()
    assert check_gateway(load_profile(env["GATEWAY_RUNTIME_PROFILE"], HEAD_TEMPLATE), env) == []


def test_without_a_profile_or_endpoints_the_gateway_would_run_on_the_estimate() -> None:
    env = {k: v for k, v in example().items() if k != "GATEWAY_RUNTIME_PROFILE"}
    problems = check_gateway(load_profile("balanced"), env)
    assert settings(problems) == {
        "GATEWAY_KV_EVENTS",
        "GATEWAY_KV_EVENTS_REPLAY",
        "GATEWAY_SLOTS",
        "GATEWAY_SERVED_MODEL",
        "GATEWAY_KV_BLOCK_SIZE",
    }
    (events,) = [p for p in problems if p.setting == "GATEWAY_KV_EVENTS"]
    assert "estimate" in events.reason and "GATEWAY_RUNTIME_PROFILE=balanced" in events.reason


def test_explicit_settings_that_match_vllm_pass_without_the_profile() -> None:
    env = {
        "GATEWAY_KV_EVENTS": "spark1=ipc:///run/dspark-kv/events,spark2=tcp://127.0.0.1:5600",
        "GATEWAY_KV_EVENTS_REPLAY": "spark1=ipc:///run/dspark-kv/replay",
        "GATEWAY_SLOTS": "2",
        "GATEWAY_SERVED_MODEL": "deepseek-v4-flash-0731",
        "GATEWAY_KV_BLOCK_SIZE": "256",
    }
    assert check_gateway(load_profile("balanced"), env) == []


def test_a_gateway_that_disagrees_with_vllm_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "moved.env"
    elsewhere.write_text(
        Path(REPO / "dspark_runtime/profiles/balanced.env").read_text() + "KV_EVENTS_DIR=/run/other\n"
    )
    env = {**example(), "GATEWAY_RUNTIME_PROFILE": str(elsewhere), "GATEWAY_KV_BLOCK_SIZE": "16"}
    assert settings(check_gateway(load_profile("balanced"), env)) == {
        "GATEWAY_KV_EVENTS",
        "GATEWAY_KV_EVENTS_REPLAY",
        "GATEWAY_KV_BLOCK_SIZE",
    }
    # the example's balanced gateway in front of the throughput profile's six sequences
    assert settings(check_gateway(load_profile("throughput"), example())) == {"GATEWAY_SLOTS"}
    bound = {**example(), "GATEWAY_KV_EVENTS_BIND": "true", "GATEWAY_PREFIX_CACHING": "false"}
    assert settings(check_gateway(load_profile("balanced"), bound)) == {
        "GATEWAY_KV_EVENTS_BIND",
        "GATEWAY_PREFIX_CACHING",
    }
    missing = {**example(), "GATEWAY_RUNTIME_PROFILE": str(tmp_path / "none.env")}
    assert "GATEWAY_RUNTIME_PROFILE" in settings(check_gateway(load_profile("balanced"), missing))


def test_the_command_checks_the_gateway_env(tmp_path: Path) -> None:
    ok = runtime("check", "--profile", "balanced", *TEMPLATE_ARGS, "--gateway-env", str(ENV_EXAMPLE))
    assert ok.returncode == 0 and f"gateway {ENV_EXAMPLE}" in ok.stdout, ok.stdout + ok.stderr
    without = tmp_path / "gateway.env"
    without.write_text(
        ENV_EXAMPLE.read_text().replace("GATEWAY_RUNTIME_PROFILE=", "# GATEWAY_RUNTIME_PROFILE=")
    )
    refused = runtime("check", "--profile", "balanced", *TEMPLATE_ARGS, "--gateway-env", str(without))
    assert refused.returncode == 1 and "GATEWAY_KV_EVENTS" in refused.stdout, refused.stdout
