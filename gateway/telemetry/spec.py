"""DSpark / speculative-decoding acceptance of one request, from the best source available.

Definitions (vLLM ``vllm/v1/spec_decode/metrics.py``; vLLM docs "Speculative decoding"):

- a *step* is one target-model forward pass that verifies ``k`` draft tokens; it yields the accepted
  drafts plus one token of its own (the bonus/correction token), so ``tokens = accepted + steps``;
- acceptance rate ``= accepted / (steps × k)`` (drafted tokens accepted, 0..1);
- mean acceptance length ``= tokens / steps`` (tokens per step, 1..k+1).

Sources, best first:

- ``backend``: the upstream's own per-request ``metrics.speculative_decoding`` (vLLM >= 0.32 with
  ``--enable-per-request-metrics``);
- ``metrics_delta`` when ``exact``: the rise of vLLM's ``vllm:spec_decode_num_accepted_tokens_total`` /
  ``…_num_draft_tokens_total`` / ``…_num_drafts_total`` over the life of a request that ran alone;
- ``stream``: with ``continuous_usage_stats`` each upstream chunk after the first token is taken as one
  engine step, its tokens the increase of ``usage.completion_tokens``. vLLM merges the outputs of
  several steps into one chunk when its stream consumer lags (seen on vLLM 0.32: 3 steps arrived as 2
  chunks), so this undercounts steps and overstates acceptance — hence it ranks below an exact delta;
- ``metrics_delta`` with other requests overlapping (``exact: false``): not this request's alone.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

Source = Literal["backend", "stream", "metrics_delta"]

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
COUNTERS = (ACCEPTED, DRAFT_TOKENS, DRAFTS)


@dataclass(frozen=True, slots=True)
class SpecStats:
    """Acceptance of one request. ``steps``: verification steps; tokens in counts of tokens."""

    source: Source
    steps: int
    accepted_tokens: int
    draft_tokens: int
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    exact: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The client-facing ``spec`` object (``exact`` only for ``metrics_delta``)."""
        names = _FIELDS if self.source == "metrics_delta" else _FIELDS_INEXACT
        return {name: getattr(self, name) for name in names}  # asdict's deep copy: scalars need none


_FIELDS = tuple(f.name for f in fields(SpecStats))
_FIELDS_INEXACT = tuple(name for name in _FIELDS if name != "exact")


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 6) if den > 0 else None


def clamp(stats: SpecStats, k: int) -> tuple[SpecStats, list[str]]:
    """Bound acceptance rate to [0, 1] and mean acceptance length to [1, k + 1]; name what was clamped."""
    rate, length = stats.acceptance_rate, stats.mean_acceptance_length
    clamped: list[str] = []
    if rate is not None and not 0 <= rate <= 1:
        rate = min(1.0, max(0.0, rate))
        clamped.append("acceptance_rate")
    if length is not None and k > 0 and not 1 <= length <= k + 1:
        length = min(float(k + 1), max(1.0, length))
        clamped.append("mean_acceptance_length")
    if not clamped:
        return stats, []
    return replace(stats, acceptance_rate=rate, mean_acceptance_length=length), clamped


def _stats(source: Source, steps: int, accepted: int, drafted: int, exact: bool = True) -> SpecStats:
    """Rate = accepted / drafted; length = (accepted + steps) / steps (one bonus token per step)."""
    return SpecStats(
        source=source,
        steps=steps,
        accepted_tokens=accepted,
        draft_tokens=drafted,
        acceptance_rate=_ratio(accepted, drafted),
        mean_acceptance_length=_ratio(accepted + steps, steps),
        exact=exact,
    )


def from_backend(metrics: Mapping[str, Any] | None) -> SpecStats | None:
    """From vLLM's per-request ``metrics`` object (its ``speculative_decoding`` part), if present."""
    spec = (metrics or {}).get("speculative_decoding")
    if not isinstance(spec, Mapping):
        return None
    try:
        steps = int(spec["num_spec_steps"])
        accepted = int(spec["num_accepted_draft_tokens"])
        drafted = int(spec["num_draft_tokens"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if min(steps, accepted, drafted) < 0:
        return None
    return _stats("backend", steps, accepted, drafted)


def from_stream(step_tokens: list[int], k: int) -> SpecStats | None:
    """From tokens per engine step (chunks after the first token). ``k``: draft tokens per step."""
    steps = len(step_tokens)
    if steps == 0 or k <= 0:
        return None
    return _stats("stream", steps, sum(step_tokens) - steps, steps * k)


def from_counters(before: Mapping[str, float], after: Mapping[str, float], exact: bool) -> SpecStats | None:
    """From two readings of vLLM's spec-decode counters; None if they are missing or went backwards."""
    if not all(name in before and name in after for name in COUNTERS):
        return None
    accepted, drafted, steps = (int(after[n] - before[n]) for n in COUNTERS)
    if min(accepted, drafted, steps) < 0 or steps == 0:
        return None
    return _stats("metrics_delta", steps, accepted, drafted, exact)
