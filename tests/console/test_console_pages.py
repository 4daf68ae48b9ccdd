"""The console's pages with data behind them, over HTTP as a browser would send its forms: every page
renders; a key made, edited, rotated and revoked there is the admin API's (one audit trail); usage
exports as CSV and JSON; the live figures."""

from __future__ import annotations

import csv
import io
import json

import httpx
import openai

from tests.console.helpers import csrf_of, signed_in
from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"


def test_every_page_renders_and_key_changes_are_the_admin_apis(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url)
    admin = make_key("root", scopes=["admin"])
    api = {"Authorization": f"Bearer {admin}"}
    with signed_in(gateway, admin) as browser:
        token = csrf_of(browser.get("/console/keys").text)
        made = browser.post(
            "/console/keys", data={"name": "team-a", "rpm": "60", "models": MODEL, "csrf": token}
        )
        secret = made.text.split('<code id="secret">')[1].split("</code>")[0]
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
        for _ in client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        ):
            pass
        key_id = next(k["id"] for k in httpx.get(gateway.url + "/admin/keys", headers=api).json()["data"]
                      if k["name"] == "team-a")  # fmt: skip
        edited = browser.post(
            f"/console/keys/{key_id}",
            data={"csrf": token, "rpm": "", "tpm": "5000", "max_concurrency": "2", "priority": "3",
                  "default_thinking": "high", "models": "", "aliases": "gpt-4o=" + MODEL,
                  "metadata": '{"team": "a"}'},
        )  # fmt: skip
        assert edited.status_code == 303
        record = httpx.get(gateway.url + f"/admin/keys/{key_id}", headers=api).json()
        assert (record["rpm"], record["tpm"], record["max_concurrency"], record["priority"]) == (
            None,
            5000,
            2,
            3,
        )
        assert record["aliases"] == {"gpt-4o": MODEL} and record["metadata"] == {"team": "a"}
        assert record["models"] is None and record["default_thinking"] == "high"
        bad = browser.post(f"/console/keys/{key_id}", data={"csrf": token, "rpm": "-1"})
        assert bad.status_code == 400 and "rpm" in bad.text
        for path in ("/console", "/console/keys", "/console/usage", "/console/requests", "/console/audit",
                     "/console/batches"):  # fmt: skip
            page = browser.get(path)
            assert page.status_code == 200 and "<h1>" in page.text, path
        assert "team-a" in browser.get("/console/requests").text
        assert 'data-series-url="/console/usage/series.json?by=key"' in browser.get("/console/usage").text
        live = browser.get("/console/live.json").json()
        assert live["status"]["slots_total"] == 2 and live["figures"]["requests"] >= 1
        assert live["figures"]["ttft_p50_s"] is not None
        assert "cache_hit_ratio" in live["figures"] and "session_holds" in live["status"]["backends"][0]
        assert "Agent sessions held" in browser.get("/console").text
        exported = browser.get("/console/usage.csv", params={"group_by": "key"})
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert exported.headers["content-type"].startswith("text/csv")
        assert any(row["key"] == "team-a" and row["requests"] == "1" for row in rows)
        as_json = browser.get("/console/usage.json", params={"group_by": "model"}).json()
        assert as_json["group_by"] == "model" and as_json["data"][0]["model"] == MODEL
        rotated = browser.post(f"/console/keys/{key_id}/rotate", data={"csrf": token, "grace": "0"})
        assert "rotated" in rotated.text and secret not in rotated.text
        revoked = browser.post(f"/console/keys/{key_id}/revoke", data={"csrf": token})
        assert revoked.status_code == 303
    actions = [
        (row["actor"], row["action"])
        for row in httpx.get(gateway.url + "/admin/audit", headers=api).json()["data"]
    ]
    assert [a for a in actions if a[0] == "root"][:4] == [
        ("root", "key.revoke"), ("root", "key.rotate"), ("root", "key.update"), ("root", "key.create"),
    ]  # fmt: skip


def test_groups_are_made_joined_changed_and_deleted_from_the_console(
    start_sim, start_gateway, make_key
) -> None:
    gateway = start_gateway(start_sim().url)
    admin = make_key("root", scopes=["admin"])
    api = {"Authorization": f"Bearer {admin}"}
    make_key("member")
    with signed_in(gateway, admin) as browser:
        token = csrf_of(browser.get("/console/groups").text)
        made = browser.post(
            "/console/groups", data={"csrf": token, "name": "search", "rpm": "30", "quota_tokens": "5000"}
        )
        assert made.status_code == 303
        [group] = httpx.get(gateway.url + "/admin/groups", headers=api).json()["data"]
        assert (group["name"], group["rpm"], group["quota_tokens"], group["quota_period"]) == (
            "search", 30, 5000, "month",
        )  # fmt: skip
        joined = browser.post("/console/keys/member", data={"csrf": token, "group": "search"})
        assert joined.status_code == 303
        assert "group search" in browser.get("/console/keys").text
        page = browser.get("/console/groups").text
        assert "search" in page and "5,000 / 5,000 a month" in page and "/delete" not in page  # it has a key
        nowhere = browser.post("/console/keys/member", data={"csrf": token, "group": "nowhere"})
        assert nowhere.status_code == 400 and "nowhere" in nowhere.text
        changed = browser.post(
            f"/console/groups/{group['id']}",
            data={
                "csrf": token,
                "quota_mode": "warn",
                "was_quota_mode": "enforce",
                "rpm": "30",
                "was_rpm": "30",
                "prefix_cache": "shared",
                "was_prefix_cache": "group",
            },
        )
        assert changed.status_code == 303
        stored = httpx.get(gateway.url + "/admin/groups/search", headers=api).json()
        assert (stored["quota_mode"], stored["prefix_cache"]) == ("warn", "shared")
        assert "prefix cache shared" in browser.get("/console/groups").text
        in_use = browser.post(f"/console/groups/{group['id']}/delete", data={"csrf": token})
        assert in_use.status_code == 409 and "still has keys" in in_use.text
        browser.post("/console/keys/member", data={"csrf": token, "group": "", "was_group": "search"})
        assert browser.post(f"/console/groups/{group['id']}/delete", data={"csrf": token}).status_code == 303
        assert "No group yet" in browser.get("/console/groups").text


def test_the_batches_page_lists_every_keys_batches_with_their_progress(
    start_sim, start_gateway, make_key, tmp_path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files")
    admin = make_key("root", scopes=["admin"])
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("team-b"), max_retries=0)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    chat = "/v1/chat/completions"
    rows = [{"custom_id": f"p{n}", "method": "POST", "url": chat, "body": body} for n in range(3)]
    content = io.BytesIO("\n".join(map(json.dumps, rows)).encode())
    made = client.files.create(file=("in.jsonl", content), purpose="batch")
    batch = client.batches.create(input_file_id=made.id, endpoint=chat, completion_window="24h")
    wait_until(lambda: client.batches.retrieve(batch.id).status == "completed", what="the batch completed")
    with signed_in(gateway, admin) as browser:
        page = browser.get("/console/batches")
    assert page.status_code == 200 and "<h1>Batches</h1>" in page.text
    row = page.text.split(batch.id)[1].split("</tr>")[0]
    assert "completed" in row and "3 / 3" in row and '<progress max="3" value="3">' in row
