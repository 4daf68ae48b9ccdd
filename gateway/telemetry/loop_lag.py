"""The event loop's lag: how late a timer fires, sampled every ``interval_s``.

The gateway serves every stream, ``/health``, ``/metrics`` and each queued client's heartbeat from one
event loop: whatever one request does between two awaits, all of them wait for. A timer due at ``t``
that fires at ``t + lag`` saw the loop held for at least ``lag`` (a hold of ``d`` seconds shows as at
least ``d - interval_s``), so a sampler a few milliseconds apart sees every hold of 10 ms and more,
whatever caused it. Measured on the loop's own clock (``loop.time()``, monotonic seconds).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

#: Histogram buckets of the lag, s: fine around the 10 ms a request's work may hold the loop.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Observer(Protocol):
    """Where the samples go (a prometheus-client ``Histogram``): ``observe(seconds)``."""

    def observe(self, amount: float) -> None: ...


async def sample_lag(observer: Observer, interval_s: float) -> None:
    """Observe the lateness of a timer set ``interval_s`` ahead, s (>= 0), again and again until
    cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval_s
        await asyncio.sleep(interval_s)
        observer.observe(max(0.0, loop.time() - due))
