"""The turns of batch lines (gateway/batch/turns.py): never more than the capacity in flight, a freed
turn to the keys waiting in rotation (a key with a long backlog does not hold up one that waits
behind it), and a take cancelled while it waits holds nothing."""

from __future__ import annotations

import asyncio

import pytest

from gateway.batch.turns import Turns


async def settle() -> None:
    """Let every task ready to run take its step (the grants are futures set synchronously)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_freed_turn_goes_to_the_keys_waiting_in_rotation() -> None:
    turns = Turns(2)
    await turns.take("large")
    await turns.take("large")
    granted: list[str] = []

    async def feed(key: str, lines: int) -> None:
        """A batch's loop: one waiter at a time, the next asked once the last was given."""
        for _ in range(lines):
            await turns.take(key)
            granted.append(key)

    feeding = [asyncio.create_task(feed("large", 6)), asyncio.create_task(feed("small", 2))]
    await settle()
    assert (turns.busy, turns.waiting, granted) == (2, 2, [])  # full: both keys wait
    for _ in range(8):
        turns.give()
        await settle()
        assert turns.busy == 2
    await asyncio.gather(*feeding)
    # the small key waited behind the large one's backlog, yet had every other turn from its first
    assert granted == ["large", "small", "large", "small", "large", "large", "large", "large"]


async def test_two_batches_of_one_key_alternate_within_its_turns() -> None:
    turns = Turns(1)
    await turns.take("k")
    granted: list[str] = []

    async def feed(name: str) -> None:
        for _ in range(2):
            await turns.take("k")
            granted.append(name)

    feeding = [asyncio.create_task(feed("first")), asyncio.create_task(feed("second"))]
    await settle()
    for _ in range(4):
        turns.give()
        await settle()
    await asyncio.gather(*feeding)
    assert granted == ["first", "second", "first", "second"]


async def test_a_take_cancelled_while_it_waits_holds_nothing() -> None:
    turns = Turns(1)
    await turns.take("a")
    waiting = asyncio.create_task(turns.take("b"))
    await settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert turns.waiting == 0
    turns.give()
    assert turns.busy == 0
    await turns.take("c")  # free at once
    assert turns.busy == 1


async def test_a_turn_granted_to_a_take_cancelled_meanwhile_is_passed_on() -> None:
    turns = Turns(1)
    await turns.take("a")
    cancelled, next_one = asyncio.create_task(turns.take("b")), asyncio.create_task(turns.take("c"))
    await settle()
    turns.give()  # "b" is granted, and cancelled before it runs
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await next_one
    assert (turns.busy, turns.waiting) == (1, 0)


def test_no_turns_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Turns(0)
