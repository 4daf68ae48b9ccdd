"""A batch's input checked once (gateway/batch/lines.py, gateway/batch/prepared.py): each line is
measured against a request body's shape bounds before it is parsed, refused with OpenAI's batch error
naming the bound, parsed once, and its request kept so that the run and the finalization read the
kept requests, never the input again."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from gateway.batch import lines
from gateway.batch.prepared import prepare, read_requests, remove, requests_path
from gateway.body.json_limits import JsonLimits
from gateway.storage.files import FileStore, StoredFile

CHAT = "/v1/chat/completions"
LIMITS = JsonLimits()


def line(custom_id: str, **body: object) -> bytes:
    request = {"model": "m", "messages": [{"role": "user", "content": f"Say {custom_id}."}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": request}).encode()


def wrapped(value: bytes) -> bytes:
    """A line whose body holds ``value`` (raw JSON text) as a field."""
    return (
        b'{"custom_id": "h", "method": "POST", "url": "'
        + CHAT.encode()
        + b'", "body": {"x": '
        + value
        + b"}}"
    )


def stored_file(directory: Path, content: bytes) -> tuple[FileStore, StoredFile]:
    files = FileStore(create_async_engine("sqlite+aiosqlite://"), directory, 1 << 30)
    stored = StoredFile(
        "file-in", "key", "in.jsonl", "batch", len(content), content.count(b"\n"), datetime.now(UTC)
    )
    directory.mkdir(parents=True, exist_ok=True)
    files.content(stored).write_bytes(content)
    return files, stored


async def test_each_line_is_parsed_once_and_its_request_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[int] = []
    real = lines.parse

    def counted(raw: bytes, index: int, *rest: object) -> object:
        parsed.append(index)
        return real(raw, index, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(lines, "parse", counted)
    ids = [f"r{n}" for n in range(300)]
    content = b"\n".join(line(i, padding="p" * 9_000) for i in ids[:150]) + b"\n\n"  # a blank line
    content += b"\n".join(line(i) for i in ids[150:])  # the last line without its newline
    files, stored = stored_file(tmp_path / "files", content)
    target = requests_path(files.directory, "batch_1")

    assert await prepare(files, stored, target, CHAT, 1 << 20, LIMITS) == (300, [])
    assert sorted(parsed) == [n for n in range(301) if n != 150]  # every line once, the blank one never
    files.content(stored).unlink()  # what follows reads the kept requests, not the input
    for _ in range(2):  # the run, then the finalization
        kept = [line async for line in read_requests(target)]
        assert [k.custom_id for k in kept] == ids
        assert kept[0].index == 0 and kept[150].index == 151
        assert json.loads(kept[3].body)["messages"][0]["content"] == "Say r3."
    assert len(parsed) == 300
    await remove(target)
    await remove(target)  # gone already: nothing to do
    assert not target.exists()


async def test_a_line_past_a_shape_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    wide = b"[" + b"[]," * 2_000_000 + b"[]]"  # 2,000,001 arrays: past 10,000 in its first piece
    deep = b"[" * 100 + b"]" * 100
    strings = b"[" + b'"s",' * 60_000 + b'"s"]'
    values = b"[" + b"1," * 1_200_000 + b"1]"
    content = b"\n".join([line("ok"), wrapped(wide), wrapped(deep), wrapped(strings), wrapped(values)])
    files, stored = stored_file(tmp_path / "files", content + b"\n")
    target = requests_path(files.directory, "batch_2")

    total, errors = await prepare(files, stored, target, CHAT, 1 << 24, LIMITS)
    assert total == 5
    assert [(e.code, e.line) for e in errors] == [("line_too_complex", n) for n in (2, 3, 4, 5)]
    assert "more than 10000 objects and arrays" in errors[0].message
    assert "nested more than 64 levels" in errors[1].message
    assert "more than 50000 strings" in errors[2].message
    assert "more than 1100000 values" in errors[3].message
    assert errors[0].as_openai() == {"code": "line_too_complex", "message": errors[0].message, "param": None,
                                     "line": 2}  # fmt: skip
    assert not target.exists() and list(target.parent.iterdir()) == []  # nothing kept of a refused input
