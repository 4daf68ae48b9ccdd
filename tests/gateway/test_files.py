"""The OpenAI Files API (gateway/http/files.py, gateway/storage/files.py), with the official ``openai``
SDK as the client of a real gateway: an upload kept as the key's (its bytes and lines, its content
read back), listed with OpenAI's paging, deleted; another key sees none of it; bad uploads refused in
OpenAI's error shape, leaving nothing behind."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import openai
import pytest

LINES = [
    b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}\n',
    b'{"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}',
]


def client(gateway: object, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)  # type: ignore[attr-defined]


def test_a_file_is_kept_read_back_listed_and_deleted_for_its_key_only(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files")
    mine, theirs = client(gateway, make_key("owner")), client(gateway, make_key("other"))
    content = b"".join(LINES)

    made = mine.files.create(file=("input.jsonl", io.BytesIO(content)), purpose="batch")
    assert made.id.startswith("file-") and made.object == "file" and made.purpose == "batch"
    assert made.bytes == len(content) and made.filename == "input.jsonl" and made.status == "processed"
    assert mine.files.retrieve(made.id) == made
    assert mine.files.content(made.id).content == content
    assert [p.name for p in (tmp_path / "files").iterdir()] == [made.id]  # no temporary file left

    second = mine.files.create(file=("C:\\dir\\more.jsonl", io.BytesIO(LINES[0])), purpose="batch")
    assert second.filename == "more.jsonl"  # its last path part
    listed = mine.files.list()
    assert [f.id for f in listed.data] == [second.id, made.id]  # newest first
    page = mine.files.list(limit=1, order="asc")
    assert [f.id for f in page.data] == [made.id] and page.has_more
    assert [f.id for f in mine.files.list(limit=1, order="asc", after=made.id).data] == [second.id]
    assert [f.id for f in mine.files.list(purpose="batch").data] == [second.id, made.id]

    for read in (theirs.files.retrieve, theirs.files.content, theirs.files.delete):
        with pytest.raises(openai.NotFoundError, match=f"No such File object: {made.id}"):
            read(made.id)
    assert theirs.files.list().data == []

    gone = mine.files.delete(made.id)
    assert gone.id == made.id and gone.deleted
    with pytest.raises(openai.NotFoundError):
        mine.files.retrieve(made.id)
    assert [p.name for p in (tmp_path / "files").iterdir()] == [second.id]


def test_bad_uploads_are_refused_in_openais_shape_and_leave_nothing(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    gateway = start_gateway(start_sim().url, files_dir=files, files_max_bytes=1000)
    key = make_key("owner")
    sdk = client(gateway, key)

    with pytest.raises(openai.BadRequestError, match="'purpose' must be one of batch") as refused:
        sdk.files.create(file=("x.jsonl", io.BytesIO(LINES[0])), purpose="fine-tune")
    assert refused.value.param == "purpose"
    with pytest.raises(openai.APIStatusError, match="larger than 1000 bytes") as big:
        sdk.files.create(file=("x.jsonl", io.BytesIO(LINES[0] * 20)), purpose="batch")
    assert big.value.status_code == 413

    url, auth = gateway.url + "/v1/files", {"Authorization": f"Bearer {key}"}
    no_file = httpx.post(url, headers=auth, files={"purpose": (None, "batch")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    not_a_form = httpx.post(url, headers=auth, json={"purpose": "batch"})
    assert not_a_form.status_code == 400 and "multipart/form-data" in not_a_form.json()["error"]["message"]
    form = httpx.Request("POST", url, files={"file": ("x.jsonl", LINES[0])}, data={"purpose": "batch"})
    framing = {**auth, "content-type": form.headers["content-type"]}
    cut = httpx.post(url, headers=framing, content=form.read()[:-20])
    assert cut.status_code == 400 and "closing boundary" in cut.json()["error"]["message"]
    twice = httpx.post(url, headers=auth, files=[("purpose", (None, "batch")), ("purpose", (None, "batch")),
                                                 ("file", ("x.jsonl", LINES[0]))])  # fmt: skip
    assert twice.status_code == 400 and "repeats 'purpose'" in twice.json()["error"]["message"]
    raw = (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--b\r\n'
           b'Content-Disposition: form-data; name="file"; filename="a\x00b.jsonl"\r\n\r\n' + LINES[0]
           + b"\r\n--b--\r\n")  # fmt: skip
    nul = httpx.post(url, headers={**auth, "content-type": "multipart/form-data; boundary=b"}, content=raw)
    assert nul.status_code == 200 and nul.json()["filename"] == "ab.jsonl"  # no NUL kept (a database refuses)
    sdk.files.delete(nul.json()["id"])
    anonymous = httpx.post(url, files={"file": ("x.jsonl", LINES[0])}, data={"purpose": "batch"})
    assert anonymous.status_code == 401

    assert sdk.files.list().data == []
    assert not files.exists() or list(files.iterdir()) == []  # no upload left half-written
