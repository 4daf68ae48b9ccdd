"""One inference request's resources, owned once: its account with its key's limits
(:class:`~gateway.proxy.billing.Billing`), its backend, slot and upstream response
(:class:`~gateway.proxy.placement.Placement`) and its telemetry record.

:class:`Exchange` is an async context manager. Each resource is given back by its ``__aexit__``,
exactly once, whatever way the request leaves (an error before the headers, the client gone while
queued, waiting for headers or mid-stream, a normal end, a server shutdown): the upstream response
closed (vLLM aborts a sequence still running), the slot released or the place in the queue given
up, then the record published and the tokens settled against real usage. Recording runs in the
background (a counter scrape and a rate-limit settlement must not delay the answer):
:meth:`Pipeline.settled` waits for it.

Every request that reaches an exchange gets exactly one record (one usage row), from its arrival:
one whose body never arrived or was invalid too. How it ended is told to the exchange, which keeps
it: :meth:`Exchange.answer`, :meth:`Exchange.streaming`, :meth:`Exchange.stream_ended`,
:meth:`Exchange.failed`, :meth:`Exchange.left`. What the dialect's translator saw of the answer comes
up as values (:class:`~gateway.dialects.base.Step`, :class:`~gateway.dialects.base.Answer`) and is
recorded by one method, :meth:`Exchange.saw`: the facts into the record, what the backend showed into
the backend (:meth:`~gateway.backends.pool.Backend.learn`), a stored response's id to its owner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import Any

from dspark_common import json_codec
from dspark_common.turns import Turns
from gateway.admission import Need
from gateway.admission.service import UNKNOWN_S
from gateway.auth import cache_salt
from gateway.auth.principal import Principal
from gateway.backends.kv_index import PromptBlocks
from gateway.backends.pool import Backend, affinity_key
from gateway.dialects.base import Answer, Dialect, Prepared, Step, Translator
from gateway.dialects.prompt_count import EitherCount, TokenCount
from gateway.errors import GatewayError
from gateway.proxy import preparation
from gateway.proxy.asks import Asked, too_long
from gateway.proxy.billing import Billing
from gateway.proxy.delivery import Delivery
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.placement import Placement
from gateway.proxy.prompt_size import estimate, prompt_size
from gateway.proxy.sessions import session_of
from gateway.storage.response_owners import Owner
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.tracing import client_trace_id

#: A body of this many bytes (a ~250k-token prompt) takes ms to parse and as long to prepare: the loop
#: serves its other work between those steps.
LARGE_BODY_BYTES = 1 << 20


class Exchange:
    """One request in flight, from its arrival: :attr:`billing`, :attr:`placement`, :attr:`recorder`.
    The status the client got, whether it got its whole answer and whether it left (or was cut)
    before that are told to it as they happen."""

    __slots__ = (
        "pipeline",
        "dialect",
        "principal",
        "recorder",
        "billing",
        "_request_headers",
        "_headers",
        "_span",
        "placement",
        "_telemetry",
        "_asked",
        "_status",
        "_complete",
        "_client_gone",
        "_end",
        "_size",
        "_prompt_tokens",
        "_prompt",
        "_max_wait_s",
        "_batch",
        "_translator",
        "_affinity",
        "_session",
        "_stored_at",
        "_count",
        "_need",
        "_salt",
    )

    def __init__(
        self,
        pipeline: Pipeline,
        dialect: Dialect,
        principal: Principal,
        request_id: str,
        client_request_id: str | None,
        telemetry: bool,
        headers: Mapping[str, str],
        asked: Asked,
        batch_id: str | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.dialect = dialect
        self.principal = principal
        self.recorder = RequestRecorder.start(
            request_id=request_id,
            key_id=principal.key_id,
            key_name=principal.name,
            model="unknown",
            route=dialect.route,
            api=dialect.api,
            stream=False,
            k=pipeline.settings.spec_k,
            client_request_id=client_request_id,
            batch_id=batch_id,
            group=(principal.group.id, principal.group.name) if principal.group is not None else None,
        )
        self.billing = Billing(pipeline.limits, pipeline.quotas, principal, pipeline.settings, request_id)
        self._request_headers = headers
        self._headers = {"x-request-id": request_id}
        tracing = pipeline.tracing
        self._span = tracing.start(dialect.api, headers, self._headers) if tracing is not None else None
        self.recorder.traced(self._span.trace_id if self._span is not None else client_trace_id(headers))
        self.placement = Placement(pipeline, principal, dialect.upstream_path, self._headers, self.recorder)
        self._telemetry = telemetry
        self._asked = asked
        self._status = 500
        self._complete = False
        self._client_gone = False
        self._end = "error"
        self._size = 0
        self._prompt_tokens = 0
        self._prompt: PromptBlocks | None = None
        self._max_wait_s: float | None = None
        self._batch = False
        self._translator: Translator | None = None
        self._affinity: str | None = None
        self._session: str | None = None
        self._stored_at: Backend | None = None
        self._count: TokenCount | EitherCount | None = None
        self._need = Need()
        self._salt = cache_salt.salt(pipeline.cache_secret, cache_salt.scope(principal))

    async def __aenter__(self) -> Exchange:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.placement.close()
        finally:
            self.pipeline.in_background(self._record())

    def saw(self, found: Sequence[Step] | Answer) -> None:
        """Record what the translator saw of the answer, in order: the facts of stream steps (or of a
        whole body), what the backend showed of itself, the id of a response it stores for the
        caller."""
        if isinstance(found, Answer):
            self.recorder.observe_answer(found.seen)
            self._learnt(found)
            return
        observe = self.recorder.observe
        for step in found:
            if step.seen is not None:
                observe(step.seen)
            if step.learnt is not None or step.claimed is not None:
                self._learnt(step)

    def _learnt(self, found: Step | Answer) -> None:
        backend = self.placement.backend
        if found.learnt is not None and backend is not None:
            backend.learn(reasoning=found.learnt)
        if found.claimed is not None and self.pipeline.owners is not None:
            name = backend.name if backend is not None else None
            self.pipeline.owners.claim(found.claimed, Owner(self.principal.key_id, name))

    def client_telemetry(self) -> dict[str, Any] | None:
        """The ``telemetry`` object as of now when the client asked for one (else None)."""
        return self.recorder.snapshot().client_view() if self._telemetry else None

    def answer(self, answer: Answer, status: int) -> bytes:
        """A whole non-stream answer of ``status``, recorded (:meth:`saw`), as the client is sent it:
        with the ``telemetry`` object when it asked for one and the body is a JSON object. What the
        client is sent next is all of it: the request is complete."""
        self.saw(answer)
        self._status, self._complete, self._end = status, True, "complete"
        body = answer.body
        if isinstance(body, bytes):
            return body
        if self._telemetry:
            body["telemetry"] = self.client_telemetry()
        return json_codec.dumps(body)

    def closing(self, error: GatewayError) -> list[bytes]:
        """The events that end a started stream with ``error`` in the dialect (what the translator
        still held first — with the client's telemetry object when it asked for one —, recorded)."""
        assert self._translator is not None  # a stream starts only once its request is prepared
        step = self._translator.error_event(error, self.client_telemetry())
        self.saw([step])
        return step.events

    def streaming(self) -> None:
        """A stream's relay has begun: its status is 200 (the head went, or goes, out)."""
        self._status = 200

    def stream_ended(self, delivered: bool, error: GatewayError | None, sent: Delivery) -> None:
        """The stream ended: ``delivered`` its last event (a client that hangs up right after it got
        it all), or ``error`` sent in its place; ``sent``: the output the client was sent."""
        self.recorder.delivered(sent.events, sent.chars)
        if error is not None:
            self._status = error.status
        if delivered:
            self._complete, self._end = True, "complete"

    def failed(self, status: int) -> None:
        """The request was answered with an error of ``status`` (or a stream ended by one)."""
        self._status = status

    def left(self, end: str = "client_gone") -> None:
        """The client has gone (or the server is shutting down; ``end`` ``client_slow``: it was cut for
        reading nothing): a 499, unless the answer was complete."""
        if not self._complete:
            self._status, self._client_gone, self._end = 499, True, end

    async def prepare(self, body: dict[str, Any], size: int) -> Prepared:
        """The parsed body prepared for the backend in the exchange's dialect
        (:func:`~gateway.proxy.preparation.prepare`: 400 for it or its headers' asks, 404 / 403 for
        the model — an alias means the served one —, 400 ``context_length_exceeded``), then 404 for a
        stored response or item it refers to that is not the key's. ``size``: the body's bytes, the
        prompt size's estimate's base."""
        pipeline = self.pipeline
        self._size = size
        self._prompt_tokens = estimate(size).tokens
        large = size >= LARGE_BODY_BYTES
        if large:
            await asyncio.sleep(0)  # its parse held the loop for ms: other work goes before its preparation
        ready = preparation.prepare(
            self.dialect,
            self.principal,
            pipeline.settings,
            pipeline.aliases,
            body,
            self._request_headers,
            self._asked,
            self._telemetry,
        )
        self.recorder.classified(ready.request_class, ready.model, ready.stream)
        if ready.error is not None:
            raise ready.error
        assert ready.prepared is not None
        self._max_wait_s, self._batch = ready.max_wait_s, ready.request_class == "batch"
        self._headers.update(ready.forwarded)
        if large:
            await asyncio.sleep(0)  # and before its conversation's start is fingerprinted (ms more)
        self._affinity = affinity_key(body, self._asked.session)
        self._session = session_of(self.principal.key_id, self._request_headers, body)
        # the count holds the prompt's tree: the exchange keeps it until the prompt is sized, the
        # request waits with its bytes only
        self._count, prepared = ready.prepared.count, replace(ready.prepared, count=None)
        prepared.salted(self._salt)
        self._translator = prepared.translator
        for param, stored_id in reversed(prepared.stored):  # the first decides the backend
            self._stored_at = await pipeline.stored_at(self.principal, stored_id, param)
        return prepared

    async def measure(self, prepared: Prepared) -> None:
        """Size the prompt (the backend's count for a large body, else the estimate:
        :func:`~gateway.proxy.prompt_size.prompt_size`) and so what the request needs of the backend
        (400 ``context_length_exceeded`` when no idle backend could hold it). A request the backend
        it would go to has no queue room for is refused first (429 ``queue_full``)."""
        pipeline, placement = self.pipeline, self.placement
        backend = placement.decide(self._affinity, self._stored_at)
        refusal = backend.admission.queue_refusal(self.principal.name)
        if refusal is not None:  # before the count: a request bound to be refused costs the backend nothing
            raise refusal
        if self._max_wait_s is not None:
            too_long(backend.admission.expected_wait_s(self.principal.name), self._max_wait_s)
        size = await prompt_size(
            backend.counts,
            self.principal.name,
            backend.traits.counts_prompts,
            pipeline.settings,
            self._count,
            self._size,
            self._headers,
        )
        self._count = None
        if size.counts_prompts is not None:
            backend.learn(counts_prompts=size.counts_prompts)
        self._prompt_tokens = size.tokens
        if size.token_ids is not None and backend.kv.enabled:
            self._prompt = prompt = PromptBlocks(size.token_ids, self._salt)
            turns = Turns()  # a 1M-token prompt's keys take ms: computed in pieces, then matched at once
            views = [b.kv for b in pipeline.backends.all]
            for block_size in sorted(set().union(*(view.block_sizes() for view in views))):
                await turns.run(prompt.keying(block_size))
            if all(view.groups_known() for view in views):
                prompt.forget_ids()  # it may wait in the queue: its keys, not 4 bytes a token
        # unpredicted, the record says why (the prompt was estimated, or its count held no ids)
        cached, source, predicted = 0, size.unmatched if backend.kv.enabled else None, None
        if self._prompt is not None:
            backend = placement.prefer_cached(self._prompt, self._max_wait_s)
            # the requests admitted before it may evict some of its prefix before it runs
            reserved = backend.admission.kv_reserved_tokens
            match, source = backend.kv.match(self._prompt, time.monotonic(), reserved)
            cached = predicted = match.cached_tokens
        service = UNKNOWN_S  # every request alike: each key in turn, in arrival order
        if pipeline.settings.queue_order == "work":
            output_cap = pipeline.output_cap(prepared, size.tokens)
            service = backend.service.expected_s(self.principal.name, size.tokens - cached, output_cap)
        need = pipeline.need(prepared, size.tokens, cached, service)
        self._need = need = replace(need, batch=self._batch, session=self._session)
        self.recorder.sized(size.tokens, size.source, need.kv_tokens, need.long)
        self.recorder.predicted(predicted, source, self._session)

    async def enqueue(self) -> bool:
        """Admitted on the backend decided, or a place in its queue (429 ``queue_full``): True if
        admitted (:meth:`~gateway.proxy.placement.Placement.enqueue`)."""
        return await self.placement.enqueue(self._need, self._prompt)

    async def reserve(self, prepared: Prepared) -> dict[str, str]:
        """The request's cost reserved of its quotas and its key's and group's tokens per minute (429
        when they don't fit, :meth:`~gateway.proxy.billing.Billing.reserve`), its output capped at
        ``GATEWAY_OUTPUT_RESERVE_TOKENS`` when it set none and at what its quotas have left
        (``prepared`` changed); the key's ``x-ratelimit-*`` headers."""
        headers, cap = await self.billing.reserve(
            self._prompt_tokens, prepared.sequences, prepared.output_budget
        )
        if cap is not None:
            prepared.capped(cap)
        return headers

    async def _record(self) -> None:
        pipeline, placement = self.pipeline, self.placement
        counters = await placement.counters()
        record = self.recorder.finish(self._status, self._client_gone, counters, self._end)
        if self.recorder.saw_backend_metrics and placement.backend is not None:
            placement.backend.learn(per_request_metrics=True)
        if placement.backend is not None and record.status == 200 and record.finish_reason is not None:
            placement.backend.service.observe(
                self.principal.name,
                record.prompt_tokens - record.cached_tokens,
                record.upstream_ttft_s,
                record.completion_tokens,
                record.decode_tokens_per_s,
            )
        # settled before its ledger row is written: a quota counter seeded from the ledger meanwhile (its
        # store emptied) must not hold this request twice
        await self.billing.settle(record, self._prompt_tokens)
        pipeline.sink.publish(record)
        if self._span is not None and pipeline.tracing is not None:
            pipeline.tracing.finish(self._span, record, self.recorder.admitted_s)
