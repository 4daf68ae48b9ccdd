"""Work in pieces gives the event loop back while it runs (dspark_common/turns.py)."""

from __future__ import annotations

import asyncio
import time

from dspark_common.turns import Turns, Work, run_now


def busy(pieces: int, piece_s: float, log: list[str]) -> Work[int]:
    for i in range(pieces):
        until = time.perf_counter() + piece_s
        while time.perf_counter() < until:
            pass
        log.append(f"piece {i}")
        yield
    return pieces


async def test_other_tasks_run_between_the_pieces() -> None:
    log: list[str] = []

    async def other() -> None:
        while True:
            log.append("other")
            await asyncio.sleep(0)

    ticking = asyncio.create_task(other())
    await asyncio.sleep(0)  # the other task is under way
    try:
        assert await Turns(slice_s=0.002).run(busy(10, 0.001, log)) == 10
    finally:
        ticking.cancel()
    # after 2 ms of work at most (two pieces), the other task had its turn
    runs = "".join("p" if entry.startswith("piece") else "o" for entry in log).split("o")
    assert max(map(len, runs)) <= 2 and log.count("piece 9") == 1


def test_run_now_runs_the_work_to_its_end() -> None:
    log: list[str] = []
    assert run_now(busy(3, 0, log)) == 3
    assert log == ["piece 0", "piece 1", "piece 2"]
