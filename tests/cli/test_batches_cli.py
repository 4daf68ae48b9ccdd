"""``dspark-gateway batches`` and ``files`` as an operator runs them, on the database and through a
running gateway's admin API (``--url``): every key's batches listed, shown, waited for with progress,
cancelled; files listed and deleted (refused while a batch reads them); each change audited."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import openai

from tests.cli.conftest import MODEL, Cli, error_of

CHAT = "/v1/chat/completions"


def batch_lines(count: int) -> bytes:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    rows = ({"custom_id": f"c{n}", "method": "POST", "url": CHAT, "body": body}
            for n in range(count))  # fmt: skip
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def test_operators_see_wait_for_cancel_and_clean_up_every_keys_batches(
    cli: Cli, start_sim, start_gateway, make_key: Callable[..., str], tmp_path: Path
) -> None:
    files_dir = tmp_path / "files"
    gateway = start_gateway(start_sim(decode_tps=40).url, files_dir=files_dir)
    admin = make_key("root", scopes=["admin"])
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("team-a"), max_retries=0)
    quick_file = sdk.files.create(file=("q.jsonl", io.BytesIO(batch_lines(3))), purpose="batch")
    quick = sdk.batches.create(input_file_id=quick_file.id, endpoint=CHAT, completion_window="24h")
    remote = ("--url", gateway.url, "--admin-key", admin)

    waited = cli("batches", "wait", quick.id, "--every", "0.2", *remote)
    assert waited.stdout.startswith(f"{quick.id} (") and "completed, 3 done, 0 failed of 3" in waited.stdout
    assert "output file file-" in waited.stdout

    slow_file = sdk.files.create(file=("s.jsonl", io.BytesIO(batch_lines(200))), purpose="batch")
    slow = sdk.batches.create(input_file_id=slow_file.id, endpoint=CHAT, completion_window="24h")
    listed = json.loads(cli("batches", "list", "--key", "team-a", "--json", *remote).stdout)
    assert [b["id"] for b in listed] == [slow.id, quick.id] and len({b["key_id"] for b in listed}) == 1
    refused = cli("files", "delete", slow_file.id, *remote, ok=False)
    assert "cancel it first" in error_of(refused)
    env = {"GATEWAY_FILES_DIR": str(files_dir), "COLUMNS": "200"}  # a table as wide as a terminal
    cancelled = cli("batches", "cancel", slow.id, **env)  # on the database: the running gateway ends it
    assert f"{slow.id} (" in cancelled.stdout and "cancelling" in cancelled.stdout
    ended = cli("batches", "wait", slow.id, "--every", "0.2", *remote, ok=False)
    assert ended.returncode == 1 and "cancelled" in ended.stdout
    table = cli("batches", "list", **env).stdout
    assert slow.id in table and quick.id in table and "cancelled" in table

    files = json.loads(cli("files", "list", "--json", *remote).stdout)
    assert {quick_file.id, slow_file.id} <= {f["id"] for f in files}
    assert cli("files", "delete", slow_file.id, **env).stdout.strip() == f"Deleted {slow_file.id}."
    assert slow_file.id not in cli("files", "list", *remote).stdout
    audit = json.loads(cli("audit", "--json", *remote).stdout)
    actions = {(a["action"], a["target"]) for a in audit}
    assert {("batch.cancel", slow.id), ("file.delete", slow_file.id)} <= actions
