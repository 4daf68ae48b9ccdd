"""deploy/systemd/dspark-gateway.service: bare-metal unit with the hardening the deployment relies on."""

from __future__ import annotations

import configparser
import re

from tests.deploy.conftest import DEPLOY

UNIT = DEPLOY / "systemd" / "dspark-gateway.service"


def parse_unit() -> configparser.ConfigParser:
    # strict=False: systemd allows repeated keys (Environment=, SystemCallFilter=); the last one wins here.
    parser = configparser.ConfigParser(strict=False, interpolation=None, empty_lines_in_values=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def minutes(value: str) -> float:
    match = re.fullmatch(r"(\d+)\s*(min|m|h|s)", value)
    assert match, value
    return int(match.group(1)) * {"s": 1 / 60, "m": 1, "min": 1, "h": 60}[match.group(2)]


def test_unit_runs_the_venv_gateway_on_loopback() -> None:
    service = parse_unit()["Service"]
    assert service["User"] not in ("", "root")
    assert service["EnvironmentFile"] == "/etc/dspark-gateway/env"
    exec_start = service["ExecStart"].split()
    assert exec_start[:2] == ["/opt/dspark-gateway/.venv/bin/dspark-gateway", "serve"]
    assert exec_start[exec_start.index("--host") + 1] == "127.0.0.1"


def test_unit_is_hardened() -> None:
    service = parse_unit()["Service"]
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["PrivateTmp"] == "yes"
    assert service["ProtectHome"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"


def test_the_database_directory_is_writable() -> None:
    service = parse_unit()["Service"]
    database = re.search(r"sqlite\+aiosqlite:///(/\S+)/gateway\.db", UNIT.read_text())
    assert database, "the unit must set GATEWAY_DATABASE_URL"
    assert database.group(1) in service["ReadWritePaths"].split()
    assert database.group(1) == "/var/lib/" + service["StateDirectory"]


def test_stop_timeout_lets_streams_drain() -> None:
    # SIGTERM drains in-flight requests; a 1M-token prefill alone takes ~18 minutes.
    assert minutes(parse_unit()["Service"]["TimeoutStopSec"]) >= 20
