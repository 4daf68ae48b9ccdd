"""An in-memory :class:`~gateway.upstream.Upstream` for unit tests of the pipeline: no sockets, no
threads, no sleeps. Each request takes the next scripted :class:`Answer`; a streamed answer's body
comes from a queue the test feeds (``answer.send(...)``, ``answer.end()``, ``answer.fail(error)``), so
the test decides when each piece arrives."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway.errors import GatewayError


@dataclass
class Sent:
    """One request the gateway sent: method, path, body, headers."""

    method: str
    path: str
    body: bytes | None
    headers: dict[str, str]


@dataclass(eq=False)
class Answer:
    """What the upstream answers one request with: ``refuse`` raised by ``open`` (503, 504, an upstream
    error status), else ``status`` and a body fed through the queue. ``closed`` turns True when the
    gateway closes the response; ``read_to_end`` whether it was read to its end first."""

    status: int = 200
    refuse: GatewayError | None = None
    pieces: asyncio.Queue[bytes | GatewayError | None] = field(default_factory=asyncio.Queue)
    closed: bool = False
    read_to_end: bool = False

    def send(self, *data: bytes) -> Answer:
        """Queue body pieces (each one read as it is)."""
        for piece in data:
            self.pieces.put_nowait(piece)
        return self

    def end(self) -> Answer:
        """Queue the body's end."""
        self.pieces.put_nowait(None)
        return self

    def fail(self, error: GatewayError) -> Answer:
        """Queue a failure of the body (what a reset or a read timeout becomes)."""
        self.pieces.put_nowait(error)
        return self


class FakeResponse:
    """:class:`~gateway.upstream.UpstreamResponse` over an :class:`Answer`."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self.status = answer.status

    async def chunks(self) -> AsyncIterator[bytes]:
        while (piece := await self._answer.pieces.get()) is not None:
            if isinstance(piece, GatewayError):
                raise piece
            yield piece
        self._answer.read_to_end = True

    async def read(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])

    def close(self) -> None:
        self._answer.closed = True


class FakeUpstream:
    """Answers requests in order from :attr:`answers`; records them in :attr:`sent`. ``metrics`` is the
    text its ``GET /metrics`` returns (None: unreadable)."""

    def __init__(self, *answers: Answer, metrics: str | None = None) -> None:
        self.answers: deque[Answer] = deque(answers)
        self.sent: list[Sent] = []
        self.metrics = metrics
        self.closed = False
        self.arrived = asyncio.Event()  # set whenever a request arrives

    def script(self, answer: Answer | None = None) -> Answer:
        """Queue one more answer (a streamed 200 by default) and return it."""
        answer = answer or Answer()
        self.answers.append(answer)
        return answer

    async def open(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> FakeResponse:
        self.sent.append(Sent(method, path, body, dict(headers or {})))
        self.arrived.set()
        answer = self.answers.popleft()
        if answer.refuse is not None:
            raise answer.refuse
        return FakeResponse(answer)

    async def get_text(self, path: str, timeout_s: float) -> str | None:
        return self.metrics if path == "/metrics" else ("" if path == "/health" else None)

    async def aclose(self) -> None:
        self.closed = True
