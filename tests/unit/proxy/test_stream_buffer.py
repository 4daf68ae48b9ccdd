"""The stream buffer between the upstream reader and the client writer: bounded, coalescing, no lost
wake-up between the two sides, and a reader told when the writer took nothing for its timeout."""

from __future__ import annotations

import asyncio

from gateway.proxy.stream_buffer import StreamBuffer


async def test_the_writer_takes_everything_waiting_in_one_piece_and_sees_the_end() -> None:
    buffer = StreamBuffer(100)
    assert await buffer.put(b"a" * 40, 1.0) and await buffer.put(b"b" * 40, 1.0)
    assert await buffer.take() == (b"a" * 40 + b"b" * 40, False)
    assert await buffer.put(b"c", 1.0, final=True)
    buffer.close()
    assert await buffer.take() == (b"c", True)
    assert await buffer.take() is None


async def test_a_full_buffer_holds_the_reader_until_the_writer_takes() -> None:
    buffer = StreamBuffer(100)
    assert await buffer.put(b"x" * 90, 1.0)
    blocked = asyncio.ensure_future(buffer.put(b"y" * 20, 5.0))
    await asyncio.sleep(0.05)
    assert not blocked.done() and buffer.size == 90
    assert await buffer.take() == (b"x" * 90, False)
    assert await blocked and buffer.size == 20


async def test_one_piece_larger_than_the_bound_goes_in_alone() -> None:
    buffer = StreamBuffer(10)
    assert await buffer.put(b"z" * 50, 1.0)
    assert not await buffer.put(b"z", 0.05)  # nothing else fits beside it
    assert await buffer.take() == (b"z" * 50, False)


async def test_a_reader_the_writer_never_serves_gets_false_after_its_timeout() -> None:
    buffer = StreamBuffer(10)
    assert await buffer.put(b"0123456789", 1.0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await buffer.put(b"more", 0.2)
    assert loop.time() - started >= 0.2 and buffer.size == 10


async def test_no_wake_up_is_lost_when_the_writer_empties_and_waits_again_at_once() -> None:
    """The writer takes (room) and is back waiting for data before the reader runs again: the reader
    must still see the room, the writer still see the data (each side clears only its own signal)."""
    buffer = StreamBuffer(8)
    total = 0

    async def read() -> None:
        for _ in range(2000):
            assert await buffer.put(b"12345678", 2.0)
        buffer.close()

    async def write() -> None:
        nonlocal total
        while (taken := await buffer.take()) is not None:
            total += len(taken[0])

    async with asyncio.timeout(10):
        await asyncio.gather(read(), write())
    assert total == 16000
