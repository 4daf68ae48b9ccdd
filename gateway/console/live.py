"""The overview's live figures from the newest ledger rows: TTFT p50 / p95, decode speed and DSpark
acceptance over the last minutes. Pure: rows (as ``UsageLedger.recent`` gives them) in, numbers out."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

#: The overview's window, seconds.
WINDOW_S = 300.0


def figures(rows: Iterable[Mapping[str, Any]], now: datetime | None = None) -> dict[str, Any]:
    """Over the rows that arrived in the last :data:`WINDOW_S` s: ``requests``, ``ttft_p50_s`` and
    ``ttft_p95_s`` (nearest-rank), ``decode_tokens_per_s`` (mean of the requests'),
    ``acceptance_rate`` (accepted / drafted draft tokens, summed), ``cache_hit_ratio`` (cached /
    prompt tokens, summed), ``cache_prediction_error_tokens`` (mean |predicted - reported cached
    tokens| of the rows admission predicted, every API's: docs/prefix-cache.md; None where no row
    has the figure), ``cache_predicted`` (those rows) and ``cache_unpredicted`` (rows admission sized
    with the prefix cache on but could not predict, by the reason their ``cache_source`` gives:
    ``prompt_estimated``, ``image``, ``unconverted``, ``no_ids``)."""
    start = (now or datetime.now(UTC)) - timedelta(seconds=WINDOW_S)
    recent = [row for row in rows if _arrived(row) >= start]
    ttfts = sorted(row["ttft_s"] for row in recent if row.get("ttft_s") is not None)
    speeds = [row["decode_tokens_per_s"] for row in recent if row.get("decode_tokens_per_s")]
    drafted = accepted = 0
    for row in recent:
        spec = row.get("spec") or {}
        drafted += spec.get("draft_tokens") or 0
        accepted += spec.get("accepted_tokens") or 0
    prompt = sum(row.get("prompt_tokens") or 0 for row in recent)
    errors = [
        abs(row["cached_tokens_predicted"] - (row.get("cached_tokens") or 0))
        for row in recent
        if row.get("cached_tokens_predicted") is not None
    ]
    unpredicted = Counter(
        row["cache_source"]
        for row in recent
        if row.get("cached_tokens_predicted") is None and row.get("cache_source") is not None
    )
    return {
        "requests": len(recent),
        "ttft_p50_s": _rank(ttfts, 0.50),
        "ttft_p95_s": _rank(ttfts, 0.95),
        "decode_tokens_per_s": statistics.fmean(speeds) if speeds else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "cache_hit_ratio": sum(row.get("cached_tokens") or 0 for row in recent) / prompt if prompt else None,
        "cache_prediction_error_tokens": statistics.fmean(errors) if errors else None,
        "cache_predicted": len(errors),
        "cache_unpredicted": dict(unpredicted),
    }


def _arrived(row: Mapping[str, Any]) -> datetime:
    value = row.get("arrived_at")
    return datetime.fromisoformat(value) if isinstance(value, str) else datetime.min.replace(tzinfo=UTC)


def _rank(ordered: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``ordered`` (ascending), None when empty."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
