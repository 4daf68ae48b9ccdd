"""The event loop lag sampler sees a held loop, and only as late as it was held."""

from __future__ import annotations

import asyncio
import time

from gateway.telemetry.loop_lag import sample_lag


class Samples(list[float]):
    def __init__(self) -> None:
        super().__init__()
        self.came = asyncio.Event()

    def observe(self, amount: float) -> None:
        self.append(amount)
        self.came.set()

    async def next(self) -> float:
        self.came.clear()
        await asyncio.wait_for(self.came.wait(), 30)
        return self[-1]


async def test_a_held_loop_shows_as_a_late_timer() -> None:
    samples = Samples()
    sampler = asyncio.create_task(sample_lag(samples, 0.005))
    try:
        await samples.next()  # the sampler's next timer is set: due within 5 ms
        time.sleep(0.1)  # noqa: ASYNC251 - the hold under test: a request's work done on the loop
        late = await samples.next()
    finally:
        sampler.cancel()
    # that timer could not fire before the hold ended
    assert late >= 0.1 - 0.005
    assert all(sample >= 0 for sample in samples)
