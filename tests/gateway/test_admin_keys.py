"""The admin key API and the CLI against it, through a real gateway (audited, scoped, with rotation grace)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.clients import chat_ok
from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
CLI = str(Path(sys.executable).parent / "dspark-gateway")


@pytest.fixture
def admin_stack(start_sim, start_gateway, make_key):
    sim = start_sim()
    gateway = start_gateway(sim.url)
    admin = make_key("root", scopes=["admin"])
    return gateway, httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin}"})


def test_key_lifecycle_and_audit(admin_stack) -> None:
    gateway, admin = admin_stack
    created = admin.post(
        "/admin/keys",
        json={
            "name": "team-x",
            "models": [MODEL],
            "rpm": 100,
            "tpm": 50000,
            "max_concurrency": 2,
            "priority": 3,
            "metadata": {"team": "x"},
            "expires_at": "2099-01-01T00:00:00Z",
        },
    )
    assert created.status_code == 201, created.text
    key_id, secret = created.json()["id"], created.json()["key"]
    assert secret.startswith("dsk-") and chat_ok(gateway.url, secret)
    listed = admin.get("/admin/keys").json()["data"]
    assert {k["name"] for k in listed} == {"root", "team-x"} and all("key" not in k for k in listed)
    one = admin.get(f"/admin/keys/{key_id}").json()
    assert (one["rpm"], one["priority"], one["metadata"], one["status"]) == (100, 3, {"team": "x"}, "active")
    patched = admin.patch(f"/admin/keys/{key_id}", json={"rpm": None, "tpm": 90000, "priority": 5}).json()
    assert (patched["rpm"], patched["tpm"], patched["priority"]) == (None, 90000, 5)
    assert admin.post("/admin/keys", json={"name": "team-x"}).status_code == 409
    assert admin.patch(f"/admin/keys/{key_id}", json={"name": "renamed"}).status_code == 400
    assert admin.get("/admin/keys/key_nope").json()["error"]["code"] == "key_not_found"
    surrogate = b'{"name": "team-y", "metadata": {"team": "\\ud800"}}'  # a lone surrogate: no UTF-8 text
    refused = admin.post("/admin/keys", content=surrogate, headers={"content-type": "application/json"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "team", refused.text
    assert {k["name"] for k in admin.get("/admin/keys").json()["data"]} == {"root", "team-x"}  # none made

    rotated = admin.post(f"/admin/keys/{key_id}/rotate", json={"grace_s": 1.5}).json()
    new = rotated["key"]
    assert new != secret and rotated["previous_key_valid_until"]
    assert chat_ok(gateway.url, new) and chat_ok(gateway.url, secret)  # both work during the grace period
    wait_until(lambda: not chat_ok(gateway.url, secret), timeout_s=5, what="the old secret to expire")
    assert chat_ok(gateway.url, new)

    revoked = admin.post(f"/admin/keys/{key_id}/revoke")
    assert revoked.json()["status"] == "revoked"
    assert not chat_ok(gateway.url, new)  # at once in this process (cache invalidated)
    again = admin.post(f"/admin/keys/{key_id}/revoke")  # idempotent: the key as it is, no audit row
    assert again.status_code == 200 and again.json() == revoked.json()
    assert admin.delete(f"/admin/keys/{key_id}").json() == {"id": key_id, "deleted": True}
    assert admin.get(f"/admin/keys/{key_id}").status_code == 404

    audit = admin.get("/admin/audit").json()["data"]
    assert [a["action"] for a in audit][:5] == [
        "key.delete",
        "key.revoke",
        "key.rotate",
        "key.update",
        "key.create",
    ]
    assert all(a["actor"] == "root" and a["client"] == "127.0.0.1" for a in audit)
    assert secret not in str(audit) and new not in str(audit)


def test_client_keys_get_403_and_nobody_gets_in_without_a_key(admin_stack, make_key) -> None:
    gateway, _ = admin_stack
    client_key = make_key("client")
    for method, path in [("GET", "/admin/keys"), ("POST", "/admin/keys"), ("GET", "/admin/status"),
                         ("GET", "/admin/audit"), ("DELETE", "/admin/keys/x")]:  # fmt: skip
        forbidden = httpx.request(
            method, gateway.url + path, headers={"Authorization": f"Bearer {client_key}"}
        )
        assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "admin_required"
        assert httpx.request(method, gateway.url + path).status_code == 401
    # the body is read only after authentication
    anonymous = httpx.post(gateway.url + "/v1/chat/completions", content=b"{not json")
    assert anonymous.status_code == 401


def test_openapi_documents_the_admin_api(admin_stack) -> None:
    gateway, _ = admin_stack
    paths = httpx.get(gateway.url + "/openapi.json").json()["paths"]
    wanted = [
        "/admin/keys",
        "/admin/keys/{key_id}",
        "/admin/keys/{key_id}/rotate",
        "/admin/keys/{key_id}/revoke",
    ]
    wanted += ["/admin/status", "/admin/audit", "/admin/usage", "/v1/chat/completions"]
    assert set(wanted) <= set(paths)


def test_bootstrap_admin_from_its_sha256(start_sim, start_gateway) -> None:
    secret = "dsk-" + "B" * 43
    sim = start_sim()
    gateway = start_gateway(sim.url, admin_key_sha256=hashlib.sha256(secret.encode()).hexdigest())
    made = httpx.post(
        gateway.url + "/admin/keys", json={"name": "first"}, headers={"Authorization": f"Bearer {secret}"}
    )
    assert made.status_code == 201 and made.json()["key"].startswith("dsk-")


def test_cli_against_a_running_gateway(admin_stack, make_key) -> None:
    gateway, _ = admin_stack
    admin = make_key("cli-admin", scopes=["admin"])
    remote = ["--url", gateway.url, "--admin-key", admin]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, "keys", *args, *remote], capture_output=True, text=True, timeout=60)

    made = cli("create", "remote-team", "--rpm", "5", "--priority", "2")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    assert chat_ok(gateway.url, secret)
    assert "remote-team" in cli("list").stdout
    assert cli("update", "remote-team", "--tpm", "99").stdout == "Updated key 'remote-team': tpm.\n"
    rotated = cli("rotate", "remote-team", "--grace", "1h")
    assert rotated.returncode == 0 and chat_ok(gateway.url, rotated.stdout.strip().splitlines()[-1])
    assert cli("revoke", "remote-team").returncode == 0 and not chat_ok(gateway.url, secret)
    assert cli("delete", "remote-team").returncode == 0
    missing = cli("show", "remote-team")
    assert (
        missing.returncode == 1
        and missing.stderr == "error: the gateway answered 404: No key 'remote-team'.\n"
    )
    wrong = subprocess.run(
        [CLI, "keys", "list", "--url", gateway.url, "--admin-key", make_key("plain")],
        capture_output=True,
        text=True,
    )
    assert wrong.returncode == 1 and wrong.stderr.startswith("error: the gateway answered 403: ")


def test_expiry_as_a_lifetime_and_thinking_as_requests_name_it(admin_stack) -> None:
    gateway, admin = admin_stack
    before = datetime.now(UTC)
    made = admin.post(
        "/admin/keys", json={"name": "month", "expires_in": "30d", "default_thinking": "medium"}
    )
    assert made.status_code == 201, made.text
    expires = datetime.fromisoformat(made.json()["expires_at"])
    assert before + timedelta(days=30) <= expires <= datetime.now(UTC) + timedelta(days=30)
    assert made.json()["default_thinking"] == "high"  # medium is DeepSeek-V4's high, as for a request
    assert chat_ok(gateway.url, made.json()["key"])  # the key's default reaches the backend as a level

    patched = admin.patch("/admin/keys/month", json={"expires_in": "12h", "default_thinking": "xhigh"}).json()
    assert datetime.fromisoformat(patched["expires_at"]) <= datetime.now(UTC) + timedelta(hours=12)
    assert patched["default_thinking"] == "max"
    assert (
        admin.patch("/admin/keys/month", json={"default_thinking": "none"}).json()["default_thinking"]
        == "off"
    )
    for body, param, says in [
        ({"expires_in": "3d", "expires_at": "2099-01-01T00:00:00Z"}, None, "not both"),
        ({"expires_in": "3d", "expires_at": None}, None, "not both"),
        ({"expires_in": "soon"}, "expires_in", "invalid duration 'soon'"),
        ({"expires_in": 30}, "expires_in", "must be a duration"),
        ({"default_thinking": "extreme"}, "default_thinking", "must be one of off, low, high, max"),
    ]:
        for refused in (
            admin.post("/admin/keys", json={"name": "x", **body}),
            admin.patch("/admin/keys/month", json=body),
        ):
            error = refused.json()["error"]
            assert refused.status_code == 400, refused.text
            assert (error["code"], error["param"]) == ("invalid_request", param) and says in error["message"]
    assert "x" not in {k["name"] for k in admin.get("/admin/keys").json()["data"]}


def test_an_update_is_audited_field_by_field_before_and_after(admin_stack) -> None:
    """Even beside metadata nested as deep as a key's may be, and for a quota's period and mode set
    before the quota itself (the listing hides them while there is none)."""
    _, admin = admin_stack
    admin.post("/admin/keys", json={"name": "audited", "rpm": 5})
    deep = {"a": {"b": {"c": {"d": 1}}}}
    changed = admin.patch("/admin/keys/audited", json={"metadata": deep, "rpm": 6, "models": ["m"]})
    assert changed.status_code == 200, changed.text
    admin.patch("/admin/keys/audited", json={"quota_period": "week", "quota_mode": "warn"})
    first, second = [a for a in admin.get("/admin/audit").json()["data"] if a["action"] == "key.update"][:2]
    assert second["target_name"] == "audited" and second["detail"]["changes"] == {
        "metadata": {"from": {}, "to": deep},
        "rpm": {"from": 5, "to": 6},
        "models": {"from": None, "to": ["m"]},
    }
    assert first["detail"]["changes"] == {
        "quota_period": {"from": None, "to": "week"},
        "quota_mode": {"from": None, "to": "warn"},
    }


def test_a_revoked_key_gets_no_new_secret(admin_stack) -> None:
    _, admin = admin_stack
    admin.post("/admin/keys", json={"name": "gone"})
    admin.post("/admin/keys/gone/revoke")
    refused = admin.post("/admin/keys/gone/rotate", json={"grace_s": 0})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "key_revoked"
    assert admin.get("/admin/keys/gone").json()["status"] == "revoked"
