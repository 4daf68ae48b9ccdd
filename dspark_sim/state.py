"""Per-app simulator state, built by ``create_sim_app`` and kept on ``app.state.sim``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .config import SimConfig
from .engine import EngineObserver, SimEngine
from .hybrid_cache import HybridPrefixCache, deepseek_v4_groups
from .kv_publisher import KVEventPublisher
from .metrics import SimMetrics
from .prefix_cache import PrefixCache
from .scheduler import Scheduler
from .trace import Observers, SequenceTrace


@dataclass(slots=True)
class SimState:
    """Everything one simulator app owns: its config, engine, metrics and (optional) sequence trace."""

    config: SimConfig
    engine: SimEngine
    metrics: SimMetrics
    trace: SequenceTrace | None = None
    started: int = field(default_factory=lambda: int(time.time()))
    """Unix time the app was built, s (``created`` of ``/v1/models``)."""
    publisher: KVEventPublisher | None = None
    """Where the prefix cache's KV events go (``SimConfig.kv_events_endpoint``)."""
    stored: dict[str, bytes] = field(default_factory=dict)
    """Stored Responses answers by id (``SimConfig.responses_store``), in this process's memory."""

    @classmethod
    def build(cls, config: SimConfig) -> SimState:
        """Wire a scheduler, metrics that read it, and an engine that reports to the metrics (and to
        the trace file when ``config.trace_file`` is set)."""
        scheduler = Scheduler(
            config.slots,
            config.kv_cache_tokens,
            config.prefill_chunk_tokens,
            by_priority=config.scheduling_policy == "priority",
        )
        metrics = SimMetrics(config.served_model_name, scheduler, config.kv_cache_tokens)
        trace = SequenceTrace(config.trace_file) if config.trace_file else None
        observer: EngineObserver = metrics if trace is None else Observers(metrics, trace)
        scheduler.on_preempt = observer.on_preempt
        pool_blocks = config.kv_cache_tokens // config.block_size
        cache: PrefixCache | HybridPrefixCache | None = None
        if config.prefix_caching and config.kv_cache_layout == "deepseek_v4":
            cache = HybridPrefixCache(config.block_size, pool_blocks, deepseek_v4_groups(config.block_size))
        elif config.prefix_caching:
            cache = PrefixCache(config.block_size, pool_blocks)
        publisher = (
            KVEventPublisher(config.kv_events_endpoint, config.kv_events_replay_endpoint)
            if config.kv_events_endpoint
            else None
        )
        engine = SimEngine(config, scheduler, observer, cache, publisher)
        return cls(config=config, engine=engine, metrics=metrics, trace=trace, publisher=publisher)

    def close(self) -> None:
        """Flush and close the trace file and the event sockets, if any (at shutdown)."""
        if self.trace is not None:
            self.trace.close()
        if self.publisher is not None:
            self.publisher.close()
