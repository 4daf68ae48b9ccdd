"""The OpenAI Batch API (gateway/http/batches.py, gateway/batch/), with the official ``openai`` SDK as
the client of a real gateway in front of the simulator: a batch's lines run through the request path
as its key's batch requests and are answered once each, in OpenAI's output and error file shapes; a
bad input file fails the batch before any line runs, with OpenAI's errors; a cancelled batch keeps
what it answered; another key sees none of it."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from dspark_sim import SimConfig, create_sim_app
from tests.conftest import FAST_SIM
from tests.support.gateway_process import GatewayProcess, clean_env
from tests.support.probes import scrape, wait_until
from tests.support.servers import ThreadedServer
from tests.support.sim_gate import Gate

MODEL = "deepseek-v4-flash-0731"
CHAT = "/v1/chat/completions"
#: Longest wait for ``/health`` while a batch is checked, seconds (see the test that uses it).
HEALTH_S = 2.0


def line(custom_id: str, url: str = "/v1/chat/completions", **body: Any) -> bytes:
    request = {"model": MODEL, "messages": [{"role": "user", "content": f"Say {custom_id}."}],
               "max_tokens": 8, **body}  # fmt: skip
    item = {"custom_id": custom_id, "method": "POST", "url": url, "body": request}
    return json.dumps(item).encode() + b"\n"


def hostile(custom_id: str, value: bytes) -> bytes:
    """A line whose body holds ``value`` (JSON text, written as it is) as field ``x``."""
    start = json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": {"model": MODEL}})
    return start[:-2].encode() + b', "x": ' + value + b"}}\n"


def client(gateway: Any, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def create(sdk: openai.OpenAI, file_id: str, endpoint: str = CHAT, window: str = "24h") -> Any:
    """``sdk.batches.create``, its endpoint and window unchecked (the gateway is to refuse bad ones)."""
    return sdk.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window=window)  # type: ignore[arg-type]


def upload(sdk: openai.OpenAI, content: bytes) -> str:
    """``content`` uploaded as a batch input file; its id."""
    return sdk.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch").id


def until_ended(sdk: openai.OpenAI, batch_id: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = sdk.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        time.sleep(0.1)
    raise AssertionError(f"batch {batch_id} still {batch.status}")


def results(sdk: openai.OpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    rows = [json.loads(row) for row in sdk.files.content(file_id).text.splitlines()]
    by_id = {row["custom_id"]: row for row in rows}
    assert len(by_id) == len(rows), "a custom_id answered twice"
    return by_id


def test_a_batch_runs_every_line_once_as_its_keys_requests(
    start_sim, start_gateway, make_key, admin, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files")
    owner = make_key("owner", models=(MODEL,))
    sdk, other = client(gateway, owner), client(gateway, make_key("other"))
    ids = [f"req-{n}" for n in range(12)]
    content = b"".join(line(i) for i in ids) + line("not-allowed", model="another-model")
    made = sdk.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")

    batch = sdk.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h",
        metadata={"run": "nightly"},
    )  # fmt: skip
    assert batch.status == "validating" and batch.metadata == {"run": "nightly"}
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError, match="No such File object"):  # another key's file
        create(other, made.id)
    assert other.batches.list().data == []

    done = until_ended(sdk, batch.id)
    assert done.status == "completed" and done.completed_at and done.in_progress_at and done.finalizing_at
    assert done.request_counts.total == 13
    assert (done.request_counts.completed, done.request_counts.failed) == (12, 1)
    answered = results(sdk, done.output_file_id)
    assert sorted(answered) == sorted(ids)
    for row in answered.values():
        response = row["response"]
        assert response["status_code"] == 200 and row["error"] is None
        assert response["request_id"].startswith("batch_req_") and row["id"] == response["request_id"]
        assert response["body"]["object"] == "chat.completion" and response["body"]["choices"][0]["message"]
    [refused] = results(sdk, done.error_file_id).values()
    assert refused["custom_id"] == "not-allowed" and refused["response"]["status_code"] == 404
    assert refused["response"]["body"]["error"]["code"] == "model_not_found"
    assert [b.id for b in sdk.batches.list().data] == [batch.id]
    with pytest.raises(openai.NotFoundError):  # its results are the owner's files
        other.files.content(done.output_file_id)

    lines = scrape(gateway.url)
    assert (
        lines["gateway_batch_lines_total{outcome=ok}"] == 12
        and lines["gateway_batch_lines_total{outcome=error}"] == 1
    )
    assert lines["gateway_batch_lines_waiting"] == 0
    rows = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}).json()
    mine = [r for r in rows["data"] if r["key_name"] == "owner"]
    assert len(mine) == 13 and {r["request_class"] for r in mine} == {"batch"}  # each line once, as batch
    assert {r["batch_id"] for r in mine} == {batch.id}
    assert sorted(r["client_request_id"] for r in mine) == sorted([*ids, "not-allowed"])  # their custom_id

    def by_batch() -> dict[str, int]:
        url, auth = gateway.url + "/admin/usage", {"Authorization": f"Bearer {admin}"}
        usage = httpx.get(url, params={"group_by": "batch"}, headers=auth).json()["data"]
        return {row["batch"]: row["requests"] for row in usage}

    wait_until(lambda: by_batch() == {batch.id: 13}, what="the ledger's usage by batch")  # flushed each 1 s


def test_a_bad_input_file_fails_the_batch_before_any_line_runs(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files", max_body_bytes=1024)
    sdk = client(gateway, make_key("owner"))
    content = (
        line("a") + b"{not json\n" + line("a") + line("b", url="/v1/completions") + b"[1, 2]\n"
        + json.dumps({"custom_id": "s", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": MODEL, "messages": [], "stream": True}}).encode() + b"\n"
        + line("x").replace(b'"x"', b'"\\ud800"', 1)  # a lone surrogate: JSON, but not text to store
        + line("y").replace(b'Say y.', b'Say \\ud800.', 1)
    )  # fmt: skip
    content += line("big", padding="x" * 2_000)  # past the gateway's body bound (1,024 bytes here)
    made = sdk.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = create(sdk, made.id)
    done = until_ended(sdk, batch.id)
    assert done.status == "failed" and done.failed_at and done.output_file_id is None
    errors = [(e.code, e.line, e.param) for e in done.errors.data]
    assert errors == [
        ("invalid_json_line", 2, None),
        ("duplicate_custom_id", 3, "custom_id"),
        ("mismatched_endpoint", 4, "url"),
        ("invalid_json_line", 5, None),
        ("invalid_body", 6, "body.stream"),
        ("invalid_custom_id", 7, "custom_id"),
        ("invalid_body", 8, "body"),
        ("line_too_large", 9, None),
    ]
    assert done.request_counts.completed == 0

    with pytest.raises(openai.NotFoundError, match="No such File object"):
        create(sdk, "file-nope")
    with pytest.raises(openai.BadRequestError, match="'endpoint' must be one of") as wrong:
        create(sdk, made.id, endpoint="/v1/embeddings")
    assert wrong.value.param == "endpoint"
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        create(sdk, made.id, window="1h")


def test_a_cancelled_batch_keeps_what_it_answered(start_sim, start_gateway, make_key, tmp_path: Path) -> None:
    sim = start_sim(decode_tps=40)  # 8 tokens a line: 0.2 s each, two at a time
    gateway = start_gateway(sim.url, files_dir=tmp_path / "files")
    sdk = client(gateway, make_key("owner"))
    content = b"".join(line(f"req-{n}") for n in range(60))
    made = sdk.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = create(sdk, made.id)
    deadline = time.monotonic() + 30
    while sdk.batches.retrieve(batch.id).request_counts.completed < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sdk.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = until_ended(sdk, batch.id)
    assert done.status == "cancelled" and done.cancelled_at and done.cancelling_at
    answered, missing = results(sdk, done.output_file_id), results(sdk, done.error_file_id)
    assert 4 <= len(answered) < 60 and len(answered) == done.request_counts.completed
    assert set(answered) | set(missing) == {f"req-{n}" for n in range(60)}
    assert not set(answered) & set(missing)
    assert {row["error"]["code"] for row in missing.values()} == {"batch_cancelled"}


@pytest.fixture
def closed_sim() -> Iterator[tuple[Gate, str]]:
    """The simulator behind a :class:`Gate` that holds every chat request until opened, and its URL
    (opened at the end, so nothing waits on it as the server stops)."""
    gate = Gate(create_sim_app(SimConfig(**FAST_SIM)), passed=0)
    server = ThreadedServer(gate).start()
    yield gate, server.url
    gate.open()
    server.stop()


def test_a_keys_small_batch_runs_beside_another_keys_large_one(
    closed_sim: tuple[Gate, str], start_gateway, make_key, tmp_path: Path
) -> None:
    """Key B's 5-line batch, made while key A's 60-line batch holds both slots, is run by the same
    process beside A's, the slots freed going to the keys in turns: B's completes first, A's lines
    still running (one batch after another, B's would wait for all 60 of A's). Each line once."""
    gate, sim_url = closed_sim
    gateway = start_gateway(sim_url, files_dir=tmp_path / "files", slots=2, batch_max_running=2)
    large_sdk, small_sdk = client(gateway, make_key("large")), client(gateway, make_key("small"))
    large_ids, small_ids = [f"a-{n}" for n in range(60)], [f"b-{n}" for n in range(5)]
    large = create(large_sdk, upload(large_sdk, b"".join(line(i) for i in large_ids)))
    wait_until(lambda: gate.held == 2, what="A's lines in both slots")
    small = create(small_sdk, upload(small_sdk, b"".join(line(i) for i in small_ids)))
    wait_until(lambda: small_sdk.batches.retrieve(small.id).status == "in_progress", what="B's batch running")
    gate.open()
    small_done = until_ended(small_sdk, small.id)
    large_then = large_sdk.batches.retrieve(large.id)
    assert small_done.status == "completed"
    assert large_then.status == "in_progress" and large_then.request_counts.completed < 60
    large_done = until_ended(large_sdk, large.id)
    assert large_done.status == "completed" and small_done.completed_at <= large_done.completed_at
    assert sorted(results(small_sdk, small_done.output_file_id)) == sorted(small_ids)
    assert sorted(results(large_sdk, large_done.output_file_id)) == sorted(large_ids)
    assert small_done.error_file_id is None and large_done.error_file_id is None


def test_a_spent_quota_pauses_a_batch_without_holding_up_another_keys(
    start_sim, start_gateway, make_key, database_url: str, tmp_path: Path
) -> None:
    """Key A's quota runs out mid-batch: its batch stays in_progress, given back until the quota resets,
    while key B's batch, made after it, runs to the end; a cancel then ends A's at once."""
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files")
    spent = client(gateway, make_key("spent", quota_tokens=600, quota_period="day"))
    other = client(gateway, make_key("other"))
    paused = create(spent, upload(spent, b"".join(line(f"a-{n}") for n in range(40))))
    wait_until(lambda: spent.batches.retrieve(paused.id).request_counts.completed >= 1, what="A's first line")
    later = until_ended(other, create(other, upload(other, line("b-0") + line("b-1"))).id)
    assert later.status == "completed" and later.request_counts.completed == 2

    def given_back() -> bool:  # no holder, and a lease time: paused until then
        with sqlite3.connect(database_url.split("///", 1)[1]) as db:
            holder, until = db.execute(
                "SELECT holder, lease_until FROM batches WHERE id = ?", (paused.id,)
            ).fetchone()
        return holder is None and until is not None

    wait_until(given_back, what="A's batch paused")
    now = spent.batches.retrieve(paused.id)
    assert (
        now.status == "in_progress"
        and 1 <= now.request_counts.completed < 40
        and now.request_counts.failed == 0
    )
    spent.batches.cancel(paused.id)
    done = until_ended(spent, paused.id, timeout_s=20)  # not the day the pause would last
    assert done.status == "cancelled" and done.request_counts.completed == now.request_counts.completed
    missing = results(spent, done.error_file_id)
    assert len(missing) == 40 - done.request_counts.completed
    assert {row["error"]["code"] for row in missing.values()} == {"batch_cancelled"}


def test_a_key_revoked_mid_batch_has_its_remaining_lines_refused(
    start_sim, start_gateway, make_key, revoke_key, database_url: str, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim(decode_tps=40).url, files_dir=tmp_path / "files")
    sdk = client(gateway, make_key("leaving"))
    made = upload(sdk, b"".join(line(f"r-{n}") for n in range(40)))
    batch = create(sdk, made)
    wait_until(lambda: sdk.batches.retrieve(batch.id).request_counts.completed >= 2, what="two lines")
    with pytest.raises(openai.BadRequestError, match="cancel it first"):  # its input is in use
        sdk.files.delete(made)
    revoke_key("leaving")  # its own key can no longer read the batch: the database says how it ended
    path = database_url.split("///", 1)[1]

    def stored() -> tuple[str, int, int]:
        with sqlite3.connect(path) as db:
            return db.execute(
                "SELECT status, completed, failed FROM batches WHERE id = ?", (batch.id,)
            ).fetchone()

    wait_until(lambda: stored()[0] == "completed", what="the batch ended")
    status, completed, failed = stored()
    assert completed + failed == 40 and completed >= 2 and failed >= 1
    with sqlite3.connect(path) as db:
        refused = [json.loads(r) for (r,) in db.execute("SELECT result FROM batch_lines WHERE ok = 0")]
    assert {r["response"]["status_code"] for r in refused} == {401}


def test_a_batch_past_its_window_expires_keeping_what_it_answered(
    start_sim, start_gateway, make_key, database_url: str, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim(decode_tps=40).url, files_dir=tmp_path / "files")
    sdk = client(gateway, make_key("late"))
    batch = create(sdk, upload(sdk, b"".join(line(f"e-{n}") for n in range(60))))
    wait_until(lambda: sdk.batches.retrieve(batch.id).request_counts.completed >= 2, what="two lines")
    with sqlite3.connect(database_url.split("///", 1)[1]) as db:  # its 24 h are over
        db.execute("UPDATE batches SET expires_at = '2000-01-01 00:00:00.000000' WHERE id = ?", (batch.id,))
    done = until_ended(sdk, batch.id)
    assert done.status == "expired" and done.expired_at and done.completed_at is None
    answered, missing = results(sdk, done.output_file_id), results(sdk, done.error_file_id)
    assert len(answered) == done.request_counts.completed >= 2 and len(answered) + len(missing) == 60
    assert {row["error"]["code"] for row in missing.values()} == {"batch_expired"}
    assert all(row["response"] is None for row in missing.values())


def test_hostile_lines_are_refused_by_their_shape_without_holding_up_the_gateway(
    make_key: Callable[..., str], database_url: str, tmp_path: Path
) -> None:
    """Three 31 MiB lines of ``[],[],…`` (ten million arrays each: seconds of parsing each, on the event
    loop before) fail the batch, each naming the bound it broke, while ``/health`` answers throughout.

    /health is asked in a loop from the batch's creation to its end, each answer awaited at most
    :data:`HEALTH_S`. Without the bound each line was parsed on the gateway's loop, ~3 s on this
    2-core machine (8 s in the report), so a health call waited that long; with it the loop waits at
    most one piece of a line's measure or a thread's turn (milliseconds). 2 s is far above that even
    with the machine loaded, and below what one such parse costs."""
    gateway = GatewayProcess(
        clean_env(database_url=database_url, files_dir=tmp_path / "files"), tmp_path / "gateway.log"
    ).start()
    try:
        sdk = client(gateway, make_key("hostile"))
        wide = b"[" + b"[]," * (31 * 1024 * 1024 // 3) + b"[]]"  # ten million arrays
        deep = b"[" * 100 + b"]" * 100
        content = line("fine") + b"".join(hostile(f"w{n}", wide) for n in range(3)) + hostile("deep", deep)
        made = upload(sdk, content)
        del content, wide
        slowest, stop = [0.0], threading.Event()

        def poll() -> None:
            with httpx.Client(timeout=HEALTH_S) as http:
                while not stop.is_set():
                    began = time.monotonic()
                    with contextlib.suppress(httpx.TimeoutException):  # counted as HEALTH_S below
                        http.get(gateway.url + "/health").raise_for_status()
                    slowest[0] = max(slowest[0], time.monotonic() - began)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            done = until_ended(sdk, create(sdk, made).id)
        finally:
            stop.set()
            poller.join()
        assert done.status == "failed" and done.request_counts.completed == 0
        errors = [(e.code, e.line) for e in done.errors.data]
        assert errors == [("line_too_complex", n) for n in (2, 3, 4, 5)]
        assert all("more than 10000 objects and arrays" in e.message for e in done.errors.data[:3])
        assert "nested more than 64 levels" in done.errors.data[3].message
        assert slowest[0] < HEALTH_S, f"/health waited {slowest[0]:.1f} s"
    finally:
        gateway.terminate()
        gateway.wait(timeout_s=30)


def test_a_batch_checked_by_a_gateway_that_kept_no_requests_is_checked_again_and_runs(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    """A batch under way whose kept requests are missing (validated by an older gateway, which kept
    none) is checked again by the gateway that takes it up, and every line is answered once."""
    sim, files = start_sim(decode_tps=40), tmp_path / "files"
    first = start_gateway(sim.url, files_dir=files)
    sdk = client(first, make_key("owner"))
    batch = create(sdk, upload(sdk, b"".join(line(f"k-{n}") for n in range(30))))
    wait_until(lambda: sdk.batches.retrieve(batch.id).request_counts.completed >= 2, what="two lines")
    first.stop()  # its lease given back
    kept = files / ".batches" / f"{batch.id}.requests"
    assert kept.exists()
    kept.unlink()
    second = start_gateway(sim.url, files_dir=files)
    again = client(second, sdk.api_key)
    done = until_ended(again, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 30
    assert sorted(results(again, done.output_file_id)) == sorted(f"k-{n}" for n in range(30))
    assert not kept.exists()  # removed when the batch ended


def test_an_interactive_request_takes_a_batch_lines_slot_back(
    start_sim, start_gateway, make_key, admin, tmp_path: Path
) -> None:
    """Two batch lines decoding hold both slots; a chat of another key takes the younger line's slot
    (GATEWAY_BATCH_PREEMPTION): that line is aborted (its ledger row: 503 ``preempted``) and sent again,
    and the batch still answers each line once, 200."""
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files", slots=2)
    sdk = client(gateway, make_key("nightly"))
    slow = {"messages": [{"role": "user", "content": "count from 1 to 9000 #sim:decode_tps=50"}],
            "max_tokens": 150}  # fmt: skip
    batch = create(sdk, upload(sdk, line("first", **slow) + line("second", **slow)))
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 2, what="both lines running")
    chat = httpx.post(
        gateway.url + CHAT, timeout=60, headers={"Authorization": f"Bearer {make_key('chat')}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "count to 3"}], "max_tokens": 8},
    )  # fmt: skip
    assert chat.status_code == 200
    done = until_ended(sdk, batch.id)
    assert done.status == "completed" and done.error_file_id is None
    answered = results(sdk, done.output_file_id)
    assert sorted(answered) == ["first", "second"]
    assert all(row["response"]["status_code"] == 200 for row in answered.values())

    def rows() -> list[dict]:
        listed = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"})
        return [r for r in listed.json()["data"] if r["key_name"] == "nightly"]

    wait_until(lambda: len(rows()) == 3, what="the batch's three attempts recorded")
    assert sorted(r["status"] for r in rows()) == [200, 200, 503]
