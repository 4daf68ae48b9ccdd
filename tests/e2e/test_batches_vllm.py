"""A batch through the gateway in front of a REAL vLLM (CPU build, scripted tiny model), with the
official OpenAI SDK: the file uploaded, the batch run as its key's batch requests, each line answered
once by vLLM in OpenAI's output file shape."""

from __future__ import annotations

import io
import json
import time

from openai import OpenAI

from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer


def test_a_batch_runs_on_vllm(vllm_server: VLLMServer, start_gateway, make_key, tmp_path) -> None:
    gateway = start_gateway(vllm_server.base_url, served_model=TINY_MODEL_NAME, slots=2, files_dir=tmp_path)
    client = OpenAI(base_url=gateway.url + "/v1", api_key=make_key("e2e-batch"), max_retries=0, timeout=120)
    body = {"model": TINY_MODEL_NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    lines = [
        {"custom_id": f"v{n}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        for n in range(3)
    ]
    content = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    made = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = client.batches.create(
        input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 120
    while (batch := client.batches.retrieve(batch.id)).status not in (
        "completed",
        "failed",
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert batch.status == "completed" and batch.request_counts.completed == 3, batch
    rows = [json.loads(row) for row in client.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(row["custom_id"] for row in rows) == ["v0", "v1", "v2"]
    for row in rows:
        answer = row["response"]["body"]
        assert row["response"]["status_code"] == 200 and answer["object"] == "chat.completion"
        assert answer["model"] == TINY_MODEL_NAME and answer["usage"]["completion_tokens"] == 4
