"""What admission believes a backend's KV pool holds of a prompt: the index its KV events keep while
they are fresh (:mod:`gateway.backends.kv_events`), else the estimate from what the gateway sent it
(:meth:`~gateway.backends.kv_index.ResidentBlocks.remember`), and which of the two answered (``off``:
the backends keep no prefix cache, ``GATEWAY_PREFIX_CACHING=false``)."""

from __future__ import annotations

from typing import Literal

from dspark_common.zmq_endpoints import private_ipc_dir
from gateway.backends.kv_events import FeedEndpoints, KVEventFeed
from gateway.backends.kv_index import Match, PromptBlocks, ResidentBlocks
from gateway.config import Settings

Source = Literal["events", "estimate", "off"]


class KVView:
    """One backend's prefix cache as the gateway knows it: ``feed`` (None: it publishes no events)
    and the ``estimate``, always kept; ``enabled`` False: the backend keeps none."""

    def __init__(
        self, estimate: ResidentBlocks, feed: KVEventFeed | None = None, enabled: bool = True
    ) -> None:
        self.estimate = estimate
        self.feed = feed
        self.enabled = enabled

    @classmethod
    def configured(cls, settings: Settings, backend: str) -> KVView:
        """Backend ``backend``'s view: an estimate of ``GATEWAY_KV_BUDGET_TOKENS`` in blocks of
        ``GATEWAY_KV_BLOCK_SIZE``, and a feed where ``GATEWAY_KV_EVENTS`` names its endpoint (its index
        bounded at twice the pool's blocks: slack for removals it missed). The directory of an
        ``ipc://`` endpoint is made private here, at start (:func:`private_ipc_dir`: ``ValueError``
        if others can reach it)."""
        blocks = max(1, settings.kv_budget_tokens // settings.kv_block_size)
        estimate = ResidentBlocks(settings.kv_block_size, blocks, "estimate")
        endpoints = settings.kv_feeds.get(backend)
        if endpoints is None or not settings.prefix_caching:
            return cls(estimate, enabled=settings.prefix_caching)
        for endpoint in endpoints:
            if endpoint is not None:
                private_ipc_dir(endpoint)
        index = ResidentBlocks(settings.kv_block_size, 2 * blocks, "events")
        feed = FeedEndpoints(*endpoints, bind=settings.kv_events_bind)
        return cls(
            estimate, KVEventFeed(feed, index, settings.kv_events_stale_s, settings.kv_events_max_bytes)
        )

    def source(self, now: float) -> Source:
        """``events`` while the feed is fresh, else ``estimate``; ``off`` when the backend keeps none."""
        if not self.enabled:
            return "off"
        return "events" if self.feed is not None and self.feed.fresh(now) else "estimate"

    def match(self, prompt: PromptBlocks, now: float) -> tuple[Match, Source]:
        """What the pool holds of ``prompt``, and by which source: the estimate's where the index
        cannot tell (a KV cache group of a kind it does not know)."""
        source = self.source(now)
        if source == "events" and self.feed is not None:
            match = self.feed.index.match(prompt)
            if match is not None:
                return match, source
            source = "estimate"
        match = self.estimate.match(prompt)
        assert match is not None  # the estimate keeps one full-attention group
        return match, source

    def sent(self, prompt: PromptBlocks, now: float) -> None:
        """``prompt`` went to the backend: its blocks will be resident (the estimate), and its events
        are due (the feed's freshness)."""
        self.estimate.remember(prompt)
        if self.feed is not None and len(prompt) > self.estimate.block_size:
            self.feed.expect(now)

    def status(self, now: float) -> dict[str, object]:
        """``/admin/status``: the source admission uses, the estimate's size, and the feed's figures."""
        status: dict[str, object] = {
            "source": self.source(now),
            "estimate_blocks": len(self.estimate),
            "block_size": self.estimate.block_size,
        }
        if self.feed is not None:
            status["events"] = self.feed.status(now)
            index = self.feed.index
            status["kv_cache_groups"] = index.groups()
            status["unknown_kv_cache_groups"] = {
                "groups": {str(idx): kind for idx, kind in index.unknown_groups.items()},
                "events": index.unknown_events,
            }
        return status
