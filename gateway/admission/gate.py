"""What the request pipeline, ``/metrics`` and ``/admin/status`` need of an admission, whichever it is:
:class:`~gateway.admission.scheduler.Admission` (this process, the default) or
:class:`~gateway.admission.shared.SharedAdmission` (every replica's requests, in Redis)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol

from gateway.admission.capacity import Capacity, Held, Need
from gateway.admission.errors import QueueFullError
from gateway.admission.lease import Lease, Waiter


def expected_wait_s(
    mean_hold_s: float, slots: int, waiting: int, queued: Mapping[str, int], key: str
) -> float:
    """How long a request of ``key`` that has to wait now is expected to: the grants before it, times
    the mean time a request holds a slot (the queue's measured service rate: an exponentially
    weighted mean), over the slots. Round robin gives each key with waiters one grant a turn, so a
    request waits its key's queue length in turns of every waiting key: ``own x keys + keys`` grants
    before it at most, never more than all the ``waiting``. ``queued``: waiters by key.

    A rate estimate (a running request's remaining time is unknown to the gateway): it refuses early
    only what the queue's recent pace says can't be served in time."""
    keys = len(queued) + (0 if key in queued else 1)
    ahead = min(waiting, queued.get(key, 0) * keys + keys - 1)
    return mean_hold_s * (ahead + 1) / max(1, slots)


class Load(Protocol):
    """The live figures of a backend's admission (or the sums over several): its capacity, sequences
    in use, requests waiting (by what for), KV reserved tokens, long requests running."""

    @property
    def capacity(self) -> Capacity: ...

    @property
    def slots(self) -> int: ...

    @property
    def in_use(self) -> int: ...

    @property
    def queue_depth(self) -> int: ...

    @property
    def kv_reserved_tokens(self) -> int: ...

    @property
    def long_in_use(self) -> int: ...

    def waiting_for(self) -> dict[str, int]:
        """Requests waiting, by :class:`~gateway.admission.capacity.Reason` value."""
        ...


class HeldLoad:
    """:class:`Load`'s figures of an admission that keeps its ``capacity``, the totals ``held`` by the
    running requests and ``_waiting``, the requests waiting."""

    capacity: Capacity
    held: Held
    _waiting: int

    @property
    def slots(self) -> int:
        return self.capacity.slots

    @property
    def in_use(self) -> int:
        """Sequences holding slots now."""
        return self.held.sequences

    @property
    def kv_reserved_tokens(self) -> int:
        """KV tokens the running requests have reserved."""
        return self.held.kv_tokens

    @property
    def long_in_use(self) -> int:
        """Long-prompt requests running now."""
        return self.held.long

    @property
    def queue_depth(self) -> int:
        """Requests waiting now."""
        return self._waiting


def status_view(
    load: Load,
    in_flight: Mapping[str, int],
    waiting: Mapping[str, int],
    reasons: Iterable[tuple[str, str]] = (),
    **extra: object,
) -> dict[str, object]:
    """The ``/admin/status`` view of ``load``: slots, KV reserved vs budget (None: no bound), the lane,
    what the waiting requests wait for, and per key (``in_flight``, ``waiting``: requests by key name)
    its requests in flight and waiting, and what its waiting ones wait for (``reasons``: a
    ``(key, reason)`` per waiting request); then ``extra``."""
    budget = load.capacity.kv_budget_tokens
    keys = set(in_flight) | set(waiting)
    return {
        "slots_total": load.slots,
        "slots_in_use": load.in_use,
        "queue_depth": load.queue_depth,
        "kv_budget_tokens": budget if budget != math.inf else None,
        "kv_reserved_tokens": load.kv_reserved_tokens,
        "long_slots": load.capacity.long_slots,
        "long_in_use": load.long_in_use,
        "waiting_for": load.waiting_for(),
        "keys": {
            key: {"in_flight": in_flight.get(key, 0), "waiting": waiting.get(key, 0)} for key in sorted(keys)
        },
        "waiting_by_key": by_key(reasons),
        **extra,
    }


def by_key(reasons: Iterable[tuple[str, str]]) -> dict[str, dict[str, int]]:
    """``{key: {reason: requests}}`` of ``(key, reason)`` pairs, keys sorted."""
    counts: dict[str, Counter[str]] = {}
    for key, reason in reasons:
        counts.setdefault(key, Counter())[reason] += 1
    return {key: dict(counts[key]) for key in sorted(counts)}


class Gate(Load, Protocol):
    """Admit, wait, give up, for one backend; the ``/admin/status`` view."""

    async def admit(self, key: str, priority: int, max_concurrency: int | None, need: Need) -> Lease | Waiter:
        """A lease now, or a place in the queue (:class:`~gateway.admission.errors.QueueFullError`)."""
        ...

    async def wait(self, waiter: Waiter) -> Lease:
        """The lease, once granted (:class:`~gateway.admission.errors.QueueTimeoutError`)."""
        ...

    def abandon(self, waiter: Waiter) -> None:
        """Give the place (or a grant no lease holds yet) up; idempotent."""
        ...

    def fail_waiting(self, error: Exception) -> None:
        """Fail every request of this process waiting here with ``error`` (their backend went down)."""
        ...

    def position(self, waiter: Waiter) -> int:
        """Grants before ``waiter`` (1 = next), an estimate."""
        ...

    def retry_after_s(self) -> int:
        """Seconds a refused client should wait."""
        ...

    def queue_refusal(self, key: str) -> QueueFullError | None:
        """The refusal a request of ``key`` that has to wait would get now (None: it would run or get
        a place): asked before its prompt is counted, so a request bound to be refused costs the
        backend nothing."""
        ...

    def expected_wait_s(self, key: str) -> float:
        """How long a request of ``key`` arriving now is expected to wait, s (0: it would run at once;
        :func:`expected_wait_s`)."""
        ...

    def status(self) -> dict[str, object]:
        """The ``/admin/status`` view (see :meth:`Admission.status`)."""
        ...

    def holds(self) -> list[dict[str, object]]:
        """The agent sessions whose prefix is held (see :meth:`Admission.holds`)."""
        ...

    async def take_hold(self, session: str) -> int:
        """Give up ``session``'s hold here, as its next turn runs on another backend: the tokens it
        held (0: none)."""
        ...

    async def adopt_hold(self, key: str, session: str, tokens: int) -> None:
        """Hold ``tokens`` of ``session``'s prefix (``key``'s) here, from now, for its turn about to
        be enqueued here: a hold taken from another backend (:meth:`take_hold`)."""
        ...
