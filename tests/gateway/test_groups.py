"""Groups of keys through a real gateway: the admin API makes them and puts keys in them (audited);
the keys of a group share its requests per minute and its quota; the ledger totals by group; a group
with keys can't be deleted; refusals name what refused."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
HI = [{"role": "user", "content": "hi"}]


class Admin:
    def __init__(self, gateway, key: str) -> None:
        self.http = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {key}"})

    def __call__(self, method: str, path: str, status: int = 200, **body) -> dict:
        answer = self.http.request(method, path, json=body or None)
        assert answer.status_code == status, answer.text
        return answer.json()


@pytest.fixture
def stack(start_sim, start_gateway, make_key):
    gateway = start_gateway(start_sim().url)
    return gateway, Admin(gateway, make_key("ops", scopes=["admin"]))


def chat(gateway, key: str, **options) -> openai.types.chat.ChatCompletion:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    return client.chat.completions.create(model=MODEL, messages=HI, **{"max_tokens": 10, **options})


def test_a_groups_keys_share_its_requests_per_minute_and_its_quota(stack, make_key) -> None:
    gateway, admin = stack
    made = admin("POST", "/admin/groups", 201, name="search", rpm=3, quota_tokens=10_000, quota_period="day")
    assert (made["keys"], made["rpm"], made["quota_period"], made["quota_mode"]) == (0, 3, "day", "enforce")
    first, second = make_key("search-a"), make_key("search-b")
    for name in ("search-a", "search-b"):
        assert admin("PATCH", f"/admin/keys/{name}", group="search")["group"] == "search"
    chat(gateway, first)
    chat(gateway, second)
    chat(gateway, first)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(gateway, second)  # the group's third request this minute was the first key's
    assert refused.value.code == "rate_limit_requests" and "group" in refused.value.message
    mine = httpx.get(gateway.url + "/v1/key", headers={"Authorization": f"Bearer {second}"}).json()
    assert mine["group"] == {"name": "search", "rpm": 3, "tpm": None}
    wait_until(lambda: admin("GET", "/admin/usage?group_by=group")["data"] != [], what="the ledger")
    wait_until(
        lambda: admin("GET", "/admin/usage?group_by=group")["data"][0]["requests"] == 4, what="four rows"
    )
    [search] = admin("GET", "/admin/usage?group_by=group")["data"]
    assert search["group"] == "search"
    [quota] = mine["quotas"]
    assert quota["holder"] == "group" and quota["tokens"] == 10_000 and quota["used"] > 0
    listed = admin("GET", "/admin/groups")["data"]
    assert [(g["name"], g["keys"]) for g in listed] == [("search", 2)]


def test_a_spent_group_quota_refuses_every_key_of_the_group(stack, make_key) -> None:
    gateway, admin = stack
    admin("POST", "/admin/groups", 201, name="tiny", quota_tokens=40)
    first, second = make_key("tiny-a", group="tiny"), make_key("tiny-b", group="tiny")
    chat(gateway, first, max_tokens=30)
    with pytest.raises(openai.RateLimitError) as refused:
        chat(gateway, second, max_tokens=30)
    assert refused.value.code == "quota_exceeded" and "group's quota" in refused.value.message
    admin("PATCH", "/admin/groups/tiny", quota_mode="warn")  # watch it instead
    answer = openai.OpenAI(base_url=gateway.url + "/v1", api_key=second, max_retries=0)
    raw = answer.chat.completions.with_raw_response.create(model=MODEL, messages=HI, max_tokens=30)
    assert raw.headers["x-quota-warning"] == "group quota exceeded"


def test_groups_refuse_what_would_leave_a_key_nowhere_and_are_audited(stack, make_key) -> None:
    gateway, admin = stack
    group = admin("POST", "/admin/groups", 201, name="team")
    admin("POST", "/admin/groups", 409, name="team")
    assert admin("POST", "/admin/groups", 400, name="bad", rpm=0)["error"]["param"] == "rpm"
    for taken in (group["id"], "grp_0123", "jwt:alice", "bootstrap-admin"):  # another group's id, ...
        assert admin("POST", "/admin/groups", 400, name=taken)["error"]["param"] == "name", taken
    made = admin("POST", "/admin/keys", 201, name="member", group="team")
    assert made["group"] == "team"
    assert admin("POST", "/admin/keys", 400, name="lost", group="nowhere")["error"]["param"] == "group"
    assert admin("PATCH", "/admin/keys/member", 400, group="nowhere")["error"]["param"] == "group"
    assert admin("DELETE", "/admin/groups/team", 409)["error"]["code"] == "group_in_use"
    assert admin("PATCH", "/admin/keys/member", group=None)["group"] is None
    assert admin("DELETE", f"/admin/groups/{group['id']}") == {"id": group["id"], "deleted": True}
    admin("GET", "/admin/groups/team", 404)
    actions = [row["action"] for row in admin("GET", "/admin/audit")["data"]]
    assert {"group.create", "group.delete"} <= set(actions)
