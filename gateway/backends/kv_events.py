"""One backend's KV cache events, subscribed to over ZMQ (pyzmq) and kept in its
:class:`~gateway.backends.kv_index.ResidentBlocks`.

The wire is vLLM's (:mod:`dspark_common.kv_events`): batches on a PUB socket, numbered from 0, and a
ROUTER socket that replays the batches it still buffers from a given number (vLLM
``vllm/distributed/kv_events.py``: ``ZmqEventPublisher._publisher_thread``, ``_service_replay``).
A PUB socket sends a batch only to the subscribers whose subscription reached it: what it publishes
before (a subscription made after vLLM started publishing, a connection still being made, one made
again) is lost to the subscription. So the replay is asked for what came after the last batch
applied whenever a connection to the publisher is made (``ZMQ_EVENT_HANDSHAKE_SUCCEEDED``: the
subscription is sent) and while a batch is due and has not come for :data:`OVERDUE_S`.

The endpoints are private (:mod:`dspark_common.zmq_endpoints`: ipc in a directory others cannot
reach, or loopback), and still nothing the subscription receives out of order is believed unless
the replay socket — vLLM's own, which no other process can bind while vLLM runs — says the same:

- a batch numbered past the next one (the first after the feed (re)subscribed included): the replay
  is asked from the last one applied; the batches it holds after it are applied, and the batch
  itself only if the replay holds it, byte for byte;
- a publisher that restarted (vLLM restarting, its cache empty, its numbers from 0 again): its
  replay holds no longer the last batch applied as it was. Its first batch the feed receives may be
  numbered at or below the last one seen (then it is believed only if the replay holds it byte for
  byte), or above it (the batches before it were lost to the subscription): either way the index is
  cleared and fed from the replay, from 0;
- a batch the feed already applied (received from the replay, then from the subscription): skipped.

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
import hashlib
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import msgspec
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from dspark_common import kv_events
from dspark_common.turns import Turns
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
#: Seconds a batch may be due (:meth:`KVEventFeed.expect`) and not come before the replay is asked
#: for it, and again after each such while: vLLM publishes a step's batch as the step ends, so one
#: this late was most likely published before the subscription reached the publisher.
OVERDUE_S = 1.0
#: Batches taken at most per poll of the subscription.
DRAIN_BATCHES = 64
#: Batches applied last whose numbers and digests are kept, to know one received again (from the
#: replay, then from the subscription) for what it is.
APPLIED_KEPT = 1024
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
        self._applied: dict[int, bytes] = {}
        """Digests of the batches applied last, by number (at most :data:`APPLIED_KEPT`)."""
        self._connected_anew = False
        """A connection to the publisher was made since the last batch received: the next one is
        checked against the replay even if numbered next (the publisher may have restarted)."""
        self._expected_since: float | None = None
        self._context = zmq.asyncio.Context.instance()
        self._turns = Turns()

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
            monitor = socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
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
        reader: zmq.Socket = zmq.Socket.shadow(socket)  # the same socket, read with no future a message
        while True:
            ready = dict(await poller.poll(min(self.stale_s, OVERDUE_S) * 1000))
            if monitor in ready:
                event = parse_monitor_message(await monitor.recv_multipart())["event"]
                if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    # the subscription is on its way to the publisher: what it sent before is lost
                    # to it (it takes earlier numbers as it comes, then what is after them again)
                    await self._catch_up()
                    self._connected_anew = True
                    continue
                self.ignored["disconnected"] += 1
                if not self.endpoints.bind:  # bound, the publisher's side connects again by itself
                    return
            if socket in ready:
                await self._drain(reader)
            elif not ready and self._expected_since is not None:
                now = time.monotonic()
                if now - self._expected_since >= OVERDUE_S:
                    await self._catch_up()
                if not self.fresh(now) and not self.endpoints.bind:
                    return

    async def _drain(self, reader: zmq.Socket) -> None:
        """Take the batches ``reader`` (the subscription, read without waiting) holds,
        :data:`DRAIN_BATCHES` at most: a prefill publishes one a step, hundreds for a long prompt, each
        not worth a poll and a future of its own."""
        for _ in range(DRAIN_BATCHES):
            try:
                frames = reader.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            seq = kv_events.frame_seq(frames[1]) if len(frames) == 3 else None
            if seq is None or seq < 0:
                self.ignored["malformed"] += 1
            else:
                await self._take(seq, frames[2])

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
        connected_anew, self._connected_anew = self._connected_anew, False
        if seq == self.last_seq + 1 and not (connected_anew and self.endpoints.replay):
            await self._apply(seq, payload)
        elif self._applied.get(seq) == _digest(payload):
            pass  # applied already: taken from the replay before the subscription brought it
        elif seq > self.last_seq:
            await self._skip_to(seq, payload)
        elif await self._restarted(seq, payload):
            self._start_over()
            await self._take(seq, payload)  # from the restart on: the replay has what came before it
        else:
            self.ignored["out_of_order"] += 1

    def _start_over(self) -> None:
        """The publisher restarted: its cache is empty and its numbers start again from 0."""
        self.restarts += 1
        log.info("KV event publisher %s restarted: its index starts over", self.endpoints.events)
        self.index.clear()
        self.last_seq, self._last_payload = -1, b""
        self._applied.clear()

    async def _skip_to(self, seq: int, payload: bytes) -> None:
        """Batches after :attr:`last_seq` up to ``seq`` missed: apply what the replay still has of them,
        then ``seq`` if the replay has it too (no replay: as it comes); count the rest as missed."""
        if self.endpoints.replay is None:
            self.gaps += seq - 1 - self.last_seq
            await self._apply(seq, payload)
        elif not await self._catch_up(seq, payload):
            self.ignored["out_of_order"] += 1

    async def _catch_up(self, seq: int | None = None, payload: bytes = b"") -> bool:
        """Apply the batches the replay holds after :attr:`last_seq` (before ``seq`` if given, then
        ``seq`` itself if the replay holds it as ``payload``); whether it did apply ``seq``. A replay
        whose batch :attr:`last_seq` is another than the one applied is a restarted publisher's: the
        index starts over, fed from the replay's first batch. Batches the replay no longer holds are
        counted as ``gaps``; no replay endpoint: nothing to ask, False."""
        if self.endpoints.replay is None:
            return False
        confirmed = restarted = False
        taken = self.replayed
        async with contextlib.aclosing(self._replayed(max(self.last_seq, 0))) as replayed:
            async for number, batch in replayed:
                if number <= self.last_seq:  # the last one applied: still the same publisher's?
                    restarted = number == self.last_seq and batch != self._last_payload
                    if restarted:
                        break
                elif seq is not None and number >= seq:
                    confirmed = number == seq and batch == payload
                    break
                else:
                    self.gaps += number - 1 - self.last_seq
                    await self._apply(number, batch)
                    self.replayed += 1
        if restarted:
            self._start_over()
            return await self._catch_up(seq, payload)
        if self.replayed > taken:
            log.info(
                "KV events from %s: %d batches taken from the replay (published before the "
                "subscription reached the publisher)", self.endpoints.events, self.replayed - taken,
            )  # fmt: skip
        if confirmed and seq is not None:
            self.gaps += seq - 1 - self.last_seq
            await self._apply(seq, payload)
        return confirmed

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

    async def _apply(self, seq: int, payload: bytes) -> None:
        """Apply batch ``seq``: decoded at once (a batch is one step's events, vLLM's scheduler bounds
        its tokens by ``--max-num-batched-tokens``), its events in pieces
        (:meth:`~gateway.backends.kv_index.ResidentBlocks.applying`), taking turns with the loop's
        other work across batches (a replay brings thousands in a row)."""
        self.last_seq, self._last_payload = seq, payload
        self._applied[seq] = _digest(payload)
        if len(self._applied) > APPLIED_KEPT:
            del self._applied[next(iter(self._applied))]
        try:
            batch = kv_events.decode(payload)
        except msgspec.DecodeError:
            self.ignored["malformed"] += 1
            return
        for reason, count in (await self._turns.run(self.index.applying(batch))).items():
            self.ignored[reason] += count
        self.batches += 1
        self.last_batch_at = time.monotonic()
        self._expected_since = None


def _digest(payload: bytes) -> bytes:
    """A batch's digest: equal for the same bytes only (a forged payload cannot match)."""
    return hashlib.blake2b(payload, digest_size=16).digest()
