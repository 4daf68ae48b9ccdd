"""What keys may keep in the Files API (gateway/storage/file_bounds.py), with the official ``openai``
SDK as the client of a real gateway: a key's and a group's bytes and file count, the gateway's total
and the disk's free space; an upload counts against the key's requests per minute. A refused upload
leaves nothing behind, and what another key keeps is its own."""

from __future__ import annotations

import io
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}\n'


def client(gateway: object, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)  # type: ignore[attr-defined]


def upload(sdk: openai.OpenAI, size: int) -> str:
    return sdk.files.create(file=("in.jsonl", io.BytesIO(b"x" * size)), purpose="batch").id


def refused(sdk: openai.OpenAI, size: int, match: str) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError, match=match) as error:
        upload(sdk, size)
    return error.value


def kept(files: Path) -> list[str]:
    return sorted(p.name for p in files.iterdir())


def test_a_key_keeps_at_most_its_bytes_and_its_count_of_files(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    gateway = start_gateway(
        start_sim().url, files_dir=files, files_max_bytes_per_key=1000, files_max_count_per_key=2
    )
    mine, theirs = client(gateway, make_key("owner")), client(gateway, make_key("other"))

    first = upload(mine, 600)
    over = refused(mine, 600, "this key may keep 1000 bytes of files \\(600 kept\\)")
    assert over.status_code == 400 and over.code == "storage_quota_exceeded"
    assert over.type == "invalid_request_error"  # OpenAI's answer to a full file storage quota
    assert kept(files) == [first]  # the refused upload left nothing
    second = upload(mine, 400)  # exactly the bytes left
    count = refused(mine, 1, "this key may keep 2 files \\(2 kept\\)")
    assert count.status_code == 400 and count.code == "storage_quota_exceeded"
    assert upload(theirs, 900)  # another key's files are its own

    mine.files.delete(second)
    assert upload(mine, 400)  # room again
    assert len(kept(files)) == 3


def test_the_keys_of_a_group_share_its_bytes_and_its_count(
    start_sim, start_gateway, make_key, admin, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    gateway = start_gateway(
        start_sim().url,
        files_dir=files,
        files_max_bytes_per_key=None,
        files_max_count_per_key=None,
        files_max_bytes_per_group=1000,
        files_max_count_per_group=2,
    )
    made = httpx.post(gateway.url + "/admin/groups", headers={"Authorization": f"Bearer {admin}"},
                      json={"name": "team"})  # fmt: skip
    assert made.status_code == 201, made.text
    one, two = client(gateway, make_key("one", group="team")), client(gateway, make_key("two", group="team"))
    alone = client(gateway, make_key("alone"))

    upload(one, 600)
    over = refused(two, 600, "this key's group may keep 1000 bytes of files \\(600 kept\\)")
    assert over.status_code == 400 and over.code == "storage_quota_exceeded"
    upload(two, 400)
    assert refused(one, 1, "this key's group may keep 2 files").status_code == 400
    for _ in range(3):
        upload(alone, 600)  # a key in no group: no group bound
    assert len(kept(files)) == 5


def test_the_gateways_storage_full_is_507_and_leaves_nothing(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    sim = start_sim()
    total = start_gateway(sim.url, files_dir=files, files_max_total_bytes=1000)
    a, b = client(total, make_key("a")), client(total, make_key("b"))
    upload(a, 700)
    full = refused(b, 700, "The gateway's storage is full: the files of every key may take 1000 bytes")
    assert full.status_code == 507 and full.code == "insufficient_storage" and full.type == "server_error"
    assert len(kept(files)) == 1

    # a disk with less free space than the gateway keeps: every upload refused, before it is written
    disk = start_gateway(sim.url, files_dir=files, files_min_free_bytes=2**62)
    low = refused(client(disk, make_key("c")), 10, "less than 4611686018427387904")
    assert low.status_code == 507 and low.code == "insufficient_storage"
    assert len(kept(files)) == 1


def test_an_upload_counts_against_the_keys_requests_per_minute(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files")
    sdk = client(gateway, make_key("owner", rpm=2))
    made = sdk.files.with_raw_response.create(file=("in.jsonl", io.BytesIO(LINE)), purpose="batch")
    assert made.headers["x-ratelimit-limit-requests"] == "2"
    assert made.headers["x-ratelimit-remaining-requests"] == "1"
    upload(sdk, 10)
    with pytest.raises(openai.RateLimitError) as limited:
        upload(sdk, 10)
    assert limited.value.code == "rate_limit_requests"
    assert len(list((tmp_path / "files").iterdir())) == 2


def test_a_message_batchs_input_counts_as_an_upload_of_its_key(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files", files_max_count_per_key=1)
    key = make_key("owner", rpm=2)
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)
    asked = [{"custom_id": "a", "params": {"model": "deepseek-v4-flash-0731", "max_tokens": 5,
                                            "messages": [{"role": "user", "content": "hi"}]}}]  # fmt: skip
    upload(client(gateway, key), 10)
    with pytest.raises(anthropic.BadRequestError, match="this key may keep 1 files") as full:
        claude.messages.batches.create(requests=asked)  # type: ignore[arg-type]
    assert full.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]  # Anthropic's shape
    with pytest.raises(anthropic.RateLimitError):  # the upload and the create were the key's 2 a minute
        claude.messages.batches.create(requests=asked)  # type: ignore[arg-type]
    assert len(list((tmp_path / "files").iterdir())) == 1
