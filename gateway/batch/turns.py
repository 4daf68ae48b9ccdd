"""The turns of the batch lines of one process: at most ``capacity`` lines in flight (the backends'
slots: batch work fills the slots nobody else wants, and the admission queue holds interactive
requests, not a batch's backlog), and a freed turn goes to the keys waiting in rotation.

Each key waiting has its place in a ring: a turn goes to the first key of the ring, which goes to
its end if it still waits (its batches waiting in the order they asked). A batch asks for its next
turn only once its last one was given (one waiter a batch), so a key with a 20-line batch gets every
other freed turn beside a key with a 300-line one, rather than waiting for all 300, and two batches
of one key alternate within the key's turns. Pure asyncio, no I/O.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque


class Turns:
    """``capacity`` turns (lines in flight), handed out in rotation across the keys waiting."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.busy = 0
        self._ring: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def waiting(self) -> int:
        """Requests for a turn not granted yet."""
        return sum(len(queue) for queue in self._ring.values())

    async def take(self, key: str) -> None:
        """One turn for a line of ``key``'s, once it is ``key``'s turn; give it back with :meth:`give`
        (a take cancelled while it waits holds nothing)."""
        if self.busy < self.capacity and not self._ring:
            self.busy += 1
            return
        granted = asyncio.get_running_loop().create_future()
        self._ring.setdefault(key, deque()).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():  # granted as it was cancelled: pass it on
                self.give()
            else:
                self._forget(key, granted)
            raise

    def give(self) -> None:
        """A turn given back: the next key in the ring has it."""
        self.busy -= 1
        while self.busy < self.capacity and self._ring:
            key, queue = self._ring.popitem(last=False)
            granted = queue.popleft()
            if queue:
                self._ring[key] = queue  # to the end of the ring
            if not granted.done():
                self.busy += 1
                granted.set_result(None)

    def _forget(self, key: str, granted: asyncio.Future[None]) -> None:
        queue = self._ring.get(key)
        if queue is None:
            return
        try:
            queue.remove(granted)
        except ValueError:
            return
        if not queue:
            del self._ring[key]
