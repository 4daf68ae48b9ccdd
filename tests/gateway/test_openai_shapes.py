"""Shapes real OpenAI-compatible upstreams send, through a real gateway to the official OpenAI SDK: an
upstream with no reasoning parser whose model ignores the template's thinking (plain answers), usage
only on the last chunk with choices, SSE ``id`` / ``retry`` fields, the seed deployment's reasoning
markers. The upstream is a raw-socket server that answers each request with the next scripted body."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.support.in_loop import Served, gateway_in_loop
from tests.support.raw_http import chunked, head, read_message, server

MODEL = "deepseek-v4-flash-0731"
MESSAGES = [{"role": "user", "content": "hi"}]
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def chunk(finish: str | None = None, **delta: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def sse(obj: dict[str, Any], fields: bytes = b"") -> bytes:
    return fields + b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
#: An upstream without a reasoning parser answering with no marker at all; its usage rides on its
#: last chunk with choices (no ``choices: []`` chunk).
PLAIN = [
    sse(chunk(role="assistant", content="")),
    sse(chunk(content="Hello")),
    sse({**chunk(finish="stop", content=" world"), "usage": USAGE}),
    DONE,
]


def whole(content: str) -> bytes:
    """A non-stream answer with ``content``, no reasoning field."""
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return json.dumps({"id": "chatcmpl-up", "object": "chat.completion", "choices": [choice], "usage": USAGE})


class Scripted:
    """The upstream: each POST gets the next answer — a list of SSE events (a stream) or a JSON body;
    its request bodies are kept in :attr:`bodies`."""

    def __init__(self, *answers: list[bytes] | str) -> None:
        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (message := await read_message(reader)) is not None:
            if not message[0].startswith(b"POST "):
                writer.write(head("404 Not Found", 0))
                continue
            self.bodies.append(json.loads(message[1]))
            answer = self.answers.pop(0)
            if isinstance(answer, str):
                writer.write(head("200 OK", len(answer)) + answer.encode())
            else:
                writer.write(head("200 OK", None, "text/event-stream"))
                for event in answer:
                    writer.write(chunked(event))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            await writer.drain()


@contextlib.asynccontextmanager
async def gateway_before(upstream: Scripted, tmp_path: Path, **settings: Any) -> AsyncIterator[Served]:
    async with (
        server(upstream) as url,
        gateway_in_loop(url, f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}", **settings) as gateway,
    ):
        yield gateway


def sdk(gateway: Served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=gateway.key, max_retries=0)


def reasoning_fields(obj: Any) -> dict[str, Any]:
    """The reasoning fields of a message or delta that hold something (a message has them as null)."""
    extra = (obj.model_extra or {}).items()
    return {k: v for k, v in extra if k in ("reasoning", "reasoning_content") and v is not None}


async def test_a_plain_answer_from_an_upstream_without_a_reasoning_parser_is_the_answer(
    tmp_path: Path,
) -> None:
    """The gateway asks for thinking (its default), the upstream ignores it and answers plainly: the
    answer reaches the SDK as content — streamed, whole, with reasoning hidden, or as a JSON object —
    never as reasoning; and usage put on the last chunk with choices still comes as OpenAI's closing
    ``choices: []`` chunk."""
    upstream = Scripted(PLAIN, PLAIN, whole("Hello world"), whole('{"a": 1}'))
    async with gateway_before(upstream, tmp_path) as gateway, sdk(gateway) as client:
        chunks = [
            c
            async for c in await client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        ]
        assert upstream.bodies[0]["chat_template_kwargs"]["thinking"] is True  # asked, and ignored
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(d.content or "" for d in deltas) == "Hello world"
        assert all(not reasoning_fields(d) for d in deltas)
        assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
        assert chunks[-1].choices == [] and chunks[-1].usage.model_dump(exclude_none=True) == USAGE
        # the upstream's answers are known to show no markers now: the next one streams piece by piece
        again = [
            c async for c in await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        ]
        assert [c.choices[0].delta.content for c in again if c.choices and c.choices[0].delta.content] == [
            "Hello",
            " world",
        ]
        hidden = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_body={"include_reasoning": False}
        )
        assert hidden.choices[0].message.content == "Hello world"
        json_answer = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, response_format={"type": "json_object"}
        )
        assert json.loads(json_answer.choices[0].message.content or "") == {"a": 1}
        assert not reasoning_fields(json_answer.choices[0].message)


async def test_a_first_plain_answer_with_reasoning_hidden_is_not_lost(tmp_path: Path) -> None:
    """``include_reasoning: false`` on the first answer of an upstream not known yet (streamed): the
    answer it waited for is the content, not dropped as reasoning."""
    async with gateway_before(Scripted(PLAIN), tmp_path) as gateway, sdk(gateway) as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, extra_body={"include_reasoning": False}
        )
        content = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert content == "Hello world"


async def test_a_stream_that_breaks_still_gives_the_text_it_had_sent(tmp_path: Path) -> None:
    """An upstream not known yet whose stream ends before ``[DONE]``: the answer it sent, held while
    no marker had shown what it was, reaches the SDK before the error it raises."""
    async with gateway_before(Scripted(PLAIN[:2]), tmp_path) as gateway, sdk(gateway) as client:
        stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        content = ""
        try:
            async for c in stream:
                content += c.choices[0].delta.content or "" if c.choices else ""
        except openai.APIError as exc:
            error = exc
    assert content == "Hello" and "ended before its last event" in error.message


async def test_sse_id_and_retry_go_on_with_rewritten_and_held_events(tmp_path: Path) -> None:
    """Events the gateway rewrites keep their ``id`` / ``event`` / ``retry`` lines as events it passes
    on unchanged do; an event it holds back hands its ``id`` to the next one; the SDK reads it all."""
    stream = [
        sse(chunk(role="assistant", content=""), b"id: 1\nretry: 5000\n"),
        sse(chunk(content="hm</think>Hel"), b"id: 2\n"),  # rewritten: the reasoning is split off
        sse(chunk(content="lo <"), b"id: 3\nevent: delta\n"),  # rewritten, "<" held back
        sse(chunk(content="/"), b"id: 4\n"),  # held back whole: "</" may open a marker
        sse(chunk(finish="stop", content="b>"), b"id: 5\n"),
        DONE,
    ]
    async with gateway_before(Scripted(stream, stream), tmp_path) as gateway:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"model": MODEL, "messages": MESSAGES, "stream": True}
            raw = (
                await client.post(gateway.url + "/v1/chat/completions", json=body, headers=gateway.auth)
            ).text
        async with sdk(gateway) as client:
            got = [
                c
                async for c in await client.chat.completions.create(
                    model=MODEL, messages=MESSAGES, stream=True
                )
            ]
    frames = raw.split("\n\n")[:-1]
    assert frames[0] == stream[0].decode().removesuffix("\n\n")  # passed on byte for byte
    fields = [[line for line in f.split("\n") if not line.startswith("data:")] for f in frames]
    assert fields == [["id: 1", "retry: 5000"], ["id: 2"], ["id: 3", "event: delta"], ["id: 4", "id: 5"], []]
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "Hello </b>"
    assert (
        "".join(reasoning_fields(c.choices[0].delta).get("reasoning", "") for c in got if c.choices) == "hm"
    )


async def test_the_seed_reasoning_markers_split_however_the_stream_cuts_them(tmp_path: Path) -> None:
    """``GATEWAY_REASONING_START`` / ``_END`` set to the seed's `` thinking`` / `` response``: the end
    marker cut over three chunks still ends the reasoning, and ``</think>`` is plain text."""
    stream = [
        sse(chunk(content="Weigh </think> it")),
        sse(chunk(content=" resp")),
        sse(chunk(content="on")),
        sse(chunk(finish="stop", content="se The answer")),
        DONE,
    ]
    async with (
        gateway_before(
            Scripted(stream), tmp_path, reasoning_start=" thinking", reasoning_end=" response"
        ) as gateway,
        sdk(gateway) as client,
    ):
        got = [
            c async for c in await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        ]
    deltas = [c.choices[0].delta for c in got if c.choices]
    assert "".join(reasoning_fields(d).get("reasoning", "") for d in deltas) == "Weigh </think> it"
    assert "".join(d.content or "" for d in deltas) == " The answer"
