"""One backend's KV cache events, subscribed to over ZMQ (pyzmq) and kept in its
:class:`~gateway.backends.kv_index.ResidentBlocks`.

The wire is vLLM's (:mod:`dspark_common.kv_events`): batches on a PUB socket, numbered from 0, and a
ROUTER socket that replays the batches it still buffers from a given number. The endpoints are
private (:mod:`dspark_common.zmq_endpoints`: ipc in a directory others cannot reach, or loopback),
and still nothing the subscription receives out of order is believed unless the replay socket —
vLLM's own, which no other process can bind while vLLM runs — says the same:

- a batch numbered past the next one (the first after the feed (re)subscribed included): the replay
  is asked from the next; the batches it holds are applied, and the batch itself only if the replay
  holds it, byte for byte;
- a batch numbered at or below the last one: a publisher that restarted (vLLM restarting, its cache
  empty) only if the replay holds that batch byte for byte and no longer the last one applied; then
  the index is cleared and fed from there.

Anything else out of order is counted (``out_of_order``) and ignored. With no replay endpoint a skip
is taken as it comes (the missed batches counted as ``gaps``) and a restart is never believed.
Blocks whose parents were missed are counted (``orphans``) and not indexed.

Memory is bounded in bytes: a message over ``max_message_bytes`` makes libzmq cut the connection it
came on (``ZMQ_MAXMSGSIZE``, before the message is allocated), and the receive queue holds
:data:`QUEUE_BYTES` of them (the high-water mark counts messages). What is ignored is counted by
reason (:data:`IGNORED`); the index is *fresh* once a batch came and, after a request the backend
computed blocks for (:meth:`KVEventFeed.expect`), another came within ``stale_s``; else admission
uses the estimate, and the feed subscribes again (what it missed meanwhile is asked of the replay).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import msgspec
import zmq
import zmq.asyncio

from dspark_common import kv_events
from gateway.backends.kv_index import ResidentBlocks

log = logging.getLogger("gateway.kv_events")

#: Bytes one connection's receive queue holds at most: its high-water mark is this many bytes over
#: the message bound, in messages.
QUEUE_BYTES = 32 * 1024 * 1024
#: Batches a replay holds at most (vLLM's ``buffer_steps``): the replay socket's high-water mark. It
#: talks to vLLM's own socket only, so it may hold as much as vLLM buffers.
REPLAY_BATCHES = 10_000
#: Seconds a replay may take before the feed gives up on it and goes on.
REPLAY_TIMEOUT_S = 5.0
#: Why a message or event changed nothing (``gateway_kv_events_ignored_total{reason}``):
#: ``malformed`` (not vLLM's frames, msgpack or event shape), ``block_size`` (a block of another size
#: than GATEWAY_KV_BLOCK_SIZE), ``out_of_order`` (a batch number the replay did not confirm),
#: ``disconnected`` (a connection libzmq cut: one that sent a message over the bound, or a publisher
#: that went away).
IGNORED = ("malformed", "block_size", "out_of_order", "disconnected")


@dataclass(frozen=True, slots=True)
class FeedEndpoints:
    """Where a backend publishes (``events``) and replays (``replay``; None: no replay); ``bind``: the
    feed binds ``events`` and the publisher connects to it (vLLM does for a tcp endpoint without a
    wildcard), else the feed connects (vLLM binds every ipc one)."""

    events: str
    replay: str | None = None
    bind: bool = False


class KVEventFeed:
    """Keeps ``index`` from the events published at ``endpoints``; :meth:`run` until cancelled."""

    def __init__(
        self, endpoints: FeedEndpoints, index: ResidentBlocks, stale_s: float, max_message_bytes: int
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
        self.ignored = dict.fromkeys(IGNORED, 0)
        self.restarts = 0
        self.resubscribed = 0
        self.last_batch_at: float | None = None
        self._last_payload = b""
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
            "bad_messages": self.ignored["malformed"],
            "ignored": dict(self.ignored),
            "publisher_restarts": self.restarts,
            "resubscribed": self.resubscribed,
            "last_batch_age_s": age,
            "blocks": len(self.index),
            "orphans": self.index.orphans,
        }

    async def run(self) -> None:
        """Subscribe and apply batches until cancelled; subscribe again whenever the feed goes stale,
        or its connection is cut (libzmq does not make again one it cut for an oversized message)."""
        while True:
            socket = self._socket(zmq.SUB, QUEUE_BYTES // self.max_message_bytes)
            socket.setsockopt(zmq.SUBSCRIBE, b"")
            monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            try:
                if self.endpoints.bind:
                    socket.bind(self.endpoints.events)
                else:
                    socket.connect(self.endpoints.events)
            except zmq.ZMQError as error:  # bound by another process (a gateway draining): wait for it
                self._close(socket, monitor)
                log.warning(
                    "KV events: %s: %s; trying again in %g s", self.endpoints.events, error, self.stale_s
                )
                await asyncio.sleep(self.stale_s)
                continue
            try:
                await self._receive(socket, monitor)
            finally:
                self._close(socket, monitor)
            self.resubscribed += 1
            log.info("KV events from %s: subscribing again", self.endpoints.events)

    async def _receive(self, socket: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket) -> None:
        """Apply what ``socket`` receives; return when the feed is stale or, connected, was cut."""
        poller = zmq.asyncio.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll(self.stale_s * 1000))
            if monitor in ready:
                await monitor.recv_multipart()  # the event: a connection cut (its only subscription)
                self.ignored["disconnected"] += 1
                if not self.endpoints.bind:  # bound, the publisher's side connects again by itself
                    return
            if socket in ready:
                frames = await socket.recv_multipart()
                seq = kv_events.frame_seq(frames[1]) if len(frames) == 3 else None
                if seq is None or seq < 0:
                    self.ignored["malformed"] += 1
                else:
                    await self._take(seq, frames[2])
            elif not ready:
                stale = self._expected_since is not None and not self.fresh(time.monotonic())
                if stale and not self.endpoints.bind:
                    return

    def _socket(self, kind: int, hwm: int) -> zmq.asyncio.Socket:
        socket = self._context.socket(kind)
        socket.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        socket.setsockopt(zmq.RCVHWM, max(1, hwm))
        return socket

    @staticmethod
    def _close(socket: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket) -> None:
        socket.disable_monitor()
        monitor.close(linger=0)
        socket.close(linger=0)

    async def _take(self, seq: int, payload: bytes) -> None:
        """Apply batch ``seq`` received from the publisher: in order, or as the replay confirms it."""
        if seq == self.last_seq + 1:
            self._apply(seq, payload)
        elif seq > self.last_seq:
            await self._skip_to(seq, payload)
        elif await self._restarted(seq, payload):
            self.restarts += 1
            log.info("KV event publisher %s restarted: its index starts over", self.endpoints.events)
            self.index.clear()
            self.last_seq, self._last_payload = -1, b""
            await self._take(seq, payload)  # from the restart on: the replay has what came before it
        else:
            self.ignored["out_of_order"] += 1

    async def _skip_to(self, seq: int, payload: bytes) -> None:
        """Batches after :attr:`last_seq` up to ``seq`` missed: apply what the replay still has of them,
        then ``seq`` if the replay has it too (no replay: as it comes); count the rest as missed."""
        if self.endpoints.replay is None:
            self.gaps += seq - 1 - self.last_seq
            self._apply(seq, payload)
            return
        confirmed = False
        async with contextlib.aclosing(self._replayed(self.last_seq + 1)) as replayed:
            async for number, batch in replayed:
                if number >= seq:
                    confirmed = number == seq and batch == payload
                    break
                if number > self.last_seq:
                    self.gaps += number - 1 - self.last_seq
                    self._apply(number, batch)
                    self.replayed += 1
        if confirmed:
            self.gaps += seq - 1 - self.last_seq
            self._apply(seq, payload)
        else:
            self.ignored["out_of_order"] += 1

    async def _restarted(self, seq: int, payload: bytes) -> bool:
        """Whether batch ``seq`` (at or below :attr:`last_seq`) is a restarted publisher's: its replay
        holds it byte for byte, and holds no longer the batch last applied as :attr:`last_seq`."""
        if self.endpoints.replay is None:
            return False
        same = still = False
        async with contextlib.aclosing(self._replayed(seq)) as replayed:
            async for number, batch in replayed:
                if number == seq:
                    same = batch == payload
                if number == self.last_seq:
                    still = batch == self._last_payload
                if number >= self.last_seq:
                    break
        return same and not still

    async def _replayed(self, first: int) -> AsyncGenerator[tuple[int, bytes]]:
        """The batches the replay socket holds from ``first`` on, in order, as ``(seq, payload)``;
        ends at the replay's end, at a message not of its shape, or after :data:`REPLAY_TIMEOUT_S`."""
        assert self.endpoints.replay is not None
        socket = self._socket(zmq.DEALER, REPLAY_BATCHES)
        socket.connect(self.endpoints.replay)
        deadline = time.monotonic() + REPLAY_TIMEOUT_S
        try:
            await socket.send_multipart((b"", kv_events.seq_frame(first)))  # queued: connected
            while True:
                # polled, not cancelled: a timeout across this generator's yields could hit its consumer
                if not await socket.poll(max(0.0, deadline - time.monotonic()) * 1000):
                    log.warning("KV event replay from %s timed out", self.endpoints.replay)
                    return
                frames = await socket.recv_multipart()
                seq = kv_events.frame_seq(frames[2]) if len(frames) == 4 else None
                if seq is None or seq < 0:
                    return  # the end marker (-1), or not the replay's shape
                yield seq, frames[3]
        finally:
            socket.close(linger=0)

    def _apply(self, seq: int, payload: bytes) -> None:
        self.last_seq, self._last_payload = seq, payload
        try:
            batch = kv_events.decode(payload)
        except msgspec.DecodeError:
            self.ignored["malformed"] += 1
            return
        for reason, count in self.index.apply(batch).items():
            self.ignored[reason] += count
        self.batches += 1
        self.last_batch_at = time.monotonic()
        self._expected_since = None
