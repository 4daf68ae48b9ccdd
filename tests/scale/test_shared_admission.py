"""The shared admission against a real Redis: two :class:`SharedAdmission` on their own connections
stand for two replicas in front of one backend (the process-level tests are in
``test_replicas.py``). Each test names a backend of its own, so the session's Redis is shared safely.
"""

from __future__ import annotations

import asyncio
import math
import uuid

import pytest
from redis.asyncio import Redis

from gateway.admission import Capacity, Lease, Need, QueueFullError, SharedAdmission
from gateway.app import admission_for
from gateway.backends.counting import CountGate
from gateway.backends.kv_view import KVView
from gateway.backends.monitor import BackendMonitor
from gateway.backends.pool import Backend, Backends
from gateway.config import Settings
from gateway.telemetry import GatewayMetrics
from tests.support.fake_upstream import FakeUpstream
from tests.support.shared_replicas import Make, started

pytestmark = pytest.mark.uvloop_too


async def test_two_replicas_never_grant_more_than_the_slots(replicas: Make):
    one, two = await started(replicas), await started(replicas)
    held: list[Lease] = []
    peak = 0

    async def request(replica: SharedAdmission, key: str) -> None:
        nonlocal peak
        entry = await replica.admit(key, 1, None, Need())
        lease = entry if isinstance(entry, Lease) else await replica.wait(entry)
        held.append(lease)
        peak = max(peak, len(held))
        await asyncio.sleep(0.01)
        held.remove(lease)
        lease.release()

    await asyncio.gather(*(request(one if i % 2 else two, f"k{i % 3}") for i in range(30)))
    assert peak == 2
    await asyncio.sleep(0.1)  # the last releases run in the background
    await one.renew()
    assert (one.in_use, one.queue_depth) == (0, 0)


async def test_a_key_flooding_one_replica_does_not_starve_another_keys_request_on_another(replicas: Make):
    one, two = await started(replicas, slots=1), await started(replicas, slots=1)
    first = await one.admit("flood", 1, None, Need())
    assert isinstance(first, Lease)
    flood = [await one.admit("flood", 1, None, Need()) for _ in range(20)]
    other = await two.admit("other", 1, None, Need())
    assert not isinstance(other, Lease) and other.place == 1  # the flood holds the slot: other goes first
    order: list[str] = []

    async def serve(replica: SharedAdmission, waiter, name: str) -> None:
        lease = await replica.wait(waiter)
        order.append(name)
        await asyncio.sleep(0.005)
        lease.release()

    tasks = [asyncio.create_task(serve(one, w, "flood")) for w in flood]
    tasks.append(asyncio.create_task(serve(two, other, "other")))
    first.release()
    await asyncio.gather(*tasks)
    assert order.index("other") == 0  # the slot the flood's first request frees


async def test_a_freed_slot_goes_to_the_key_holding_nothing_across_replicas(replicas: Make):
    """As in-process: A and B hold both slots and queue more, C (on another replica) queues last and
    gets the next freed slot."""
    one, two = await started(replicas), await started(replicas)
    a, b = await one.admit("A", 1, None, Need()), await one.admit("B", 1, None, Need())
    assert isinstance(a, Lease) and isinstance(b, Lease)
    a2, b2 = await one.admit("A", 1, None, Need()), await one.admit("B", 1, None, Need())
    c1 = await two.admit("C", 1, None, Need())
    assert c1.place == 1  # ahead of A's and B's second requests
    a.release()
    granted = await asyncio.wait_for(two.wait(c1), 5)
    assert not a2.future.done()
    b.release()
    await asyncio.wait_for(one.wait(a2), 5)
    granted.release()
    one.abandon(b2)


async def test_interactive_requests_go_before_batch_ones_across_replicas(replicas: Make):
    one, two = await started(replicas, slots=1), await started(replicas, slots=1)
    holder = await one.admit("X", 1, None, Need())
    assert isinstance(holder, Lease)
    batch = await one.admit("A", 1, None, Need(batch=True))
    interactive = await two.admit("B", 1, None, Need())
    holder.release()
    first = await asyncio.wait_for(two.wait(interactive), 5)  # queued after the batch one, served first
    assert not batch.future.done()
    first.release()
    (await asyncio.wait_for(one.wait(batch), 5)).release()


async def test_a_replica_that_dies_gives_its_slots_back_within_the_ttl(replicas: Make):
    dying = replicas(slots=1, ttl=1.0)  # never started: it never renews, as after a kill -9
    alive = await started(replicas, slots=1, ttl=1.0)
    lease = await dying.admit("a", 1, None, Need())
    assert isinstance(lease, Lease)
    waiter = await alive.admit("b", 1, None, Need())
    assert not isinstance(waiter, Lease)
    loop = asyncio.get_running_loop()
    started_at = loop.time()
    granted = await asyncio.wait_for(alive.wait(waiter), 5)
    assert loop.time() - started_at < 1.0 + 1.0 / 3 + 0.5  # TTL + one renewal of the survivor
    lease.release()  # the dead lease's fence: a no-op, not the survivor's slot
    await asyncio.sleep(0.1)
    await alive.renew()
    assert alive.in_use == 1
    granted.release()


async def test_kv_budget_holds_across_replicas_and_short_requests_pass_a_long_one(replicas: Make):
    one, two = await started(replicas, kv=1000), await started(replicas, kv=1000)
    big = await one.admit("a", 1, None, Need(kv_tokens=700))
    assert isinstance(big, Lease)
    waits = await two.admit("b", 1, None, Need(kv_tokens=700))
    assert not isinstance(waits, Lease) and waits.reason is not None and waits.reason.value == "kv"
    small = await two.admit("c", 1, None, Need(kv_tokens=200))
    assert isinstance(small, Lease)  # passes the one waiting for KV
    assert one.kv_reserved_tokens == 900 or two.kv_reserved_tokens == 900
    small.release()
    big.release()
    granted = await asyncio.wait_for(two.wait(waits), 5)
    assert granted.need.kv_tokens == 700
    granted.release()


async def test_queue_bounds_and_giving_a_place_up(replicas: Make):
    one = await started(replicas, slots=1, queue_max=4, queue_max_per_key=2)
    lease = await one.admit("a", 1, None, Need())
    assert isinstance(lease, Lease)
    queued = [await one.admit("a", 1, None, Need()) for _ in range(2)]
    with pytest.raises(QueueFullError):
        await one.admit("a", 1, None, Need())  # its key's bound
    for waiter in queued:
        one.abandon(waiter)
    await asyncio.sleep(0.1)
    await one.renew()
    assert one.queue_depth == 0
    lease.release()
    await asyncio.sleep(0.1)
    await one.renew()
    assert one.in_use == 0


async def test_a_grant_given_up_before_it_became_a_lease_goes_on(replicas: Make):
    one, two = await started(replicas, slots=1), await started(replicas, slots=1)
    lease = await one.admit("a", 1, None, Need())
    assert isinstance(lease, Lease)
    gives_up = await two.admit("b", 1, None, Need())
    then = await two.admit("c", 1, None, Need())
    lease.release()
    await asyncio.wait({gives_up.future}, timeout=5)  # granted; no task has taken it as a lease yet
    assert gives_up.grant is not None
    two.abandon(gives_up)  # e.g. its client left in that tick: the grant must go on to "c"
    granted = await asyncio.wait_for(two.wait(then), 5)
    granted.release()


async def test_a_renewal_while_an_admission_is_on_its_way_loses_nothing(replicas: Make):
    one = await started(replicas, slots=1)
    for _ in range(30):
        entry, _ = await asyncio.gather(one.admit("a", 1, None, Need()), one.renew())
        lease = entry if isinstance(entry, Lease) else await asyncio.wait_for(one.wait(entry), 5)
        assert lease.grant > 0 and lease.ticket
        lease.release()
        await asyncio.sleep(0.01)
    await one.renew()
    assert (one.in_use, one.queue_depth) == (0, 0)


async def test_a_burst_of_give_ups_past_the_connection_cap_leaves_no_ghost(redis_url: str):
    # the admission the app builds (its connection pool): 150 places given up at once, each its own
    # ABANDON in the background, more than a pool holds connections
    namespace = f"test-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        upstream="http://127.0.0.1:9", admission_store=redis_url, admission_namespace=namespace,
        slots=1, queue_max=400, queue_max_per_key=400,
    )  # fmt: skip
    capped = admission_for(settings, "default")
    assert isinstance(capped, SharedAdmission)
    await capped.start()
    try:
        lease = await capped.admit("a", 1, None, Need())
        waiters = [await capped.admit(f"k{i % 5}", 1, None, Need()) for i in range(150)]
        for waiter in waiters:
            capped.abandon(waiter)
        lease.release()
        again = await asyncio.wait_for(capped.admit("b", 1, None, Need()), 10)
        granted = again if isinstance(again, Lease) else await asyncio.wait_for(capped.wait(again), 5)
        await capped.renew()
        assert granted.key == "b" and capped.queue_depth == 0  # no ghost of the 150 holds or waits
        granted.release()
    finally:
        await capped.aclose()
        client = Redis.from_url(redis_url)
        await client.delete(*[key async for key in client.scan_iter(f"{namespace}:*")] or ["-"])
        await client.aclose()


async def test_grants_still_arrive_at_once_after_the_channel_is_cut(replicas: Make, redis_url: str):
    one = await started(
        replicas, slots=1, ttl=60.0
    )  # renewals every 20 s: a grant that came in time came by pub/sub
    lease = await one.admit("a", 1, None, Need())
    waiter = await one.admit("b", 1, None, Need())
    admin = Redis.from_url(redis_url)
    await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    await admin.aclose()
    await asyncio.sleep(1.5)  # it subscribes again
    lease.release()
    granted = await asyncio.wait_for(one.wait(waiter), 3)
    granted.release()


async def test_after_the_store_lost_everything_an_old_release_frees_no_new_holder(
    replicas: Make, redis_url: str
):
    one = await started(replicas, slots=1)
    old = await one.admit("a", 1, None, Need())
    client = Redis.from_url(redis_url)
    keys = [key async for key in client.scan_iter(f"{one._prefix}*")]  # noqa: SLF001 - what a restart loses
    await client.delete(*keys)
    await client.aclose()
    new = await one.admit("b", 1, None, Need())  # fences count from 1 again
    assert isinstance(old, Lease) and isinstance(new, Lease) and new.grant == old.grant
    old.release()
    await asyncio.sleep(0.1)
    await one.renew()
    assert one.in_use == 1  # the new holder's slot is still held
    blocked = await one.admit("c", 1, None, Need())
    assert not isinstance(blocked, Lease)
    new.release()
    granted = await asyncio.wait_for(one.wait(blocked), 5)
    granted.release()


async def test_no_queue_room_still_admits_a_request_that_runs_at_once(replicas: Make):
    one = await started(replicas, slots=1, queue_max=0)
    lease = await one.admit("a", 1, None, Need())
    assert isinstance(lease, Lease)
    with pytest.raises(QueueFullError):
        await one.admit("b", 1, None, Need())
    lease.release()


async def test_a_burst_over_two_shared_backends_spreads_before_redis_answers(redis_url: str):
    made = []
    for name in ("a", "b"):
        admission = SharedAdmission(
            Redis.from_url(redis_url), f"dspark:admission:{{test-{uuid.uuid4().hex[:10]}}}:",
            Capacity(1, math.inf, 1), 100, 30.0,
        )  # fmt: skip
        await admission.start()
        upstream = FakeUpstream()
        made.append(
            Backend(
                name,
                upstream,
                admission,
                BackendMonitor(upstream, GatewayMetrics(), 3600, name),
                CountGate(upstream, 2, 1),
                KVView.configured(Settings(), name),
            )
        )
    backends = Backends(made)

    async def one() -> str:
        backend = backends.route().backend
        backend.placed()  # as a request's placement does, until its admission answers
        try:
            entry = await backend.admission.admit("k", 1, None, Need())
        finally:
            backend.unplaced()
        lease = entry if isinstance(entry, Lease) else await backend.admission.wait(entry)
        await asyncio.sleep(0.05)
        lease.release()
        return backend.name

    try:
        names = await asyncio.gather(*(one() for _ in range(6)))
        assert sorted(names) == ["a", "a", "a", "b", "b", "b"]
    finally:
        for backend in made:
            await backend.admission.aclose()  # type: ignore[attr-defined]
