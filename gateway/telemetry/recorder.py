"""RequestRecorder: watches one request go by and produces its :class:`RequestTelemetry`.

The dialect's translator reports each upstream chunk's facts to :meth:`RequestRecorder.observe` (after
the reasoning split, so reasoning tokens can be told from answer tokens) and a whole body's to
:meth:`RequestRecorder.observe_answer`; the request's owner calls ``admitted`` and ``finish``. It
records nothing itself: sinks (Prometheus, the ledger, the client) read the finished record.
Pure: no I/O; the clock is injectable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from gateway.telemetry.observation import Observation
from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.spec import SpecStats, clamp, from_backend, from_counters, from_stream

#: Characters of released text a token, at least, for a stream that ended early (the prompt's own
#: estimate takes 4 bytes of request JSON a token: :mod:`gateway.proxy.prompt_size`).
CHARS_PER_TOKEN = 4


def _int(value: Any) -> int:
    """A token count from upstream JSON: non-negative int, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class RequestRecorder:
    """Collects one request's timing, usage and acceptance. ``k``: draft tokens per step (DSpark K)."""

    __slots__ = (
        "record",
        "_k",
        "_clock",
        "_t_arrival",
        "_t_admit",
        "_t_first",
        "_t_last",
        "_t_output",
        "_tokens",
        "_step_tokens",
        "_reasoning_tokens",
        "_unattributed",
        "_usage",
        "_backend",
        "_split_chars",
        "_indices",
        "_output_chunks",
        "_delivered",
    )

    def __init__(
        self,
        record: RequestTelemetry,
        k: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.record = record
        self._k = k
        self._clock = clock
        self._t_arrival = clock()
        self._t_admit: float | None = None
        self._t_first: float | None = None
        self._t_last: float | None = None  # the last usage increase (a stream with per-step usage)
        self._t_output: float | None = None  # the last chunk with output
        self._tokens = 0
        self._step_tokens: list[int] = []
        self._reasoning_tokens = 0.0
        self._unattributed = 0  # stream tokens whose text has not been released yet
        self._usage: Mapping[str, Any] | None = None
        self._backend: Mapping[str, Any] | None = None
        #: reasoning, content characters released: the attribution of a response whose usage came
        #: only at its end (a non-stream answer; a Responses or Messages stream)
        self._split_chars = [0, 0]
        self._indices: set[int] = set()  # choice indices seen: step accounting holds for n == 1 only
        self._output_chunks = 0  # stream chunks that carried output
        self._delivered = (0, 0)  # a stream's output events and characters sent to the client

    @classmethod
    def start(
        cls,
        *,
        request_id: str,
        key_id: str,
        key_name: str,
        model: str,
        route: str,
        api: str,
        stream: bool,
        k: int,
        client_request_id: str | None = None,
        group: tuple[str, str] | None = None,
        batch_id: str | None = None,
    ) -> RequestRecorder:
        """A recorder whose arrival is now."""
        record = RequestTelemetry(
            request_id=request_id,
            key_id=key_id,
            key_name=key_name,
            model=model,
            route=route,
            api=api,
            stream=stream,
            arrived_at=datetime.now(UTC),
            client_request_id=client_request_id,
            batch_id=batch_id,
            group_id=group[0] if group else None,
            group_name=group[1] if group else None,
        )
        return cls(record, k)

    @property
    def saw_backend_metrics(self) -> bool:
        """True once the upstream sent a per-request ``metrics`` object."""
        return self._backend is not None

    @property
    def admitted_s(self) -> float | None:
        """Admission − arrival, s (None: not admitted). More than ``queue_wait_s``, the time in the
        queue: before it the request was counted, read, sized and its tokens reserved."""
        return self._t_admit - self._t_arrival if self._t_admit is not None else None

    def traced(self, trace_id: str | None) -> None:
        """The request's W3C trace id (:attr:`RequestTelemetry.trace_id`)."""
        self.record.trace_id = trace_id

    def classified(self, request_class: str | None, model: str, stream: bool) -> None:
        """What the request is: its class in the queue (``interactive`` | ``batch``; None: not known),
        its model label (a bounded one: the served model or ``unknown``), whether it streams."""
        record = self.record
        record.request_class, record.model, record.stream = request_class, model, stream

    def sized(self, tokens: int, source: str, kv_tokens: int, long: bool) -> None:
        """Admission's view of the request: its prompt's ``tokens`` and where the figure came from
        (``tokenize`` | ``estimate``), the KV tokens it reserves and whether its prompt is long."""
        record = self.record
        record.prompt_size_tokens, record.prompt_size_source = tokens, source
        record.kv_tokens, record.lane = kv_tokens, "long" if long else "short"

    def predicted(self, cached_tokens: int | None, source: str | None, session: str | None) -> None:
        """The prompt tokens admission expected the backend's prefix cache to hold, its source, and
        the agent session the request is a turn of."""
        record = self.record
        record.cached_tokens_predicted, record.cache_source, record.session = cached_tokens, source, session

    def admitted(self, queue_wait_s: float, waited_for: dict[str, float]) -> None:
        """The request was admitted after waiting ``queue_wait_s`` seconds, split by what it waited for
        (``{"kv": 12.0, "slot": 0.5}``)."""
        self._t_admit = self._clock()
        self.record.queue_wait_s = queue_wait_s
        self.record.waited_for = {reason: round(s, 6) for reason, s in waited_for.items()}

    def observe(self, seen: Observation) -> None:
        """One upstream stream chunk's facts (:class:`Observation`, reported by the dialect)."""
        now = None  # the clock is read only when a time is taken (once: TTFT and the last token agree)
        record = self.record
        self._indices.update(seen.indices)
        record.tool_calls_dropped += seen.tool_calls_dropped
        if record.finish_reason is None and seen.finish_reason is not None:
            record.finish_reason = seen.finish_reason[:32]
        if seen.output:
            self._output_chunks += 1
            now = self._t_output = self._clock()
            if self._t_first is None:
                self._t_first = now
            self._split_chars[0] += seen.reasoning_chars
            self._split_chars[1] += seen.content_chars
        usage = seen.usage
        if usage is not None:
            self._usage = usage
            tokens = usage.get("completion_tokens")  # an int, else no count (_int, inline)
            if not seen.final and type(tokens) is int and tokens > self._tokens:
                increase = tokens - self._tokens
                # the first token comes from prefill; every later chunk is one engine step
                step = increase - 1 if self._tokens == 0 else increase
                if step > 0:
                    self._step_tokens.append(step)
                # a chunk whose text the split held back whole releases nothing: its tokens go with
                # the text when it is released
                self._unattributed += increase
                self._tokens = tokens
                self._t_last = self._clock() if now is None else now
        released = seen.reasoning_chars + seen.content_chars
        if released and self._unattributed:
            self._reasoning_tokens += self._unattributed * seen.reasoning_chars / released
            self._unattributed = 0
        if seen.metrics is not None:
            self._backend = seen.metrics

    def delivered(self, events: int, chars: int) -> None:
        """What a stream's client was sent of its output: ``events`` that carried output and the
        ``chars`` of text in them (:class:`~gateway.proxy.delivery.Delivery`)."""
        self._delivered = (events, chars)

    def observe_answer(self, seen: Observation) -> None:
        """A whole non-stream response's facts."""
        if seen.usage is not None:
            self._usage = seen.usage
        if seen.metrics is not None:
            self._backend = seen.metrics
        reason = seen.finish_reason
        self.record.finish_reason = reason[:32] if reason is not None else None
        self.record.tool_calls_dropped += seen.tool_calls_dropped
        self._split_chars = [seen.reasoning_chars, seen.content_chars]

    def snapshot(
        self, counters: tuple[Mapping[str, float], Mapping[str, float], bool] | None = None
    ) -> RequestTelemetry:
        """The record as of now (``e2e_s`` up to now). ``counters``: (before, after, exact) of vLLM's
        spec-decode counters for the ``metrics_delta`` source."""
        record = self.record
        now = self._clock()
        record.e2e_s = now - self._t_arrival
        self._fill_usage(record)
        self._fill_timing(record)
        delta = from_counters(*counters) if counters is not None else None
        exact_delta = delta if delta is not None and delta.exact else None
        ranked: list[SpecStats | None] = [
            from_backend(self._backend),
            exact_delta,
            from_stream(self._step_tokens, self._k) if len(self._indices) <= 1 else None,
            delta if exact_delta is None else None,
        ]
        record.spec_candidates = [c for c in ranked if c is not None]
        record.spec = record.spec_candidates[0] if record.spec_candidates else None
        if record.spec is not None:
            record.spec, clamped = clamp(record.spec, self._k)
            record.clamped.extend(clamped)
        return record

    def _fill_usage(self, record: RequestTelemetry) -> None:
        usage = self._usage or {}
        record.clamped = []
        for name in ("prompt_tokens", "completion_tokens"):
            raw = usage.get(name)
            if isinstance(raw, int) and raw < 0:
                record.clamped.append(name)
            setattr(record, name, _int(raw))
        if self._output_chunks and record.finish_reason is None:  # a stream ended before its sequence
            record.completion_tokens = max(record.completion_tokens, self._output_floor())
            # its prompt was prefilled whether or not a usage object said so (Responses: only at the end)
            record.prompt_tokens = record.prompt_tokens or record.prompt_size_tokens
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        if cached > record.prompt_tokens:
            record.clamped.append("cached_tokens")
            cached = record.prompt_tokens
        record.cached_tokens = cached
        completion_details = usage.get("completion_tokens_details")
        reported = (
            _int(completion_details.get("reasoning_tokens")) if isinstance(completion_details, Mapping) else 0
        )
        reasoning = (
            reported
            or round(self._reasoning_tokens + self._estimate_reasoning(self._unattributed))
            or round(self._estimate_reasoning(record.completion_tokens))
        )
        if reasoning > record.completion_tokens:
            record.clamped.append("reasoning_tokens")
            reasoning = record.completion_tokens
        record.reasoning_tokens = reasoning

    def _output_floor(self) -> int:
        """The fewest tokens the output events the client was sent (:meth:`delivered`) can hold: one
        an event (each is at least one engine step), or one per :data:`CHARS_PER_TOKEN` characters,
        whichever is more. What a stream that ended early is charged when its usage came only in its
        closing event (Messages, Responses) or not at all: what reached the client, not what was read
        ahead of it into the stream's buffer."""
        events, chars = self._delivered
        return max(events, chars // CHARS_PER_TOKEN)

    def _estimate_reasoning(self, tokens: int) -> float:
        """The reasoning share of ``tokens`` by the characters released so far: a whole body's tokens,
        and a stream's whose text was never released (dropped, cut inside a would-be marker), counted
        as a non-stream answer of the same text counts them."""
        reasoning, content = self._split_chars
        return tokens * reasoning / (reasoning + content) if reasoning + content else 0.0

    def _fill_timing(self, record: RequestTelemetry) -> None:
        tokens = record.completion_tokens
        if self._t_first is not None:
            record.ttft_s = self._t_first - self._t_arrival
            if self._t_admit is not None:
                record.upstream_ttft_s = self._t_first - self._t_admit
            # without per-step usage (Anthropic, Responses streams) the last output chunk ends decode
            t_last = self._t_last if self._t_last is not None else self._t_output
            if t_last is not None and t_last > self._t_first and tokens > 1:
                record.decode_tokens_per_s = (tokens - 1) / (t_last - self._t_first)
            return
        backend = self._backend or {}
        ttft_ms, generation_ms, queue_ms = (
            backend.get(name) for name in ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms")
        )
        if isinstance(ttft_ms, int | float):
            upstream = ttft_ms / 1000 + (queue_ms / 1000 if isinstance(queue_ms, int | float) else 0.0)
            record.upstream_ttft_s = upstream
            record.ttft_s = upstream + (self.admitted_s or 0.0)
        if isinstance(generation_ms, int | float) and generation_ms > 0 and tokens > 1:
            record.decode_tokens_per_s = (tokens - 1) / (generation_ms / 1000)

    def finish(
        self,
        status: int,
        client_disconnected: bool,
        counters: tuple[Mapping[str, float], Mapping[str, float], bool] | None = None,
        end: str | None = None,
    ) -> RequestTelemetry:
        """Close the record with the HTTP ``status`` the client got and how the request ended."""
        record = self.snapshot(counters)
        record.status = status
        record.client_disconnected = client_disconnected
        record.end_reason = end
        return record
