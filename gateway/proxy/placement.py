"""Where one request runs, and its hold there: the backend chosen for it, its place in that backend's
queue or its slot, its upstream response; fail-over to another backend, the hold through a backend's
restart, the slot handed on as soon as the backend has finished the sequence, and the spec-decode
counters read around it.

:class:`Placement` is owned by an :class:`~gateway.proxy.exchange.Exchange`, whose exit calls
:meth:`Placement.close` once, however the request left.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from gateway.admission import Lease, Need, Waiter
from gateway.auth.principal import Principal
from gateway.backends.breaker import DOWN_STATUSES
from gateway.backends.kv_index import PromptBlocks
from gateway.backends.pool import Backend, BackendDown
from gateway.backends.upstream import Started, Unreachable, UpstreamResponse
from gateway.dialects.base import Prepared
from gateway.errors import GatewayError
from gateway.proxy.pipeline import Pipeline
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.spec import COUNTERS

T = TypeVar("T")

#: Seconds between two looks at a held request's backend circuit (a local check, no I/O).
HOLD_POLL_S = 0.1
#: Event-loop steps a releasing request yields so the next one reaches the backend first
#: (:func:`let_waiter_send`). In the first, the granted waiter runs up to aiohttp's body write;
#: aiohttp (``ClientRequest.send``) writes the body in a task of its own, started eagerly on Python
#: 3.12+ (in that same step) but only scheduled on 3.11, where it needs a second step
#: (``python -m bench.queue_scale`` measures the hand-off).
HANDOFF_STEPS = 1 if sys.version_info >= (3, 12) else 2


async def let_waiter_send() -> None:
    """Yield :data:`HANDOFF_STEPS` loop steps: a request just granted a slot, sending over a pooled
    upstream connection, has written its request when this returns."""
    for _ in range(HANDOFF_STEPS):
        await asyncio.sleep(0)


class Placement:
    """One request's backend, slot and upstream response. The backend is decided (:meth:`decide`)
    before the request is sized, and counts its prompt; once counted, the request may move to the
    backend holding the longest prefix of it (:meth:`prefer_cached`), which then serves its
    admission and upstream; only a fail-over decides again, away from the backends that failed it.
    ``recorder`` is told when the request is admitted (and how long it waited, on every backend it
    queued for)."""

    __slots__ = (
        "_pipeline",
        "_principal",
        "_path",
        "_headers",
        "_recorder",
        "backend",
        "_counted",
        "waiter",
        "lease",
        "upstream",
        "_stored_at",
        "_affinity",
        "_need",
        "_prompt",
        "_left",
        "_waited_s",
        "_waited_for",
        "_before",
        "_after",
        "_after_taken",
    )

    def __init__(
        self,
        pipeline: Pipeline,
        principal: Principal,
        upstream_path: str,
        headers: dict[str, str],
        recorder: RequestRecorder,
    ) -> None:
        self._pipeline = pipeline
        self._principal = principal
        self._path = upstream_path
        self._headers = headers
        self._recorder = recorder
        self.backend: Backend | None = None
        self._counted: Backend | None = None  # the backend whose routed count holds this request
        self.waiter: Waiter | None = None
        self.lease: Lease | None = None
        self.upstream: UpstreamResponse | None = None
        self._stored_at: Backend | None = None  # the backend storing what it continues: its only one
        self._affinity: str | None = None
        self._need = Need()
        self._prompt: PromptBlocks | None = None
        self._left: list[Backend] = []  # backends that went down while it waited for them
        self._waited_s = 0.0  # waited before, on backends it left
        self._waited_for: dict[str, float] = {}  # that wait, by reason
        self._before: dict[str, float] | None = None  # spec counters when the sequence started
        self._after: dict[str, float] | None = None  # ... and when it ended (upstream_done)
        self._after_taken = False

    def decide(self, affinity: str | None = None, stored_at: Backend | None = None) -> Backend:
        """Decide where the request runs (:attr:`backend`): ``stored_at``, the backend storing what it
        continues (the only one it may run on), else :meth:`~gateway.backends.pool.Backends.route` by
        its ``affinity`` key. It counts there (:meth:`~gateway.backends.pool.Backend.placed`) until its
        admission answers."""
        self._affinity, self._stored_at = affinity, stored_at
        return self._decide()

    def _decide(self) -> Backend:
        """:meth:`decide` again (a fail-over), among the backends that have not failed the request."""
        routed = self._stored_at or self._pipeline.backends.route(self._affinity, self._left).backend
        return self._place(routed)

    def _place(self, backend: Backend) -> Backend:
        """Run on ``backend``, counted there (and no longer where it was) until admission answers."""
        self.backend = backend
        self._uncount()
        self._counted = backend
        backend.placed()
        return backend

    def prefer_cached(self, prompt: PromptBlocks, max_wait_s: float | None = None) -> Backend:
        """Once the prompt is counted: move to the backend holding the longest prefix of ``prompt``
        (:meth:`~gateway.backends.pool.Backends.longest_prefix`; one whose expected wait is within
        ``max_wait_s``), unless the request continues a stored response (it runs where that is
        stored). The backend it runs on."""
        backend = self.backend
        assert backend is not None
        if self._stored_at is not None:
            return backend
        backends, now = self._pipeline.backends, time.monotonic()
        best = backends.longest_prefix(prompt, backend, self._left, now, self._principal.name, max_wait_s)
        return backend if best is backend else self._place(best)

    def _uncount(self) -> None:
        if self._counted is not None:
            self._counted.unplaced()
            self._counted = None

    def close(self) -> None:
        """Give everything back, once: the upstream response closed (vLLM aborts a sequence still
        running), then the slot released or the place in the queue given up."""
        try:
            if self.upstream is not None:
                self.upstream.close()
        finally:
            self._uncount()
            if self.lease is not None:
                self._release(self.lease)
            elif self.waiter is not None and self.backend is not None:
                self.backend.admission.abandon(self.waiter)

    async def answer(self, prepared: Prepared) -> tuple[UpstreamResponse, bytes]:
        """A non-streamed request's response and whole body (:meth:`open_when_back`, then the read);
        503 ``preempted`` when admission takes this batch request's slot back for an interactive one
        first (:attr:`~gateway.admission.Lease.preempted`): what was sent is closed, so the backend
        aborts the sequence, and the request is to be sent again."""
        upstream = await self._unless_preempted(self.open_when_back(prepared))
        return upstream, await self._unless_preempted(upstream.read())

    async def _unless_preempted(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, or 503 ``preempted`` (``work`` cancelled) once this batch request's lease
        is marked so."""
        lease = self.lease
        if lease is None or not lease.need.batch:
            return await work
        task = asyncio.ensure_future(work)
        preempted = asyncio.ensure_future(lease.preempted.wait())
        try:
            await asyncio.wait({task, preempted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in (task, preempted):
                waiting.cancel()
            await asyncio.gather(task, preempted, return_exceptions=True)
        if (task.cancelled() or task.exception() is not None) and lease.preempted.is_set():
            self.abort()
            message = "An interactive request took this batch request's slot: it is sent again."
            raise GatewayError("preempted", message, headers={"Retry-After": "0"})
        return task.result()

    async def first_output(self) -> bool:
        """For a streamed interactive request sent upstream: wait for its first output (vLLM streams
        nothing before the prompt's prefill has ended), its lease
        :attr:`~gateway.admission.Lease.prefilling` meanwhile, so admission may take the slot back
        for a much shorter request due first (``GATEWAY_PREFILL_PREEMPTION``). True once output began
        (the response then hands that first read out first:
        :class:`~gateway.backends.upstream.Started`), or at once for a request admission never
        preempts so; False if the slot was taken back first: what was sent is closed (vLLM aborts
        the sequence and keeps the blocks it computed cached) and the slot given back, and
        :meth:`rejoin` queues the request again."""
        lease, upstream = self.lease, self.upstream
        assert lease is not None and upstream is not None
        if lease.need.batch or not self._pipeline.settings.prefill_preemption:
            return True
        rest = aiter(upstream.chunks())
        first: asyncio.Future[Any] = asyncio.ensure_future(anext(rest))
        preempted: asyncio.Future[Any] = asyncio.ensure_future(lease.preempted.wait())
        lease.prefilling = True
        try:
            await asyncio.wait({first, preempted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            preempted.cancel()
            if not first.done():  # preempted, or this request cancelled (its client gone)
                first.cancel()
                await asyncio.wait({first})
        if not first.cancelled():
            lease.prefilling = False  # its output began: it runs on, preempted or not
            self.upstream = Started(upstream, first, rest)
            return True
        self.abort()  # released still prefilling: admission takes it as cut in its prefill
        self._release(lease)
        self._need = replace(self._need, rejoin_tag=lease.tag)
        self.lease, self._before = None, None
        return False

    async def rejoin(self) -> bool:
        """Queue again after :meth:`first_output` gave the slot back, with the place the request had
        (:attr:`~gateway.admission.Need.rejoin_tag`); True if admitted at once, else :meth:`wait`."""
        return await self._enqueue()

    def abort(self) -> None:
        """Close the upstream response before its end: the backend aborts the sequence (the slot is
        handed on by :meth:`upstream_done`, or :meth:`close`)."""
        if self.upstream is not None:
            self.upstream.close()

    async def enqueue(self, need: Need, prompt: PromptBlocks | None = None) -> bool:
        """Be admitted with ``need`` on the backend decided (:meth:`decide`) now if the request fits and
        fairness allows, else take a place in the key's queue (429 ``queue_full``); True if admitted.
        A backend that went down since it was decided is a fail-over: decided again when another is
        up. ``prompt``: the prompt's blocks, told to the backend's KV view once it is sent."""
        self._need = need
        self._prompt = prompt
        if need.session is not None and len(self._pipeline.backends.all) > 1:
            await self._take_hold(need.session)
        return await self._enqueue()

    async def _take_hold(self, session: str) -> None:
        """Bring ``session``'s hold to the backend this turn of it runs on: taken from the others
        (where its last turn ran, when the prefix placement or the load moved this one), held here for
        as much of it as this backend's cache holds of the prompt."""
        backend = self.backend
        assert backend is not None
        others = [b for b in self._pipeline.backends.all if b is not backend]
        taken = max([await other.admission.take_hold(session) for other in others])
        if taken > 0 and self._prompt is not None:
            cached = backend.kv.match(self._prompt, time.monotonic())[0].cached_tokens
            await backend.admission.adopt_hold(self._principal.name, session, min(taken, cached))

    async def _enqueue(self) -> bool:
        principal = self._principal
        backend = self.backend
        assert backend is not None, "decide() first"
        if not backend.up and any(other.up for other in self._pipeline.backends.all):
            self._left.append(backend)
            backend = self._decide()
        try:
            entry = await backend.admission.admit(
                principal.name, principal.priority, principal.max_concurrency, self._need
            )
        finally:
            self._uncount()
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
                self._decide()
                if await self._enqueue():
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
        self._recorder.admitted(self._waited_s, dict(self._waited_for))

    def _carry(self, waited_s: float, waited_for: Mapping[str, float]) -> None:
        """Add a wait (s, and by reason) to the request's: its waits on every backend it queued for."""
        self._waited_s += waited_s
        for reason, seconds in waited_for.items():
            self._waited_for[reason] = self._waited_for.get(reason, 0.0) + seconds

    async def open(self, prepared: Prepared) -> UpstreamResponse:
        """Send the request upstream once the slot is held; return when its headers arrive (503 / 504 /
        the upstream's own error status). A backend whose circuit is open is not tried (503 at once,
        :mod:`~gateway.backends.breaker`); one that refuses the connection while another is up is left
        for that one (queue again there)."""
        while True:
            backend = self.backend
            assert backend is not None
            try:
                self.upstream = await self._send(backend, prepared)
                prepared.translator.knowing(backend.traits.reasoning)
                if self._prompt is not None:
                    backend.kv.sent(self._prompt, time.monotonic())
            except Unreachable:
                if not self._fail_over(backend):
                    raise
                self._decide()
                if not await self._enqueue():
                    await self.wait()
                continue
            return self.upstream

    async def open_when_back(self, prepared: Prepared) -> UpstreamResponse:
        """:meth:`open`, held while the backend can't be reached (a restart): until
        ``GATEWAY_UPSTREAM_RESTART_HOLD_S`` after the outage began (the first refused connection of it,
        else this request's first try) the request waits, its slot held, for the circuit to let a
        request through again, and tries; the last 503 when the hold is over. One deadline an outage:
        the requests queued behind a held one are not held as long again each, two slots at a time."""
        hold_s, started = self._pipeline.settings.upstream_restart_hold_s, time.monotonic()
        while True:
            try:
                return await self.open(prepared)
            except Unreachable:
                assert self.backend is not None
                breaker = self.backend.breaker
                since = breaker.unreachable_since
                deadline = min(started, since if since is not None else started) + hold_s
                now = time.monotonic()
                if now >= deadline:
                    raise
            await asyncio.sleep(min(deadline - now, breaker.wait_s(now, HOLD_POLL_S)))

    async def _send(self, backend: Backend, prepared: Prepared) -> UpstreamResponse:
        """One try on ``backend``, its circuit told how it went."""
        breaker = backend.breaker
        if not breaker.allows(time.monotonic()):
            raise Unreachable(f"{backend.name} failed repeatedly; its circuit is open")
        try:  # from here a trial this request took is given back, however it ends
            if self._pipeline.wants_counters(backend):  # one loopback scrape (ms) before the request decodes
                self._before = await backend.monitor.scrape(COUNTERS, timeout_s=1.0)
            response = await backend.upstream.open("POST", self._path, prepared.body, self._headers)
        except Unreachable:
            breaker.failure(time.monotonic(), refused=True)
            raise
        except GatewayError as error:
            if error.status in DOWN_STATUSES:
                breaker.failure(time.monotonic())
            else:  # it answered: a 4xx or a 500 is about this request, not the backend
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
        backends = self._pipeline.backends
        if self._stored_at is not None:  # a continuation: only its backend has the stored response
            return False
        if not any(other.up for other in backends.all if other is not backend):
            return False
        assert self.lease is not None  # its wait is carried already (_admitted)
        self._release(self.lease)
        self.lease, self.waiter, self._before = None, None, None
        self._left.append(backend)
        backends.mark(backend, False)
        return True

    async def sequence_ended(self) -> None:
        """The backend has finished the sequence (a stream's last event has arrived): hand the slot on
        now, while the response is still rewritten and sent; a waiting request granted it is let send
        first (:func:`let_waiter_send`). Not while a spec-counter delta is being taken
        (``GATEWAY_SPEC_COUNTERS``): the next sequence's steps would count as this one's
        (:meth:`upstream_done` takes it and releases once the upstream's body has ended). :meth:`close`
        releases it anyway, once."""
        lease = self.lease
        if lease is not None and self._before is None and not lease.released and self._release(lease):
            await let_waiter_send()

    async def upstream_done(self) -> None:
        """The upstream has sent everything: hand the slot on now, whatever the client's pace. When a
        spec-counter delta is being taken, its second scrape comes first (the next sequence's steps
        must not count as this one's); a waiting request granted the slot is let send first
        (:func:`let_waiter_send`)."""
        if self.lease is None or self.lease.released:
            return
        if self._before is not None and not self._after_taken:
            assert self.backend is not None
            self._after = await self.backend.monitor.scrape(COUNTERS, timeout_s=1.0)
            self._after_taken = True
        if self._release(self.lease):
            await let_waiter_send()

    def _release(self, lease: Lease) -> bool:
        """Give ``lease`` back (:meth:`~gateway.admission.lease.Lease.release`: True if that admitted a
        waiter), the backend's KV view told first that the prompt's blocks are freed."""
        if self._prompt is not None and self.backend is not None:
            self.backend.kv.ended(self._prompt)
        return lease.release()

    async def counters(self) -> tuple[dict[str, float], dict[str, float], bool] | None:
        """The spec-decode counters before and after the sequence, and whether it ran alone (a delta
        then is its own); None when none were read."""
        if self._before is None or self.lease is None or self.backend is None:
            return None
        monitor = self.backend.monitor
        after = self._after if self._after_taken else await monitor.scrape(COUNTERS, timeout_s=1.0)
        if after is None:
            return None
        before = {n: self._before[n] for n in COUNTERS if n in self._before}
        return before, {n: after[n] for n in COUNTERS if n in after}, not self.lease.overlapped
