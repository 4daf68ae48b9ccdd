"""Choosing a backend pair (gateway/backends/pool.py): least loaded, a conversation kept on its
backend by rendezvous hashing, a backend that is down skipped, and its waiters failed over."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.admission import Admission, Lease, Need, Waiter
from gateway.backends.counting import CountGate
from gateway.backends.kv_index import PromptBlocks
from gateway.backends.kv_view import KVView
from gateway.backends.monitor import BackendMonitor
from gateway.backends.pool import Backend, BackendDown, Backends, affinity_key
from gateway.config import Settings
from gateway.telemetry import GatewayMetrics
from tests.support.fake_upstream import FakeUpstream

#: A KV view that knows nothing of any backend's pool yet.
ESTIMATED = KVView.configured(Settings(), "default")


def pool(*names: str, slots: int = 1, affinity: bool = True, own_views: bool = False) -> Backends:
    """Backends ``names``; ``own_views``: each with a prefix cache view of its own."""
    backends = []
    for name in names:
        upstream = FakeUpstream()
        monitor = BackendMonitor(upstream, GatewayMetrics(), 3600, name)
        kv = KVView.configured(Settings(), name) if own_views else ESTIMATED
        backends.append(
            Backend(name, upstream, Admission(slots, 8, 30.0), monitor, CountGate(upstream, 2, 1), kv)
        )
    return Backends(backends, affinity=affinity)


async def test_a_counted_prompt_moves_to_the_backend_holding_its_prefix_within_its_bounds() -> None:
    backends = pool("a", "b", slots=2, own_views=True)
    a, b = backends.by_name["a"], backends.by_name["b"]
    prompt, now = PromptBlocks(list(range(1000))), time.monotonic()
    b.kv.sent(prompt, now)  # b computed it: 3 blocks of 256
    a.placed()  # decided on a (the least loaded by name), counted there
    assert backends.longest_prefix(prompt, a, [], now, "k") is b
    running = [b.admission.enqueue("x"), b.admission.enqueue("y")]  # b full: 1 a slot busier than a
    assert backends.longest_prefix(prompt, a, [], now, "k") is b
    assert backends.longest_prefix(prompt, a, [], now, "k", max_wait_s=0.5) is a  # b would keep it waiting
    waiter = b.admission.enqueue("z")  # 1.5 a slot: past the slack
    assert backends.longest_prefix(prompt, a, [], now, "k") is a
    backends.mark(a, False)
    assert backends.longest_prefix(prompt, a, [], now, "k") is a  # gone down: the fail-over decides
    assert isinstance(waiter, Waiter)
    b.admission.abandon(waiter)
    for lease in running:
        assert isinstance(lease, Lease)
        lease.release()


async def test_the_least_loaded_backend_takes_the_request() -> None:
    backends = pool("a", "b", "c")
    chosen = []
    for _ in range(3):
        placed = backends.route()
        backend = placed.backend
        assert placed.reason == "least_loaded"
        assert isinstance(backend.admission.enqueue(), Lease)
        chosen.append(backend.name)
    assert chosen == ["a", "b", "c"]  # equal loads: by name; then each one's slot is held
    backends.by_name["b"].admission.enqueue()  # b: one running, one waiting
    assert backends.route().backend.name in ("a", "c")


async def test_a_conversation_keeps_its_backend_and_only_a_leaving_backends_move() -> None:
    backends = pool("a", "b", "c")
    assert backends.route("user-0").reason == "affinity"
    home = {f"user-{i}": backends.route(f"user-{i}").backend.name for i in range(60)}
    assert {name for name in home.values()} == {"a", "b", "c"}  # spread
    stable = all(backends.route(user).backend.name == name for user, name in home.items())
    assert stable  # under load too
    backends.mark(backends.by_name["b"], False)
    moved = {user: backends.route(user).backend.name for user in home}
    assert all(moved[user] == name for user, name in home.items() if name != "b")
    assert all(moved[user] != "b" for user in home)


async def test_a_backend_down_is_skipped_unless_none_is_up() -> None:
    backends = pool("a", "b")
    backends.mark(backends.by_name["a"], False)
    assert backends.route().backend.name == "b" and backends.first_up().name == "b"
    backends.mark(backends.by_name["b"], False)
    assert backends.route().backend.name == "a"  # all down: the least loaded, and its own error will tell


async def test_going_down_fails_its_waiters_when_another_backend_can_take_them() -> None:
    backends = pool("a", "b")
    a = backends.by_name["a"].admission
    held = a.enqueue()
    waiter = a.enqueue()
    assert isinstance(held, Lease) and not isinstance(waiter, Lease)
    waiting = asyncio.ensure_future(a.wait(waiter))
    await asyncio.sleep(0)
    backends.mark(backends.by_name["a"], False)
    with pytest.raises(BackendDown):
        await waiting
    assert a.queue_depth == 0  # its place given up
    held.release()
    alone = pool("a")
    solo = alone.by_name["a"].admission
    solo.enqueue()
    kept = solo.enqueue()
    alone.mark(alone.by_name["a"], False)  # nowhere else to go: they keep waiting
    assert not kept.future.done()  # type: ignore[union-attr]


def test_affinity_key_sources() -> None:
    assert affinity_key({"user": "u1"}, "s1") == "s1"
    assert affinity_key({"prompt_cache_key": "p", "user": "u"}) == "p"
    assert affinity_key({"safety_identifier": "x"}) == "x"
    assert affinity_key({"metadata": {"user_id": "claude-session"}}) == "claude-session"
    assert affinity_key({"user": ""}) is None and affinity_key({}) is None


async def test_least_loaded_when_affinity_is_off() -> None:
    backends = pool("a", "b", affinity=False)
    assert backends.route("user-1").backend.name == "a"
    backends.by_name["a"].admission.enqueue(need=Need())
    assert backends.route("user-1").backend.name == "b"


async def test_a_backend_up_again_is_preferred_to_one_still_down() -> None:
    backends = pool("a", "b", "c")
    a, b, c = (backends.by_name[name] for name in "abc")
    backends.mark(b, False)
    backends.mark(c, False)
    assert backends.route(exclude=[a, b]).backend.name == "a"  # it left a and b; a is up again, c is not
