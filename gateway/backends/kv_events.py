"""One backend's KV cache events, subscribed to over ZMQ (pyzmq) and kept in its
:class:`~gateway.backends.kv_index.ResidentBlocks`.

The wire is vLLM's (:mod:`dspark_common.kv_events`): batches on a PUB socket, numbered from 0, and a
ROUTER socket that replays the batches it still buffers from a given number. The feed subscribes,
and whenever a number is skipped — the first batch it sees after it (re)started included — asks the
replay socket for what it missed, then goes on. A number lower than the last one is a publisher that
restarted (vLLM restarting, its cache empty): the index is cleared and fed from there. A gap the
replay can't fill (no replay endpoint, or the batches are gone from its buffer) leaves the index
holding what it learnt; blocks whose parents were missed are counted (``orphans``) and not indexed.

Frames are bounded (``ZMQ_MAXMSGSIZE``: libzmq drops a peer that sends a larger message, and does not
connect to it again); a batch that does not decode, or a message not of three frames, is counted and
skipped. The index is *fresh* once a batch came and, after a request the backend computed blocks for
(:meth:`KVEventFeed.expect`), another came within ``stale_s``; else admission uses the estimate, and
the feed subscribes again (what it missed meanwhile is a gap: replayed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import msgspec
import zmq
import zmq.asyncio

from dspark_common import kv_events
from gateway.backends.kv_index import ResidentBlocks

log = logging.getLogger("gateway.kv_events")

#: Largest message accepted on either socket, bytes (a batch of a 1M-token prefill's blocks as
#: msgpack is ~5 MB: 4 bytes or so per token id).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Seconds a replay may take before the feed gives up on it and goes on.
REPLAY_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class FeedEndpoints:
    """Where a backend publishes (``events``) and replays (``replay``; None: no replay); ``bind``: the
    feed binds ``events`` and the publisher connects to it (vLLM does for an endpoint without a
    wildcard), else the feed connects."""

    events: str
    replay: str | None = None
    bind: bool = False


class KVEventFeed:
    """Keeps ``index`` from the events published at ``endpoints``; :meth:`run` until cancelled."""

    def __init__(
        self,
        endpoints: FeedEndpoints,
        index: ResidentBlocks,
        stale_s: float,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.endpoints = endpoints
        self.max_message_bytes = max_message_bytes
        self.index = index
        self.stale_s = stale_s
        self.last_seq = -1
        self.batches = 0
        self.replayed = 0
        self.gaps = 0
        """Batches missed and not replayed."""
        self.bad_messages = 0
        self.restarts = 0
        self.resubscribed = 0
        self.last_batch_at: float | None = None
        self._expected_since: float | None = None
        self._context = zmq.asyncio.Context.instance()

    def expect(self, now: float) -> None:
        """A request computed blocks on the backend: a batch should come within ``stale_s``."""
        if self._expected_since is None:
            self._expected_since = now

    def fresh(self, now: float) -> bool:
        """Whether the index is to be trusted: batches come (or none was due yet)."""
        if self.last_batch_at is None:
            return False
        return self._expected_since is None or now - self._expected_since <= self.stale_s

    def status(self, now: float) -> dict[str, object]:
        """``/admin/status``: where the events come from, how they went, what the index holds."""
        age = None if self.last_batch_at is None else round(now - self.last_batch_at, 3)
        return {
            "endpoint": self.endpoints.events,
            "fresh": self.fresh(now),
            "last_seq": self.last_seq,
            "batches": self.batches,
            "replayed": self.replayed,
            "gaps": self.gaps,
            "bad_messages": self.bad_messages,
            "publisher_restarts": self.restarts,
            "resubscribed": self.resubscribed,
            "last_batch_age_s": age,
            "blocks": len(self.index),
            "orphans": self.index.orphans,
        }

    async def run(self) -> None:
        """Subscribe and apply batches until cancelled; subscribe again whenever the feed goes stale
        (libzmq drops a connection that sent an oversized message and does not make it again)."""
        while True:
            socket = self._socket(zmq.SUB)
            socket.setsockopt(zmq.SUBSCRIBE, b"")
            try:
                if self.endpoints.bind:
                    socket.bind(self.endpoints.events)
                else:
                    socket.connect(self.endpoints.events)
            except zmq.ZMQError as error:  # bound by another process (a gateway draining): wait for it
                socket.close(linger=0)
                log.warning(
                    "KV events: %s: %s; trying again in %g s", self.endpoints.events, error, self.stale_s
                )
                await asyncio.sleep(self.stale_s)
                continue
            try:
                await self._receive(socket)
            finally:
                socket.close(linger=0)
            self.resubscribed += 1
            log.info("KV events from %s are stale: subscribing again", self.endpoints.events)

    async def _receive(self, socket: zmq.asyncio.Socket) -> None:
        """Apply what ``socket`` receives; return when the feed is stale."""
        while True:
            try:
                async with asyncio.timeout(self.stale_s):
                    frames = await socket.recv_multipart()
            except TimeoutError:
                # bound, the publisher's side connects and so reconnects after a drop: nothing to redo
                stale = self._expected_since is not None and not self.fresh(time.monotonic())
                if stale and not self.endpoints.bind:
                    return
                continue
            seq = kv_events.frame_seq(frames[1]) if len(frames) == 3 else None
            if seq is None or seq < 0:
                self.bad_messages += 1
                continue
            if seq <= self.last_seq:
                self.restarts += 1
                log.info("KV event publisher %s restarted: its index starts over", self.endpoints.events)
                self.index.clear()
            elif seq > self.last_seq + 1:
                await self._replay(seq)
            self._apply(seq, frames[2])

    def _socket(self, kind: int) -> zmq.asyncio.Socket:
        socket = self._context.socket(kind)
        socket.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        socket.setsockopt(zmq.RCVHWM, 100_000)
        return socket

    async def _replay(self, until: int) -> None:
        """Apply the batches from :attr:`last_seq` + 1 to ``until`` (excluded) that the replay socket
        still has; count the rest as missed."""
        first = self.last_seq + 1
        if self.endpoints.replay is not None:
            socket = self._socket(zmq.DEALER)
            socket.connect(self.endpoints.replay)
            try:
                async with asyncio.timeout(REPLAY_TIMEOUT_S):
                    await socket.send_multipart((b"", kv_events.seq_frame(first)))
                    while True:
                        frames = await socket.recv_multipart()
                        seq = kv_events.frame_seq(frames[2]) if len(frames) == 4 else None
                        if seq is None or seq < 0 or seq >= until:
                            break  # the end marker (-1), or past the gap
                        if seq > self.last_seq:
                            self._apply(seq, frames[3])
                            self.replayed += 1
            except TimeoutError:
                log.warning("KV event replay from %s timed out", self.endpoints.replay)
            finally:
                socket.close(linger=0)
        self.gaps += until - 1 - self.last_seq
        self.last_seq = until - 1

    def _apply(self, seq: int, payload: bytes) -> None:
        self.last_seq = seq
        try:
            batch = kv_events.decode(payload)
        except msgspec.DecodeError:
            self.bad_messages += 1
            return
        self.index.apply(batch)
        self.batches += 1
        self.last_batch_at = time.monotonic()
        self._expected_since = None
