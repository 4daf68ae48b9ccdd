"""Long work on an event loop, in pieces: the loop serves its other tasks between them.

One event loop serves every stream: a 1M-token prompt's ids take tens of ms to parse and key, and a
batch of KV events as long to apply, so such work is written as a generator that yields between
pieces of a few hundred microseconds, and :class:`Turns` runs it, giving the loop back
(``asyncio.sleep(0)``: one pass of its ready callbacks and I/O) whenever :data:`SLICE_S` of work ran
since it last did. Work done at once (:func:`run_now`) is the same generator run to its end.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

#: Seconds of work at most between two turns of the loop.
SLICE_S = 0.002

#: Work in pieces: yields (None) between pieces, returns its result.
Work = Generator[None, None, T]


class Turns:
    """Runs :data:`Work` of one owner (a feed, a request), giving the loop back every ``slice_s`` of it:
    the time counts across calls, so many small pieces of work in a row take turns too. The first
    pause gives the loop back whatever the time: what ran before it in the same turn (a 7 MB answer
    read, split) is not known here. Work of one piece never pauses."""

    __slots__ = ("slice_s", "_since")

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self.slice_s = slice_s
        self._since = -math.inf

    async def run(self, work: Work[T]) -> T:
        """``work``'s result, the loop given back between its pieces whenever its turn is over."""
        while True:
            try:
                next(work)
            except StopIteration as end:
                return end.value
            await self.pause()

    async def pause(self) -> None:
        """Give the loop back if ``slice_s`` of work ran since the last turn."""
        if time.perf_counter() - self._since >= self.slice_s:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


def run_now(work: Work[T]) -> T:
    """``work`` run to its end at once (small work, or a caller with no loop to give back)."""
    while True:
        try:
            next(work)
        except StopIteration as end:
            return end.value
