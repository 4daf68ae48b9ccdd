"""The KV event feed (gateway/backends/kv_events.py) against real ZMQ publishers (tests/support/
kv_publisher.py, vLLM's wire): garbage, short and oversized messages are counted and skipped without
stalling it; a batch numbered out of order is believed only when the publisher's replay socket holds
it — a restart (numbers from 0 again) then starts the index over, a forged number changes nothing; a
gap with no replay is counted; a flood of stored blocks keeps the index within its bound."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from dspark_common import kv_events
from dspark_common.kv_events import AllBlocksCleared
from gateway.backends import kv_events as feed_module
from gateway.backends.kv_events import FeedEndpoints, KVEventFeed
from gateway.backends.kv_index import PromptBlocks, ResidentBlocks
from tests.support import kv_publisher
from tests.support.kv_publisher import Publisher, payload
from tests.support.servers import free_port

BLOCK = 4


def stored(first: int, blocks: int = 1, block_size: int = BLOCK):
    return kv_publisher.stored(first, block_size, blocks)


async def until(predicate, what: str) -> None:
    """Poll ``predicate`` every 10 ms for up to 60 s."""
    deadline = time.monotonic() + 60
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within 60 s")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def running(feed: KVEventFeed):
    task = asyncio.create_task(feed.run())
    try:
        yield feed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make_feed(events: str, replay: str | None = None, max_blocks: int = 1000, **options) -> KVEventFeed:
    endpoints = FeedEndpoints(events, replay, bind=options.pop("bind", False))
    return KVEventFeed(endpoints, ResidentBlocks(BLOCK, max_blocks, "events"), **{
        "stale_s": 10.0, "max_message_bytes": 1 << 20, **options,
    })  # fmt: skip


async def subscribed(feed: KVEventFeed, publisher: Publisher, seq: int, data: bytes) -> None:
    """Publish batch ``seq`` again and again until the feed took it (a subscription takes a moment to
    reach a publisher: what it sends before is not received)."""
    async with asyncio.timeout(60):
        while feed.last_seq < seq:
            publisher.publish(seq, data, buffered=False)
            await asyncio.sleep(0.05)


def ipc(tmp_path: Path, name: str) -> str:
    return f"ipc://{tmp_path}/{name}"


async def test_bad_and_oversized_messages_are_counted_and_the_feed_goes_on(tmp_path: Path) -> None:
    events = ipc(tmp_path, "events")
    with Publisher(events) as publisher:
        async with running(make_feed(events, stale_s=0.5, max_message_bytes=1 << 16)) as feed:
            await subscribed(feed, publisher, 0, payload(stored(1)))
            publisher.pub.send_multipart((b"", kv_events.seq_frame(1), b"\xc1not msgpack"))
            publisher.pub.send_multipart((b"", b"short", payload(stored(1))))
            publisher.pub.send_multipart((b"", kv_events.seq_frame(2)))
            publisher.publish(3, payload(stored(10)))
            await until(lambda: feed.batches == 2, "the good batch")
            assert feed.ignored["malformed"] == 3 and len(feed.index) == 2 and feed.last_seq == 3
            # past the bound: libzmq cuts the connection (the message never allocated); the feed
            # counts the cut and subscribes again, and what it missed meanwhile is a gap
            publisher.pub.send_multipart((b"", kv_events.seq_frame(4), b"x" * (1 << 20)))
            await until(lambda: feed.ignored["disconnected"] == 1, "the cut")
            seq = 5
            async with asyncio.timeout(60):
                while feed.batches < 3:
                    publisher.publish(seq, payload(stored(20)))
                    await asyncio.sleep(0.05)
                    seq += 1
            assert len(feed.index) == 3 and feed.ignored["malformed"] == 3
            # missed: batch 2 (sent as two frames), 4 (cut) and those sent before the new subscription
            assert feed.gaps == feed.last_seq - 3 and feed.resubscribed >= 1


async def test_without_a_replay_a_gap_is_counted_and_no_restart_is_believed(tmp_path: Path) -> None:
    events = ipc(tmp_path, "events")
    with Publisher(events) as publisher:
        async with running(make_feed(events)) as feed:
            await subscribed(feed, publisher, 0, payload(stored(1)))
            publisher.publish(5, payload(stored(8)))  # 1..4 missed
            await until(lambda: feed.batches == 2, "the batch after the gap")
            assert feed.gaps == 4 and feed.last_seq == 5
            publisher.publish(0, payload(AllBlocksCleared(), stored(7)))
            await until(lambda: feed.ignored["out_of_order"] == 1, "the batch numbered 0")
            assert feed.restarts == 0 and len(feed.index) == 2 and feed.last_seq == 5


async def test_a_batch_out_of_order_is_believed_only_when_the_replay_holds_it(tmp_path: Path) -> None:
    """A forged batch 0 (a restart that did not happen), a forged jump ahead and a genuine old batch
    sent again change nothing; a publisher that did restart starts the index over."""
    events, replay = ipc(tmp_path, "events"), ipc(tmp_path, "replay")
    with Publisher(events, replay) as publisher:
        async with running(make_feed(events, replay)) as feed:
            first = payload(stored(1))
            publisher.publish(0, first)
            await subscribed(feed, publisher, 0, first)  # the replay holds it: confirmed
            for seq in (1, 2):
                publisher.publish(seq, payload(stored(100 * seq)))
            await until(lambda: feed.last_seq == 2, "batches 1 and 2")
            assert len(feed.index) == 3

            publisher.publish(0, payload(AllBlocksCleared()), buffered=False)  # a forger's restart
            publisher.publish(0, first, buffered=False)  # the genuine batch 0, sent again: skipped
            publisher.publish(10**9, payload(stored(7)), buffered=False)  # a forged jump ahead
            await until(lambda: feed.ignored["out_of_order"] == 2, "the forged batches")
            assert feed.restarts == 0 and len(feed.index) == 3 and feed.last_seq == 2
            publisher.publish(3, payload(stored(300)))
            await until(lambda: feed.last_seq == 3, "the next genuine batch")
            assert len(feed.index) == 4 and feed.gaps == 0

            publisher.restart()  # vLLM restarted: its cache is empty, its numbers start again
            publisher.publish(0, payload(stored(9)))
            await until(lambda: feed.restarts == 1, "the restart")
            assert len(feed.index) == 1 and feed.last_seq == 0 and feed.ignored["out_of_order"] == 2


async def test_a_restarted_publisher_first_heard_past_the_last_number_seen_starts_the_index_over(
    tmp_path: Path,
) -> None:
    """vLLM restarted and published batches 0..2 before the subscription reached it: its first batch
    received, 3, is numbered past the last one seen (1), and still it is a restart, not a gap."""
    events, replay = ipc(tmp_path, "events"), ipc(tmp_path, "replay")
    with Publisher(events, replay) as publisher:
        async with running(make_feed(events, replay)) as feed:
            first = payload(stored(1))
            publisher.publish(0, first)
            await subscribed(feed, publisher, 0, first)
            publisher.publish(1, payload(stored(2)))
            await until(lambda: feed.last_seq == 1, "batch 1")

            replayed = feed.replayed
            publisher.restart()
            for seq in range(3):
                publisher.publish(seq, payload(stored(50 + seq)), sent=False)
            publisher.publish(3, payload(stored(60)))
            await until(lambda: feed.last_seq == 3, "the restarted publisher's batch 3")
            assert feed.restarts == 1 and feed.gaps == 0 and feed.replayed == replayed + 3
            assert len(feed.index) == 4 and feed.index.match(PromptBlocks([1] * (BLOCK + 1))).blocks == 0


async def test_a_restarted_publisher_is_known_by_its_replay_whatever_its_first_batch_number(
    tmp_path: Path,
) -> None:
    """vLLM restarted (a new socket the feed connects to again) and published batches 0 and 1 before
    the subscription reached it: its first batch received, 2, is numbered next after the last one
    seen (1), and still it is a restart."""
    events, replay = ipc(tmp_path, "events"), ipc(tmp_path, "replay")
    async with running(make_feed(events, replay)) as feed:
        with Publisher(events, replay) as publisher:
            first = payload(stored(1))
            publisher.publish(0, first)
            await subscribed(feed, publisher, 0, first)
            publisher.publish(1, payload(stored(2)))
            await until(lambda: feed.last_seq == 1, "batch 1")
        with Publisher(events, replay) as publisher:
            for seq in range(2):
                publisher.publish(seq, payload(stored(50 + seq)), sent=False)
            later = payload(stored(60))
            publisher.publish(2, later, sent=False)
            await subscribed(feed, publisher, 2, later)
            assert feed.restarts == 1 and feed.gaps == 0 and len(feed.index) == 3
            assert feed.index.match(PromptBlocks([1] * (BLOCK + 1))).blocks == 0


async def test_a_batch_published_before_the_subscription_reached_the_publisher_is_replayed() -> None:
    """vLLM connects its PUB socket to a gateway that binds (the runtime profile's tcp endpoint) and
    publishes before the gateway is up: that batch is lost to the subscription, and no other follows
    it; the feed asks the replay once the publisher's connection is made. Then a batch it sent while
    the subscription was made again is asked of the replay once it is overdue."""
    events, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    with Publisher(events, replay, connect=True) as publisher:
        publisher.publish(0, payload(stored(1)))  # no subscriber yet: dropped by the PUB socket
        async with running(make_feed(events, replay, bind=True)) as feed:
            await until(lambda: feed.last_seq == 0, "batch 0, from the replay")
            assert feed.replayed == 1 and len(feed.index) == 1

            publisher.publish(1, payload(stored(2)), sent=False)
            feed.expect(time.monotonic())
            await until(lambda: feed.last_seq == 1, "the overdue batch 1, from the replay")
            assert feed.replayed == 2 and feed.gaps == 0 and len(feed.index) == 2


async def test_a_feed_that_starts_late_takes_the_missed_batches_from_the_replay(tmp_path: Path) -> None:
    events, replay = ipc(tmp_path, "events"), ipc(tmp_path, "replay")
    with Publisher(events, replay) as publisher:
        for seq in range(3):
            publisher.publish(seq, payload(stored(10 * seq + 1)))
        async with running(make_feed(events, replay)) as feed:
            seq = 3
            async with asyncio.timeout(60):
                while feed.batches == 0:
                    publisher.publish(seq, payload(stored(10 * seq + 1)))
                    await asyncio.sleep(0.05)
                    seq += 1
            assert feed.replayed >= 3 and feed.gaps == 0 and len(feed.index) == feed.last_seq + 1


async def test_blocks_of_another_size_are_counted_and_change_nothing(tmp_path: Path) -> None:
    events = ipc(tmp_path, "events")
    with Publisher(events) as publisher:
        async with running(make_feed(events)) as feed:
            await subscribed(feed, publisher, 0, payload(stored(1, block_size=1), stored(2)))
            assert feed.ignored["block_size"] == 1 and len(feed.index) == 1
            assert feed.index.block_size == BLOCK


async def test_a_flood_of_stored_blocks_keeps_the_index_bounded(tmp_path: Path) -> None:
    events = ipc(tmp_path, "events")
    with Publisher(events) as publisher:
        async with running(make_feed(events, max_blocks=100)) as feed:
            await subscribed(feed, publisher, 0, payload(stored(1)))
            for seq in range(1, 50):
                publisher.publish(seq, payload(stored(1000 * seq, blocks=200)))
            await until(lambda: feed.last_seq == 49, "the flood")
            assert len(feed.index) == 100 and feed.gaps == 0


async def test_a_bound_feed_takes_the_batches_of_a_publisher_that_connects_to_it() -> None:
    """...and a second gateway process binding the same port (a standby during an upgrade) waits for
    it, running, instead of failing."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    standby = make_feed(endpoint, bind=True, stale_s=0.1)
    async with running(make_feed(endpoint, bind=True)) as feed, running(standby):
        with Publisher(endpoint, connect=True) as publisher:  # as vLLM does for a tcp endpoint
            await subscribed(feed, publisher, 0, payload(stored(1)))
            assert len(feed.index) == 1 and feed.last_seq == 0
            assert standby.batches == 0


async def test_with_its_replay_silent_the_feed_takes_nothing_out_of_order(
    tmp_path: Path, monkeypatch
) -> None:
    """A replay that does not answer confirms nothing: the batch is ignored, the feed goes on; once a
    request's events are overdue it subscribes again."""
    monkeypatch.setattr(feed_module, "REPLAY_TIMEOUT_S", 0.2)
    events = ipc(tmp_path, "events")
    with Publisher(events) as publisher:  # no replay socket at the feed's replay endpoint
        async with running(make_feed(events, ipc(tmp_path, "replay"), stale_s=0.3)) as feed:
            async with asyncio.timeout(60):
                while feed.ignored["out_of_order"] == 0:
                    publisher.publish(3, payload(stored(1)))
                    await asyncio.sleep(0.05)
            assert feed.last_seq == -1 and feed.batches == 0 and len(feed.index) == 0
            feed.expect(time.monotonic())
            await until(lambda: feed.resubscribed >= 1, "a new subscription")
