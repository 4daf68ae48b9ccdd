"""One inference request's resources, owned once: the rate-limit ticket, the slot (queued or held), the
upstream response and the telemetry record.

:class:`Exchange` is an async context manager. Each resource is taken by one of its methods and
given back by its ``__aexit__``, in its own ``finally``, exactly once, whatever way the request
leaves (an error before the headers, the client gone while queued, waiting for headers or
mid-stream, a normal end, a server shutdown): the upstream response closed (vLLM aborts a sequence
still running), the slot released or the place in the queue given up, then the record published
and the ticket settled against real usage. Recording runs in the background (a counter scrape
and a rate-limit settlement must not delay the answer): :meth:`Pipeline.settled` waits for it.

Every request that reaches an exchange gets exactly one record (one usage row), from its arrival:
one whose body never arrived or was invalid too.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from gateway.admission import Lease, Need, Waiter
from gateway.auth.principal import Principal
from gateway.dialects.base import Context, Dialect, Prepared
from gateway.errors import GatewayError
from gateway.limits.rate import Ticket
from gateway.proxy.backends import Backend, BackendDown, affinity_key
from gateway.proxy.pipeline import Pipeline
from gateway.proxy.prompt_size import estimate, prompt_size
from gateway.proxy.relay import let_waiter_send
from gateway.proxy.upstream import Unreachable, UpstreamResponse
from gateway.storage.response_owners import Owner
from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.spec import COUNTERS
from gateway.traits import UpstreamTraits

log = logging.getLogger("gateway.errors")
#: Seconds between ``: queued N`` comments to a waiting stream.
QUEUE_COMMENT_INTERVAL_S = 5.0
#: Seconds between two looks at a held request's backend circuit (a local check, no I/O).
HOLD_POLL_S = 0.1


#: vLLM's routes whose request takes ``priority`` (its Anthropic route builds a chat request without
#: it: a Messages request keeps the gateway's class order only).
PRIORITY_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
#: vLLM's ``priority`` of a batch request (lower is handled earlier; 0, the default, is interactive's).
BATCH_PRIORITY = 1


def with_priority(body: bytes, priority: int) -> bytes:
    """``body`` (a JSON object, as a dialect serialised it) with ``"priority"`` first: vLLM orders
    its waiting sequences by it under ``--scheduling-policy priority`` (and refuses any priority but
    0 without it). Spliced, not re-serialised: a 1M-token prompt is not encoded twice. A client's own
    ``priority`` (a key with the ``backend_fields`` scope) comes later in the object and wins."""
    assert body.startswith(b"{"), "a dialect's upstream body is a JSON object"
    rest = body[1:].lstrip()
    return b'{"priority":%d' % priority + (b"}" if rest.startswith(b"}") else b"," + rest)


@dataclass(frozen=True, slots=True)
class Asked:
    """What the client asked for in headers, as sent (checked by :meth:`Exchange.prepare`):
    ``x-session-affinity``, ``x-max-wait-s`` (seconds), ``x-priority`` (``interactive`` | ``batch``)."""

    session: str | None = None
    max_wait_s: str | None = None
    priority: str | None = None


def request_class(header: str) -> str:
    """The ``x-priority`` header's class (400 ``invalid_value`` unless interactive or batch)."""
    value = header.strip().lower()
    if value not in ("interactive", "batch"):
        raise GatewayError(
            "invalid_value",
            f"x-priority must be interactive or batch, not {header[:32]!r}.",
            param="x-priority",
        )
    return value


def max_wait(header: str) -> float:
    """The ``x-max-wait-s`` header's seconds (400 ``invalid_value`` unless a number > 0)."""
    try:
        seconds = float(header)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise GatewayError(
            "invalid_value", f"x-max-wait-s must be a number of seconds > 0, not {header[:32]!r}.",
            param="x-max-wait-s",
        )  # fmt: skip
    return seconds


def too_long(expected_s: float, max_wait_s: float) -> None:
    """429 ``wait_too_long`` when the expected queue wait passes the request's limit, with a
    ``Retry-After`` of how much sooner the queue's pace lets it in."""
    if expected_s > max_wait_s:
        raise GatewayError(
            "wait_too_long",
            f"This request would wait about {expected_s:.0f} s for the model server; it accepts "
            f"{max_wait_s:g} s (x-max-wait-s, or the API key's max_wait_s).",
            headers={"retry-after": str(max(1, math.ceil(expected_s - max_wait_s)))},
        )


class Exchange:
    """One request in flight, from its arrival. ``status`` is the status the client got, ``complete``
    whether it got its whole answer, ``client_gone`` whether it left (or was cut) before that
    (:meth:`left`); all set by whoever answers, before the exchange ends."""

    def __init__(
        self,
        pipeline: Pipeline,
        dialect: Dialect,
        principal: Principal,
        request_id: str,
        telemetry: bool,
        forwarded: Mapping[str, str],
        asked: Asked = Asked(),
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
        )
        self._telemetry = telemetry
        self._headers = {**forwarded, "x-request-id": request_id}
        self.ticket: Ticket | None = None
        self.backend: Backend | None = None
        self.waiter: Waiter | None = None
        self.lease: Lease | None = None
        self.upstream: UpstreamResponse | None = None
        self.status = 500
        self.complete = False
        self.client_gone = False
        self._gone_as = "client_gone"
        self._before: dict[str, float] | None = None  # spec counters when the sequence started
        self._after: dict[str, float] | None = None  # ... and when it ended (upstream_done)
        self._after_taken = False
        self._size = 0
        self._prompt_tokens = 0
        self._need = Need()
        self._session = asked.session
        self._affinity: str | None = None
        self._left: list[Backend] = []  # backends that went down while it waited for them
        self._waited_s = 0.0  # waited before, on backends it left
        self._waited_for: dict[str, float] = {}  # that wait, by reason
        self._stored_at: Backend | None = None  # the backend storing its previous_response_id
        self._asked = asked
        self._max_wait_s = principal.max_wait_s
        self._batch = principal.request_class == "batch"

    async def __aenter__(self) -> Exchange:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.upstream is not None:
                self.upstream.close()
        finally:
            try:
                if self.lease is not None:
                    self.lease.release()
                elif self.waiter is not None and self.backend is not None:
                    self.backend.admission.abandon(self.waiter)
            finally:
                self.pipeline.in_background(self._record())

    def left(self, end: str = "client_gone") -> None:
        """The client has gone (or the server is shutting down; ``end`` ``client_slow``: it was cut for
        reading nothing): a 499, unless the answer was complete."""
        if not self.complete:
            self.status, self.client_gone, self._gone_as = 499, True, end

    async def prepare(self, body: dict[str, Any], size: int) -> Prepared:
        """Validate the parsed body (400, 404 / 403 for the model — an alias means the served one —,
        400 ``context_length_exceeded``, 404 for a ``previous_response_id`` not the key's) and
        normalise it for the backend, in the exchange's dialect. ``size``: the body's bytes, the
        prompt size's estimate's base."""
        pipeline, record = self.pipeline, self.recorder.record
        if self._asked.max_wait_s is not None:
            self._max_wait_s = max_wait(self._asked.max_wait_s)
        if self._asked.priority is not None:  # a batch key's requests stay batch
            self._batch = request_class(self._asked.priority) == "batch" or self._batch
        record.request_class = "batch" if self._batch else "interactive"
        self._size = size
        self._affinity = affinity_key(body, self._session)
        self._prompt_tokens = estimate(size).tokens
        pipeline.resolve_model(self.principal, body)
        parsed = self.dialect.parse(body)
        served = parsed.model == pipeline.settings.served_model
        record.model = parsed.model if served else "unknown"  # a bounded metrics label
        record.stream = parsed.stream
        pipeline.check_model(self.principal, parsed.model)
        recorder = self.recorder
        context = Context(
            self.principal,
            pipeline.settings,
            self._traits,
            recorder.observe,
            recorder.observe_answer,
            (lambda: recorder.snapshot().client_view()) if self._telemetry else None,
            self._claim,
        )
        prepared = self.dialect.prepare(parsed, context)
        if (
            self._batch
            and pipeline.settings.upstream_priority
            and self.dialect.upstream_path in PRIORITY_ROUTES
        ):
            prepared.body = with_priority(prepared.body, BATCH_PRIORITY)
        pipeline.check_budget(prepared.output_budget, prepared.output_param)
        if prepared.previous_response_id is not None:
            param = "previous_response_id"
            self._stored_at = await pipeline.stored_at(self.principal, prepared.previous_response_id, param)
        return prepared

    async def measure(self, prepared: Prepared) -> None:
        """Size the prompt (the backend's count for a large body, else the estimate:
        :func:`~gateway.proxy.prompt_size.prompt_size`) and so what the request needs of the backend
        (400 ``context_length_exceeded`` when no idle backend could hold it). A request the backend
        it would go to has no queue room for is refused first (429 ``queue_full``)."""
        pipeline, record = self.pipeline, self.recorder.record
        backend = self._stored_at or pipeline.backends.route(self._affinity, self._left)
        refusal = backend.admission.queue_refusal(self.principal.name)
        if refusal is not None:  # before the count: a request bound to be refused costs the backend nothing
            raise refusal
        if self._max_wait_s is not None:
            too_long(backend.admission.expected_wait_s(self.principal.name), self._max_wait_s)
        size = await prompt_size(
            backend.counts,
            self.principal.name,
            backend.traits,
            pipeline.settings,
            prepared.count,
            self._size,
            self._headers,
        )
        prepared.count = None  # it holds the prompt's tree; the request waits with its bytes only
        self._prompt_tokens = size.tokens
        self._need = replace(pipeline.need(prepared, size.tokens), batch=self._batch)
        record.prompt_size_tokens, record.prompt_size_source = size.tokens, size.source
        record.kv_tokens, record.lane = self._need.kv_tokens, "long" if self._need.long else "short"

    def _traits(self) -> UpstreamTraits:
        """What the gateway learnt of the backend answering (the translator asks once it answers)."""
        assert self.backend is not None
        return self.backend.traits

    def _claim(self, response_id: str) -> None:
        if self.pipeline.owners is not None:
            backend = self.backend.name if self.backend is not None else None
            self.pipeline.owners.claim(response_id, Owner(self.principal.key_id, backend))

    async def limit_headers(self) -> dict[str, str]:
        """The key's ``x-ratelimit-*`` headers for an answer (a refusal too, also one given before the
        tokens were reserved); none before the request was counted."""
        if self.ticket is None:
            return {}
        try:
            await self.pipeline.limits.describe(self.ticket)
        except Exception:  # the headers inform; a limits store failing now must not make a 500 of it
            request_id = self._headers["x-request-id"]
            log.warning("request %s: the tokens-per-minute headers could not be read", request_id)
        return self.ticket.headers

    async def count(self) -> None:
        """Count the request against its key's requests per minute (429 when spent), before its body
        is read: the rate limit's ticket."""
        self.ticket = await self.pipeline.limits.count(self.principal)

    async def reserve(self, prepared: Prepared) -> dict[str, str]:
        """Reserve the request's prompt size and whole output budget of its key's tokens per minute
        (``GATEWAY_TPM_OUTPUT_RESERVE_TOKENS`` a sequence when it sets none; 429 when they don't fit);
        the ticket's headers."""
        assert self.ticket is not None
        if self.principal.tpm:
            output = prepared.output_budget or self.pipeline.settings.tpm_output_reserve_tokens
            await self.pipeline.limits.reserve(self.ticket, self._prompt_tokens + prepared.sequences * output)
        return self.ticket.headers

    async def enqueue(self) -> bool:
        """Choose a backend (:meth:`Backends.route`) and be admitted there now if the request fits and
        fairness allows, else take a place in the key's queue (429 ``queue_full``); True if admitted."""
        principal = self.principal
        backend = self._stored_at or self.pipeline.backends.route(self._affinity, self._left)
        self.backend = backend
        entry = await backend.admit(principal.name, principal.priority, principal.max_concurrency, self._need)
        if isinstance(entry, Lease):
            self._admitted(entry)
            return True
        self.waiter = entry
        return False

    async def wait(self) -> None:
        """Wait for admission (429 ``queue_timeout``; cancellation gives the place up); queue again on
        another backend when the one it waits for goes down."""
        while True:
            assert self.waiter is not None and self.backend is not None
            try:
                lease = await self.backend.admission.wait(self.waiter)
            except BackendDown:
                self._carry(time.monotonic() - self.waiter.enqueued_at, self.waiter.waited_for)
                self._left.append(self.backend)
                self.waiter = None
                if await self.enqueue():
                    return
                continue
            self._admitted(lease)
            return

    def position(self) -> tuple[int, str]:
        """Grants before this request's (1 = next; 0 once admitted) and what it waits for (``slot``,
        ``kv``, ``lane``, ...: :class:`~gateway.admission.Reason`)."""
        waiter = self.waiter
        if waiter is None or self.lease is not None:
            return 0, ""
        assert self.backend is not None
        return self.backend.admission.position(waiter), waiter.reason.value if waiter.reason else "slot"

    def _admitted(self, lease: Lease) -> None:
        self.lease = lease
        self._carry(lease.queue_wait_s, lease.waited_for)
        self.recorder.admitted(self._waited_s, dict(self._waited_for))

    def _carry(self, waited_s: float, waited_for: Mapping[str, float]) -> None:
        """Add a wait (s, and by reason) to the request's: its waits on every backend it queued for."""
        self._waited_s += waited_s
        for reason, seconds in waited_for.items():
            self._waited_for[reason] = self._waited_for.get(reason, 0.0) + seconds

    async def open(self, prepared: Prepared) -> UpstreamResponse:
        """Send the request upstream once the slot is held; return when its headers arrive (503 / 504 /
        the upstream's own error status). A backend whose circuit is open is not tried (503 at once,
        :mod:`~gateway.proxy.breaker`); one that refuses the connection while another is up is left
        for that one (queue again there)."""
        while True:
            backend = self.backend
            assert backend is not None
            try:
                self.upstream = await self._send(backend, prepared)
            except Unreachable:
                if not self._fail_over(backend):
                    raise
                if not await self.enqueue():
                    await self.wait()
                continue
            return self.upstream

    async def open_when_back(self, prepared: Prepared) -> UpstreamResponse:
        """:meth:`open`, held while the backend can't be reached (a restart): for up to
        ``GATEWAY_UPSTREAM_RESTART_HOLD_S`` the request waits, its slot held, for the circuit to let a
        request through again, and tries; the last 503 when the hold is over."""
        deadline = time.monotonic() + self.pipeline.settings.upstream_restart_hold_s
        while True:
            try:
                return await self.open(prepared)
            except Unreachable:
                if time.monotonic() >= deadline:
                    raise
            assert self.backend is not None
            now = time.monotonic()
            await asyncio.sleep(min(deadline - now, self.backend.breaker.wait_s(now, HOLD_POLL_S)))

    async def _send(self, backend: Backend, prepared: Prepared) -> UpstreamResponse:
        """One try on ``backend``, its circuit told how it went."""
        breaker = backend.breaker
        if not breaker.allows(time.monotonic()):
            raise Unreachable(f"{backend.name} failed repeatedly; its circuit is open")
        try:  # from here a trial this request took is given back, however it ends
            if self.pipeline.wants_counters(backend):  # one loopback scrape (ms) before the request decodes
                self._before = await backend.monitor.scrape(COUNTERS, timeout_s=1.0)
            response = await backend.upstream.open(
                "POST", self.dialect.upstream_path, prepared.body, self._headers
            )
        except Unreachable:
            breaker.failure(time.monotonic(), refused=True)
            raise
        except GatewayError as error:
            if error.status >= 500:
                breaker.failure(time.monotonic())
            else:
                breaker.success()
            raise
        except BaseException:
            breaker.given_up()
            raise
        breaker.success()
        return response

    def _fail_over(self, backend: Backend) -> bool:
        """``backend`` refused the connection: if another one is up, take it out (its monitor will say
        when it is back), give its slot back and return True (queue again); else False."""
        backends = self.pipeline.backends
        if self._stored_at is not None:  # a continuation: only its backend has the stored response
            return False
        if not any(other.up for other in backends.all if other is not backend):
            return False
        assert self.lease is not None  # its wait is carried already (_admitted)
        self.lease.release()
        self.lease, self.waiter, self._before = None, None, None
        self._left.append(backend)
        backends.mark(backend, False)
        return True

    def release_early(self) -> bool:
        """Hand the slot on as soon as the upstream has finished the sequence (its ``[DONE]``, or the
        whole non-stream body read): the backend already runs the next one while this response is
        rewritten and sent. ``__aexit__`` releases it anyway, once. Not while a spec-counter delta is
        being taken (``GATEWAY_SPEC_COUNTERS``): the next sequence's steps would count as this one's
        (:meth:`upstream_done` takes it and releases once the upstream's body has ended).

        Returns True when the release granted the slot to a waiting request: the caller then lets it
        send (:func:`~gateway.proxy.relay.let_waiter_send`) before rewriting and sending its own answer.
        """
        if self.lease is not None and self._before is None and not self.lease.released:
            return self.lease.release()
        return False

    async def upstream_done(self) -> None:
        """The upstream has sent everything: hand the slot on now, whatever the client's pace. When a
        spec-counter delta is being taken, its second scrape comes first (the next sequence's steps
        must not count as this one's); a waiting request granted the slot is let send first
        (:func:`~gateway.proxy.relay.let_waiter_send`)."""
        if self.lease is None or self.lease.released:
            return
        if self._before is not None and not self._after_taken:
            assert self.backend is not None
            self._after = await self.backend.monitor.scrape(COUNTERS, timeout_s=1.0)
            self._after_taken = True
        if self.lease.release():
            await let_waiter_send()

    async def _counters(self) -> tuple[dict[str, float], dict[str, float], bool] | None:
        if self._before is None or self.lease is None or self.backend is None:
            return None
        monitor = self.backend.monitor
        after = self._after if self._after_taken else await monitor.scrape(COUNTERS, timeout_s=1.0)
        if after is None:
            return None
        before = {n: self._before[n] for n in COUNTERS if n in self._before}
        return before, {n: after[n] for n in COUNTERS if n in after}, not self.lease.overlapped

    async def _record(self) -> None:
        pipeline = self.pipeline
        end = self._gone_as if self.client_gone else "complete" if self.complete else "error"
        record = self.recorder.finish(self.status, self.client_gone, await self._counters(), end)
        if self.recorder.saw_backend_metrics and self.backend is not None:
            self.backend.traits.per_request_metrics = True
        pipeline.sink.publish(record)
        if self.ticket is not None:
            await pipeline.limits.settle(self.ticket, self._used(record))

    def _used(self, record: RequestTelemetry) -> int:
        """The tokens a request is charged: its usage; a client that left may have run the backend
        for more than it saw — a whole body it never received, a prefill before its first usage —, so
        its reservation stands (non-stream), or at least its prompt estimate (stream)."""
        used = record.prompt_tokens + record.completion_tokens
        if not self.client_gone or self.ticket is None:
            return used
        if not record.stream:
            return max(used, self.ticket.reserved)
        return max(used, record.completion_tokens + self._prompt_tokens)
