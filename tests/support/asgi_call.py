"""One HTTP request to an ASGI app, driven by hand in the test's loop: no server, no socket.

The body is received at once; :meth:`Call.disconnect` makes the app's next ``receive`` report
``http.disconnect`` (the client hung up); what the app sends is collected, and
:meth:`Call.wait_for` waits, without sleeping, until it says what the test waits for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message


class Call:
    """``app`` answering ``method path`` with ``body`` and ``headers``; ``state`` is the scope's state.
    ``send_fails``: every ``send`` raises ``OSError``, as some ASGI servers' do once the connection broke."""

    def __init__(
        self,
        app: ASGIApp,
        path: str,
        body: bytes | dict[str, Any] = b"",
        method: str = "POST",
        headers: dict[str, str] | None = None,
        state: dict[str, Any] | None = None,
        send_fails: bool = False,
    ) -> None:
        self._app = app
        self._send_fails = send_fails
        self._body = json.dumps(body).encode() if isinstance(body, dict) else body
        self._scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": method,
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "scheme": "http",
            "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 40000),
            "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
            "state": state if state is not None else {"request_id": "req-test"},
        }
        self._received = False
        self._gone = asyncio.Event()
        self._changed = asyncio.Event()
        self.messages: list[Message] = []
        self.task: asyncio.Task[None] | None = None

    def start(self) -> Call:
        """Run the app in a task of its own."""
        self.task = asyncio.create_task(self._app(self._scope, self._receive, self._send))
        return self

    async def done(self) -> Call:
        """Start if needed, and wait for the app to return."""
        if self.task is None:
            self.start()
        assert self.task is not None
        await self.task
        return self

    def disconnect(self) -> None:
        """The client hangs up."""
        self._gone.set()

    async def wait_for(self, condition: Callable[[Call], bool]) -> None:
        """Until ``condition(self)`` holds (re-checked at every message the app sends); raises
        ``AssertionError`` if the app returns first."""
        assert self.task is not None, "start() the call first"
        while not condition(self):
            if self.task.done():
                self.task.result()
                raise AssertionError(f"the app returned first: {self.body!r}")
            self._changed.clear()
            changed = asyncio.ensure_future(self._changed.wait())
            await asyncio.wait({self.task, changed}, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()

    async def _receive(self) -> Message:
        if not self._received:
            self._received = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        if self._send_fails:
            raise OSError("the connection broke")
        self.messages.append(message)
        self._changed.set()

    @property
    def status(self) -> int | None:
        """The status the response started with."""
        return next((m["status"] for m in self.messages if m["type"] == "http.response.start"), None)

    @property
    def headers(self) -> dict[str, str]:
        start = next((m for m in self.messages if m["type"] == "http.response.start"), {"headers": []})
        return {k.decode(): v.decode() for k, v in start["headers"]}

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")

    @property
    def ended(self) -> bool:
        """The last body message was sent."""
        return any(m["type"] == "http.response.body" and not m.get("more_body") for m in self.messages)

    def json(self) -> Any:
        return json.loads(self.body)
