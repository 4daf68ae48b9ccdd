"""How long a request is expected to hold the backend, from what the backend did: the service time the
fair queue orders requests by (:mod:`gateway.admission.scheduler`).

``expected_s = prefill_tokens / prefill_tps + min(output, cap) / decode_tps`` where

- ``prefill_tps``: an exponentially weighted mean (weight :data:`ALPHA` for the newest) of
  ``uncached prompt tokens / upstream TTFT`` over finished requests that computed at least
  :data:`MIN_PREFILL_SAMPLE` tokens (below that the TTFT is mostly the step's fixed cost);
- ``decode_tps``: the same mean of the requests' decode rates (``decode_tokens_per_s`` of their
  records: completion tokens after the first over the time between the first and the last);
- ``output``: the key's mean completion tokens (the same weighting; the backend's mean for a key not
  seen yet, bounded to :data:`MAX_KEYS` keys, the least recently seen forgotten), never more than the
  request's output cap.

A rate not measured yet contributes nothing: before the first observation every request is expected
to take :data:`UNKNOWN_S`, and the queue is the keys' fair rotation in arrival order. Pure: no I/O,
no clock.
"""

from __future__ import annotations

#: Weight of the newest observation in each mean.
ALPHA = 0.2
#: Fewest uncached prompt tokens a prefill rate is measured on.
MIN_PREFILL_SAMPLE = 512
#: Keys whose mean output is kept.
MAX_KEYS = 4096
#: Expected service time, s, while no rate is known (every request alike).
UNKNOWN_S = 1.0


def _mean(old: float | None, sample: float) -> float:
    return sample if old is None else old + ALPHA * (sample - old)


class ServiceRates:
    """One backend's measured prefill and decode rates (tokens/s) and each key's mean output
    (tokens); :meth:`expected_s` of a request from them."""

    def __init__(self) -> None:
        self.prefill_tps: float | None = None
        self.decode_tps: float | None = None
        self.output_tokens: float | None = None
        """The backend's mean completion tokens, for a key with none of its own."""
        self._outputs: dict[str, float] = {}  # key -> mean completion tokens, least recently seen first

    def observe(
        self,
        key: str,
        prefill_tokens: int,
        upstream_ttft_s: float | None,
        completion_tokens: int,
        decode_tps: float | None,
    ) -> None:
        """A request of ``key`` ended: it computed ``prefill_tokens`` (its uncached prompt) in
        ``upstream_ttft_s`` and produced ``completion_tokens`` at ``decode_tps`` (None: not timed)."""
        if upstream_ttft_s and upstream_ttft_s > 0 and prefill_tokens >= MIN_PREFILL_SAMPLE:
            self.prefill_tps = _mean(self.prefill_tps, prefill_tokens / upstream_ttft_s)
        if decode_tps and decode_tps > 0:
            self.decode_tps = _mean(self.decode_tps, decode_tps)
        self.output_tokens = _mean(self.output_tokens, completion_tokens)
        mean = _mean(self._outputs.pop(key, None), completion_tokens)
        self._outputs[key] = mean
        if len(self._outputs) > MAX_KEYS:
            del self._outputs[next(iter(self._outputs))]

    def expected_s(self, key: str, prefill_tokens: int, output_cap: int) -> float:
        """Seconds a request of ``key`` computing ``prefill_tokens`` with at most ``output_cap`` output
        tokens is expected to run (see the module doc)."""
        seconds = 0.0
        if self.prefill_tps is not None:
            seconds += prefill_tokens / self.prefill_tps
        if self.decode_tps is not None:
            output = self._outputs.get(key, self.output_tokens)
            seconds += min(output_cap, output if output is not None else output_cap) / self.decode_tps
        return seconds if seconds > 0 else UNKNOWN_S
