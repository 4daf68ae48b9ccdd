"""The runner's clean-up that must end (gateway/batch/runner.py ``to_the_end``): a batch's lease given
back as the gateway stops is waited for however often the stopping task is cancelled, so the database
never closes under it (a lease not given back keeps the batch from every other process until it
lapses)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.batch.runner import to_the_end


async def settle() -> None:
    """Let every task ready to run take its step."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_work_ends_before_a_caller_cancelled_twice_goes_on() -> None:
    go_on = asyncio.Event()
    ended: list[str] = []

    async def release() -> str:
        await go_on.wait()
        ended.append("released")
        return "released"

    caller = asyncio.create_task(to_the_end(release()))
    await settle()
    for _ in range(2):  # the lifespan's cancel, then a second one while the release runs
        caller.cancel()
        await settle()
    assert not caller.done(), "the caller went on while its release still ran"
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await caller  # the cancellation is not lost: raised once the release ended
    assert ended == ["released"]


async def test_a_caller_not_cancelled_gets_the_result_or_the_error() -> None:
    async def release() -> int:
        return 7

    async def refused() -> None:
        raise ConnectionError("the database away")

    assert await to_the_end(release()) == 7
    with pytest.raises(ConnectionError):
        await to_the_end(refused())
