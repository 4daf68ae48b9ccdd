"""The bytes of one stream between the upstream reader and the client writer, bounded.

The backend's two slots are the scarce resource: a stream's slot is released when the backend's last
event arrives (:class:`~gateway.proxy.relay.EventPipe`), so the upstream must be read as fast as the
backend produces, not as fast as the client reads (``DESIGN.md`` §9). The reader puts what each
upstream read completes here; the writer takes everything that is waiting in one piece (one write).
At most ``limit_bytes`` wait (one piece larger than that is let in alone); a reader that finds no room
for ``timeout_s`` has a client that read nothing meanwhile: :meth:`StreamBuffer.put` says so and the
caller cuts the stream. Pure asyncio.
"""

from __future__ import annotations

import asyncio


class StreamBuffer:
    """A byte-bounded FIFO of one reader and one writer. ``size`` is the bytes waiting."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._pieces: list[bytes] = []
        self.size = 0
        self._closed = False
        self._final = False  # a piece put after the stream's last event is waiting or was taken
        # each cleared only by the side that waits on it, so a wake-up can't be lost
        self._room = asyncio.Event()  # set when the writer empties the buffer
        self._data = asyncio.Event()  # set when a piece comes or the buffer is closed

    def _fits(self, size: int) -> bool:
        return self.size == 0 or self.size + size <= self._limit

    async def put(self, data: bytes, timeout_s: float, final: bool = False) -> bool:
        """Add ``data`` once it fits; False if it did not within ``timeout_s`` (the writer took
        nothing for that long: its client is not reading). ``final``: ``data`` holds the stream's
        last event (or comes after it)."""
        if not self._fits(len(data)):
            deadline = asyncio.get_running_loop().time() + timeout_s
            try:
                async with asyncio.timeout_at(deadline):
                    while not self._fits(len(data)):
                        self._room.clear()
                        await self._room.wait()
            except TimeoutError:
                return False
        self._pieces.append(data)
        self.size += len(data)
        self._final = self._final or final
        self._data.set()
        return True

    def close(self) -> None:
        """No more pieces: :meth:`take` returns None once the waiting ones are taken."""
        self._closed = True
        self._data.set()

    async def take(self) -> tuple[bytes, bool] | None:
        """Everything waiting, in one piece, once there is some, and whether the stream's last event
        is in it or was in an earlier one; None at the end."""
        while not self._pieces:
            if self._closed:
                return None
            self._data.clear()
            await self._data.wait()
        pieces = self._pieces
        out = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        self._pieces = []
        self.size = 0
        self._room.set()
        return out, self._final
