"""An ASGI gate in front of the simulator: the chat requests past the first few wait until the test
opens it, so a batch is surely mid-run (lines answered, lines in flight, lines not sent) when the
test acts, whatever the machine's speed."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

CHAT = "/v1/chat/completions"


class Gate:
    """ASGI app in front of ``app``: the first ``passed`` chat requests go through, later ones wait
    until :meth:`open` (``held`` counts them)."""

    def __init__(self, app: Any, passed: int) -> None:
        self.app = app
        self.passed = passed
        self.seen = 0
        self.held = 0
        self._opened = threading.Event()

    def open(self) -> None:
        self._opened.set()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == CHAT:
            self.seen += 1
            if self.seen > self.passed:
                self.held += 1
                await asyncio.to_thread(self._opened.wait)  # set from the test's thread
        await self.app(scope, receive, send)
