"""The queue ordered by expected work (gateway/admission/scheduler.py, fair queueing over keys by each
request's ``Need.service_s``) and the rates that work is measured in (gateway/admission/service.py)."""

from __future__ import annotations

from gateway.admission import Admission, Lease, Need, Waiter
from gateway.admission.service import MIN_PREFILL_SAMPLE, UNKNOWN_S, ServiceRates


def serve_one(admission: Admission, lease: Lease, waiters: dict[str, Waiter]) -> tuple[str, Lease]:
    """Release ``lease``; the name of the waiter it went to, and that waiter's lease."""
    lease.release()
    [name] = [n for n, w in waiters.items() if w.future.done()]
    waiter = waiters.pop(name)
    assert isinstance(waiter.grant, int)
    return name, Lease(admission, waiter.key, waiter.grant, waiter.need)


async def test_a_short_request_goes_before_a_long_one_that_came_first() -> None:
    admission = Admission(slots=1, queue_max=10, queue_timeout_s=10)
    lease = admission.enqueue("X")
    assert isinstance(lease, Lease)
    waiters: dict[str, Waiter] = {}
    for name, key, seconds in (("agent", "A", 60.0), ("chat", "B", 0.5), ("chat2", "C", 2.0)):
        waiter = admission.enqueue(key, need=Need(service_s=seconds))
        assert isinstance(waiter, Waiter)
        waiters[name] = waiter
    assert [admission.position(waiters[n]) for n in ("chat", "chat2", "agent")] == [1, 2, 3]
    served = []
    while waiters:
        name, lease = serve_one(admission, lease, waiters)
        served.append(name)
    lease.release()
    assert served == ["chat", "chat2", "agent"]
    assert admission.in_use == 0 and admission.queue_depth == 0


async def test_a_long_request_waits_for_a_bounded_share_of_other_keys_work() -> None:
    """Three keys keep one short request (1 s expected) each waiting at every instant; a 10 s request
    waits behind at most 10 s of each key's work plus one request of each (the docstring's bound)."""
    admission = Admission(slots=1, queue_max=20, queue_timeout_s=10)
    lease = admission.enqueue("X")
    assert isinstance(lease, Lease)
    short = Need(service_s=1.0)
    waiters = {f"{key}0": admission.enqueue(key, need=short) for key in "ABC"}
    waiters["long"] = admission.enqueue("L", need=Need(service_s=10.0))
    assert all(isinstance(w, Waiter) for w in waiters.values())
    before = 0
    for before in range(100):  # shortest-first alone would serve the short ones for ever
        name, lease = serve_one(admission, lease, waiters)  # type: ignore[arg-type]
        if name == "long":
            break
        waiters[f"{name[0]}{before + 1}"] = admission.enqueue(name[0], need=short)  # it asks again at once
    assert 10 <= before <= 3 * (10 + 1)
    lease.release()
    for waiter in waiters.values():
        admission.abandon(waiter)
    assert admission.in_use == 0 and admission.queue_depth == 0


async def test_priority_weighs_expected_seconds() -> None:
    """Two keys with equal requests waiting: the one of priority 3 gets three grants per one of the other."""
    admission = Admission(slots=1, queue_max=40, queue_timeout_s=10)
    lease = admission.enqueue("X")
    assert isinstance(lease, Lease)
    waiters: dict[str, Waiter] = {}
    for i in range(8):
        for key, priority in (("H", 3), ("L", 1)):
            waiter = admission.enqueue(key, priority, need=Need(service_s=2.0))
            assert isinstance(waiter, Waiter)
            waiters[f"{key}{i}"] = waiter
    served = ""
    for _ in range(8):
        name, lease = serve_one(admission, lease, waiters)
        served += name[0]
    assert served.count("H") == 6 and "LL" not in served  # three grants of H per one of L
    lease.release()
    for waiter in waiters.values():
        admission.abandon(waiter)


def test_rates_come_from_what_the_backend_did() -> None:
    rates = ServiceRates()
    assert rates.expected_s("k", 100_000, 4_000) == UNKNOWN_S  # nothing measured: every request alike
    rates.observe("k", MIN_PREFILL_SAMPLE - 1, 5.0, 100, 50.0)  # too few tokens to time a prefill
    assert rates.prefill_tps is None and rates.decode_tps == 50.0
    assert rates.expected_s("k", 100_000, 4_000) == 100 / 50.0  # the key's output, at 50 tokens/s
    rates.observe("k", 20_000, 2.0, 100, 50.0)
    assert rates.prefill_tps == 10_000.0
    assert rates.expected_s("k", 20_000, 4_000) == 2.0 + 100 / 50.0
    assert rates.expected_s("k", 0, 10) == 10 / 50.0  # never more output than the cap
    rates.observe("other", 0, None, 600, None)  # untimed: only its output counts
    assert rates.decode_tps == 50.0 and rates.expected_s("new", 0, 4_000) == rates.output_tokens / 50.0


def test_each_keys_mean_output_is_kept_for_a_bounded_number_of_keys() -> None:
    rates = ServiceRates()
    rates.observe("first", 0, None, 4_000, 100.0)
    for i in range(5_000):
        rates.observe(f"key-{i}", 0, None, 10, 100.0)
    # the first key is forgotten: it is expected to answer as the backend's mean, not its own 4,000
    assert rates.expected_s("first", 0, 100_000) == rates.output_tokens / 100.0 < 4_000 / 100.0
