"""Per-app simulator state, built by ``create_sim_app`` and kept on ``app.state.sim``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .config import SimConfig
from .engine import Scheduler, SimEngine
from .metrics import SimMetrics


@dataclass(slots=True)
class SimState:
    """Everything one simulator app owns: its config, engine and metrics."""

    config: SimConfig
    engine: SimEngine
    metrics: SimMetrics
    started: int = field(default_factory=lambda: int(time.time()))
    """Unix time the app was built, s (``created`` of ``/v1/models``)."""

    @classmethod
    def build(cls, config: SimConfig) -> SimState:
        """Wire a scheduler, metrics that read it, and an engine that reports to the metrics."""
        scheduler = Scheduler(config.slots)
        metrics = SimMetrics(config.served_model_name, scheduler, config.kv_cache_tokens)
        return cls(config=config, engine=SimEngine(config, scheduler, metrics), metrics=metrics)
