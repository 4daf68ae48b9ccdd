"""The client's side of an exchange (gateway/proxy/reply.py) over a recording ASGI ``send``: a whole
answer, an error before and after a stream started, a client gone, keep-alives only while idle."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.dialects.messages import MESSAGES
from gateway.dialects.openai.chat import CHAT
from gateway.errors import GatewayError
from gateway.proxy.reply import SEND_BYTES, Reply


class Sent:
    """A recording ASGI ``send``."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")

    @property
    def head(self) -> dict[str, Any]:
        return self.messages[0]


async def test_an_error_before_the_stream_is_a_status_in_the_dialects_shape() -> None:
    sent = Sent()
    reply = Reply(sent, MESSAGES, keep_alive_s=60)
    await reply.fail(GatewayError("queue_full", "full", headers={"Retry-After": "3"}), [b"unused"])
    assert sent.head["status"] == 429 and (b"retry-after", b"3") in sent.head["headers"]
    assert sent.body.startswith(b'{"type":"error","error":{') and reply.ended
    await reply.fail(GatewayError("queue_full", "again"), [])  # the response ended: nothing more
    assert len(sent.messages) == 2


async def test_an_error_after_the_stream_started_is_its_closing_events() -> None:
    sent = Sent()
    reply = Reply(sent, CHAT, keep_alive_s=60)
    await reply.start_stream({"x-ratelimit-limit-requests": "5"})
    await reply.events(b"data: {}\n\n")
    await reply.fail(GatewayError("upstream_stream_error", "broke"), [b"data: held\n\n", b"data: error\n\n"])
    assert sent.head["status"] == 200 and (b"x-ratelimit-limit-requests", b"5") in sent.head["headers"]
    assert sent.body == b"data: {}\n\ndata: held\n\ndata: error\n\n"
    assert sent.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_client_gone_before_anything_was_sent_is_a_bare_499_else_nothing() -> None:
    sent = Sent()
    await Reply(sent, CHAT, keep_alive_s=60).left()
    assert sent.head["status"] == 499 and sent.body == b""
    streaming = Sent()
    started = Reply(streaming, CHAT, keep_alive_s=60)
    await started.start_stream({})
    await started.left()
    assert [m["type"] for m in streaming.messages] == ["http.response.start"]
    started.stop_keep_alive()


async def test_an_idle_stream_gets_the_dialects_keep_alive_and_a_busy_one_none() -> None:
    sent = Sent()
    reply = Reply(sent, MESSAGES, keep_alive_s=0.5)
    await reply.start_stream({})
    for _ in range(10):  # busy: an event every 10 ms, well under the keep-alive interval
        await reply.events(b"event: x\ndata: {}\n\n")
        await asyncio.sleep(0.01)
    assert MESSAGES.keep_alive not in sent.body
    await asyncio.sleep(1.2)  # idle
    assert MESSAGES.keep_alive in sent.body
    await reply.end()
    count = len(sent.messages)
    await asyncio.sleep(0.1)
    assert len(sent.messages) == count  # nothing after the end


async def test_a_large_piece_goes_in_sends_of_whole_events_each_counted() -> None:
    """What waited while the client was slow goes out in sends of at most SEND_BYTES, cut between
    events (an event larger than that is cut where it must be); each send counts as progress."""
    sent = Sent()
    reply = Reply(sent, CHAT, keep_alive_s=60)
    await reply.start_stream({})
    event = b"data: " + b"x" * 994 + b"\n\n"  # 1,002 bytes
    small, large = event * 3, b"data: " + b"y" * (SEND_BYTES * 2) + b"\n\n"
    await reply.events(small)
    await reply.events(event * 200 + large)
    await reply.end()
    bodies = [m["body"] for m in sent.messages[1:] if m.get("more_body")]
    assert bodies[0] == small and reply.sent == len(bodies)
    assert all(len(body) <= SEND_BYTES for body in bodies)
    assert [len(body) for body in bodies[1:3]] == [65 * len(event), 65 * len(event)]  # 65 whole events
    assert sent.body == small + event * 200 + large
