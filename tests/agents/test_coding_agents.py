"""Claude Code and Codex CLI, the real npm packages (``make test-deps`` installs them in
``.npm-agents/``), each finish a task that needs one tool call through the gateway to the simulator.

The prompt carries the simulator's directive (``#sim:call NAME {arguments}``), so the model calls the
agent's own shell tool; the agent runs the command (the file appears in its working directory),
sends the tool's result back in a second request, and the model's answer quotes it. Both agents run
with a throwaway home, their telemetry and update checks off: no network beyond loopback.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
AGENTS = Path(__file__).resolve().parents[2] / ".npm-agents" / "node_modules" / ".bin"


def agent(name: str) -> str:
    binary = AGENTS / name
    assert binary.exists(), f"{binary} is missing: run `make test-deps` (npm installs the coding agents)"
    return str(binary)


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "NO_COLOR": "1"}
    return subprocess.run(
        command,
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def gateway(start_sim, start_gateway):
    return start_gateway(start_sim().url, model_aliases="claude-*")


def test_claude_code_runs_a_tool_through_the_gateway(gateway, make_key, tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(), home.mkdir()
    prompt = 'Write hello to out.txt.\n#sim:call Bash {"command": "echo hello > out.txt"}'
    env = {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway.url,
        "ANTHROPIC_API_KEY": make_key("claude-code"),
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_SMALL_FAST_MODEL": "claude-haiku-4-5",  # reaches the served model by its alias
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = run(
        [agent("claude"), "-p", prompt, "--output-format", "json", "--allowedTools", "Bash"], work, env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "out.txt").read_text() == "hello\n"
    assert '"is_error":false' in done.stdout and "Tool result:" in done.stdout, done.stdout
    answered_twice(gateway.url, "messages", "claude-code")
    one_session(gateway.url, make_key("admin", scopes=["admin"]), "claude-code")


def answered_twice(url: str, api: str, key: str) -> None:
    """The gateway answered ``key`` twice on ``api``: the tool call, then the answer to its result. A
    request is counted when its record is written, just after the client read its last byte (which
    may be the agent's last act before it exits)."""
    name = f"gateway_requests_total{{api={api},key={key},model={MODEL},status=200}}"
    wait_until(lambda: scrape(url).get(name, 0) >= 2, timeout_s=10, what=f"two {api} requests counted")


def one_session(url: str, admin: str, key: str) -> None:
    """The agent's requests are turns of one session (recognised from what it sends: Claude Code's
    ``X-Claude-Code-Session-Id``, Codex's ``session-id``)."""
    rows = httpx.get(url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}).json()["data"]
    sessions = {row["session"] for row in rows if row["key_name"] == key}
    assert len(sessions) == 1 and None not in sessions, sessions


def test_codex_runs_a_tool_through_the_gateway(gateway, make_key, tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "codex"
    work.mkdir(), home.mkdir()
    (home / "config.toml").write_text(
        f'model = "{MODEL}"\nmodel_provider = "gw"\n\n'
        f'[model_providers.gw]\nname = "gw"\nbase_url = "{gateway.url}/v1"\nenv_key = "GW_KEY"\n'
        'wire_api = "responses"\n\n[analytics]\nenabled = false\n\n[features]\nplugins = false\n'
    )
    prompt = 'Write hello to out.txt.\n#sim:call exec_command {"cmd": "echo hello > out.txt"}'
    env = {"HOME": str(tmp_path), "CODEX_HOME": str(home), "GW_KEY": make_key("codex")}
    command = [
        agent("codex"),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        prompt,
    ]
    done = run(command, work, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "out.txt").read_text() == "hello\n"
    assert "Tool result:" in done.stdout, done.stdout + done.stderr
    answered_twice(gateway.url, "responses", "codex")
    one_session(gateway.url, make_key("admin", scopes=["admin"]), "codex")
