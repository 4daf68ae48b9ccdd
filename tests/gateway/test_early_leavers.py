"""A Responses or Messages stream its client leaves before the closing event, which alone carries the
usage (issue 57, item 11): its ledger row holds the prompt (prefilled all the same) and the output
the client was sent, an event at least a token, while the backend was still generating. The
official SDKs break out of their streams; the row is read through the admin API."""

from __future__ import annotations

import anthropic
import httpx
import openai

from tests.support.probes import wait_until

MODEL = "deepseek-v4-flash-0731"
PROMPT = "count from 1 to 20000"
OUTPUT = 20_000
DELTAS = 100


def test_a_stream_left_early_records_its_prompt_and_what_its_client_was_sent(
    start_sim, start_gateway, make_key
) -> None:
    # 500 tokens/s: the backend is far from the end of its 20,000 tokens when the client leaves
    gateway = start_gateway(start_sim(decode_tps=500.0).url, ledger_flush_s=0.1)
    admin = make_key("ops", scopes=["admin"])
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("responses"), max_retries=0)
    seen = 0
    with client.responses.create(model=MODEL, input=PROMPT, max_output_tokens=OUTPUT, stream=True) as events:
        for event in events:
            seen += event.type == "response.output_text.delta"
            if seen == DELTAS:
                break
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("messages"), max_retries=0)
    seen = 0
    messages = [{"role": "user", "content": PROMPT}]
    with claude.messages.stream(model=MODEL, max_tokens=OUTPUT, messages=messages) as stream:
        for event in stream:
            seen += event.type == "content_block_delta"
            if seen == DELTAS:
                break

    def rows() -> dict[str, dict]:
        found = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"})
        return {row["key_name"]: row for row in found.json()["data"]}

    wait_until(lambda: {"responses", "messages"} <= rows().keys(), timeout_s=60, what="both rows")
    for name, row in rows().items():
        if name in ("responses", "messages"):
            assert row["end_reason"] == "client_gone" and row["status"] == 499, row
            assert row["prompt_tokens"] > 0, row
            assert DELTAS <= row["completion_tokens"] < OUTPUT, row
