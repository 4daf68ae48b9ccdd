"""The KV event feed (gateway/backends/kv_events.py) against a real ZMQ publisher on loopback: garbage,
short and oversized messages are counted and skipped without stalling it, a publisher that restarts
(its numbers from 0 again) starts the index over, a gap with no replay is counted, and a flood of
stored blocks keeps the index within its bound."""

from __future__ import annotations

import asyncio
import contextlib
import time

import zmq
import zmq.asyncio

from dspark_common import kv_events
from dspark_common.kv_events import AllBlocksCleared, BlockStored, KVEventBatch
from gateway.backends.kv_events import FeedEndpoints, KVEventFeed
from gateway.backends.kv_index import ResidentBlocks
from tests.support.servers import free_port

BLOCK = 4


def stored(first: int, blocks: int = 1) -> BlockStored:
    """``blocks`` blocks from no parent, named from ``first``."""
    return BlockStored(
        block_hashes=list(range(first, first + blocks)), parent_block_hash=None,
        token_ids=[first] * (BLOCK * blocks), block_size=BLOCK, lora_id=None, medium="GPU", lora_name=None,
    )  # fmt: skip


def payload(*events) -> bytes:
    return kv_events.encode(KVEventBatch(ts=0.0, events=list(events)))


async def until(predicate, what: str) -> None:
    """Poll ``predicate`` every 10 ms for up to 10 s."""
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {what} within 10 s")


@contextlib.asynccontextmanager
async def feed_and_publisher(max_blocks: int = 1000, max_message_bytes: int = 1 << 20, stale_s: float = 10.0):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    publisher = zmq.asyncio.Context.instance().socket(zmq.PUB)
    publisher.bind(endpoint)
    feed = KVEventFeed(
        FeedEndpoints(endpoint), ResidentBlocks(BLOCK, max_blocks, "events"), stale_s, max_message_bytes
    )
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.sleep(0.3)  # the subscription reaches the publisher

        async def send(*frames: bytes) -> None:
            await publisher.send_multipart(frames)

        yield feed, send
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        publisher.close(linger=0)


async def test_bad_messages_are_counted_and_the_feed_goes_on() -> None:
    async with feed_and_publisher(stale_s=0.5) as (feed, send):
        await send(b"", kv_events.seq_frame(0), b"\xc1not msgpack")
        await send(b"", b"short", payload(stored(1)))
        await send(b"", kv_events.seq_frame(1))
        await send(b"", kv_events.seq_frame(2), payload(stored(10)))
        await until(lambda: feed.batches == 1, "the good batch")
        assert feed.bad_messages == 3 and len(feed.index) == 1 and feed.last_seq == 2
        # past the bound: libzmq drops the message and the connection for good; once a request's
        # events are overdue the feed subscribes again, and what it missed meanwhile is a gap
        await send(b"", kv_events.seq_frame(3), b"x" * (2 << 20))
        feed.expect(time.monotonic())
        seq = 4
        async with asyncio.timeout(10):
            while feed.batches < 2:
                await send(b"", kv_events.seq_frame(seq), payload(stored(20)))
                await asyncio.sleep(0.05)
                seq += 1
        assert len(feed.index) == 2 and feed.bad_messages == 3 and feed.gaps == feed.last_seq - 2
        assert feed.resubscribed >= 1


async def test_a_publisher_that_restarts_starts_the_index_over_and_a_gap_is_counted() -> None:
    async with feed_and_publisher() as (feed, send):
        for seq in range(3):
            await send(b"", kv_events.seq_frame(seq), payload(stored(100 * seq + 1)))
        await until(lambda: feed.batches == 3, "three batches")
        await send(b"", kv_events.seq_frame(0), payload(AllBlocksCleared(), stored(7)))
        await until(lambda: feed.batches == 4, "the restarted publisher's first batch")
        assert feed.restarts == 1 and len(feed.index) == 1
        await send(b"", kv_events.seq_frame(5), payload(stored(8)))  # 1..4 missed, and no replay socket
        await until(lambda: feed.batches == 5, "the batch after the gap")
        assert feed.gaps == 4 and feed.last_seq == 5 and feed.fresh(time.monotonic())


async def test_a_flood_of_stored_blocks_keeps_the_index_bounded() -> None:
    async with feed_and_publisher(max_blocks=100) as (feed, send):
        for seq in range(50):
            await send(b"", kv_events.seq_frame(seq), payload(stored(1000 * seq, blocks=200)))
        await until(lambda: feed.batches == 50, "the flood")
        assert len(feed.index) == 100 and feed.gaps == 0


async def test_a_bound_feed_takes_the_batches_of_a_publisher_that_connects_to_it() -> None:
    """...and a second gateway process binding the same port (a standby during an upgrade) waits for
    it, running, instead of failing."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    feed = KVEventFeed(FeedEndpoints(endpoint, bind=True), ResidentBlocks(BLOCK, 100, "events"), 10.0)
    task = asyncio.create_task(feed.run())
    standby = KVEventFeed(FeedEndpoints(endpoint, bind=True), ResidentBlocks(BLOCK, 100, "events"), 0.1)
    waiting = asyncio.create_task(standby.run())
    publisher = zmq.asyncio.Context.instance().socket(zmq.PUB)
    publisher.connect(endpoint)  # as vLLM does for an endpoint without a wildcard
    try:
        seq = 0
        async with asyncio.timeout(10):
            while feed.batches == 0:  # sent before the connection is up, a batch is dropped: a gap
                await publisher.send_multipart((b"", kv_events.seq_frame(seq), payload(stored(1))))
                await asyncio.sleep(0.05)
                seq += 1
        assert len(feed.index) == 1 and feed.last_seq == seq - 1
        assert not waiting.done() and standby.batches == 0
    finally:
        for running in (task, waiting):
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        publisher.close(linger=0)
