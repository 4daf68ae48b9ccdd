"""Prometheus series bound once, shared by the gateway's and the simulator's metrics.

``family.labels(*values)`` hashes its label values and takes the family's lock at every call; a
request updates ~10 series (the simulator ~15, some per engine step). :class:`BoundSeries` keeps the
child ``labels()`` returned, keyed by the family and the label values after a fixed prefix (the
model, the key), so a series is still created the first time it is used — as ``labels()`` would
create it: one nothing was recorded in stays absent from ``/metrics`` — and looked up in a dict after.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.metrics import MetricWrapperBase


class BoundSeries:
    """``bound(family, *values)``: ``family.labels(*prefix, *values)``, created once and kept.

    The children kept are as many as the series exposed (bounded by the same label values).
    """

    def __init__(self, *prefix: str) -> None:
        self._prefix = prefix
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}

    def __call__(self, family: MetricWrapperBase, *values: str) -> Any:
        """The child of ``family`` for the prefix and ``values`` (a ``Counter``, ``Histogram``, …)."""
        child = self._children.get((family, values))
        if child is None:
            child = self._children[(family, values)] = family.labels(*self._prefix, *values)
        return child
