"""The background sweep of the files directory: every ``GATEWAY_FILES_SWEEP_S`` it deletes the files
that expired (:meth:`~gateway.storage.files.FileStore.remove_expired`: not those a batch still reads)
and the temporary files of uploads a dead process left (:meth:`~gateway.storage.files.FileStore.sweep`).
Every replica sweeps; a file two of them delete at once is deleted once. A sweep that fails (the
database away) is logged and tried again at the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gateway.storage.files import FileStore

log = logging.getLogger("gateway.files")


class FileSweep:
    """Sweeps ``files`` every ``interval_s`` seconds from :meth:`start` to :meth:`close`."""

    def __init__(self, files: FileStore, interval_s: float) -> None:
        self._files = files
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        """Start sweeping (inside a running event loop)."""
        self._task = asyncio.create_task(self._run())

    async def once(self) -> int:
        """One sweep now: the expired files deleted, and the temporary files of uploads a process that
        died left a day ago or more; how many expired files went."""
        gone = await self._files.remove_expired()
        await self._files.sweep()
        if gone:
            log.info("deleted %d expired file(s)", gone)
        return gone

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.once()
            except Exception:
                log.exception("the sweep of expired files failed; trying again in %g s", self._interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval_s)

    async def close(self) -> None:
        """Stop sweeping: a sweep under way finishes first (a file's record is never deleted without
        its content)."""
        self._stop.set()
        if self._task is not None:
            await self._task
