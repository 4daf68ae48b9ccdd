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
        self._running: dict[int, PromptBlocks] = {}  # id -> the prompt of a request sent, until it ends

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
        index = ResidentBlocks(settings.kv_block_size, 2 * blocks, "events", settings.kv_budget_tokens)
        feed = FeedEndpoints(*endpoints, bind=settings.kv_events_bind)
        return cls(
            estimate, KVEventFeed(feed, index, settings.kv_events_stale_s, settings.kv_events_max_bytes)
        )

    def block_sizes(self) -> set[int]:
        """The block sizes :meth:`match` keys a prompt by (:meth:`PromptBlocks.keying
        <gateway.backends.kv_index.PromptBlocks.keying>` computes them ahead)."""
        sizes = self.estimate.block_sizes()
        return sizes if self.feed is None else sizes | self.feed.index.block_sizes()

    def groups_known(self) -> bool:
        """Whether :meth:`block_sizes` are all a prompt will be matched by: the estimate's one, or the
        KV cache groups the events named once they came (a prompt keyed before may hold its ids)."""
        return self.feed is None or self.feed.index.groups_seen

    def source(self, now: float) -> Source:
        """``events`` while the feed is fresh, else ``estimate``; ``off`` when the backend keeps none."""
        if not self.enabled:
            return "off"
        return "events" if self.feed is not None and self.feed.fresh(now) else "estimate"

    def match(self, prompt: PromptBlocks, now: float, reserved_tokens: int = 0) -> tuple[Match, Source]:
        """What the pool will hold of ``prompt`` when it runs, and by which source: the estimate's
        where the index cannot tell (a KV cache group of a kind it does not know). ``reserved_tokens``:
        the KV of the requests admitted to the backend (admission's ``kv_reserved_tokens``), whose
        blocks still to come evict cached ones
        (:meth:`~gateway.backends.kv_index.ResidentBlocks.evicting`)."""
        source = self.source(now)
        running = self._running.values()
        if source == "events" and self.feed is not None:
            match = self.feed.index.match(prompt, reserved_tokens, running)
            if match is not None:
                return match, source
            source = "estimate"
        match = self.estimate.match(prompt, reserved_tokens, running)
        assert match is not None  # the estimate keeps one full-attention group
        return match, source

    def sent(self, prompt: PromptBlocks, now: float) -> None:
        """``prompt`` went to the backend: its blocks will be resident (the estimate) and in use until
        :meth:`ended`, and its events are due (the feed's freshness)."""
        self.estimate.remember(prompt)
        self._running[id(prompt)] = prompt
        if self.feed is not None and len(prompt) > self.estimate.block_size:
            self.feed.expect(now)

    def ended(self, prompt: PromptBlocks) -> None:
        """The request of ``prompt`` (:meth:`sent`) has left the backend: its blocks are the most
        recently freed (:meth:`~gateway.backends.kv_index.ResidentBlocks.touch`)."""
        if self._running.pop(id(prompt), None) is None:
            return
        self.estimate.touch(prompt)
        if self.feed is not None:
            self.feed.index.touch(prompt)

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
