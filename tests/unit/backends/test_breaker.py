"""The circuit breaker's states on a given clock: closed, open at once on a refused connection or
after three failures in a row, one trial after a doubling cool-down, closed again by a success."""

from __future__ import annotations

from gateway.backends.breaker import BASE_S, MAX_S, THRESHOLD, Breaker


def test_failures_in_a_row_open_it_and_a_trial_success_closes_it() -> None:
    breaker = Breaker()
    for _ in range(THRESHOLD - 1):
        breaker.failure(0.0)
        assert breaker.allows(0.0) and breaker.state == "closed"
    breaker.failure(0.0)
    assert breaker.state == "open" and not breaker.allows(BASE_S - 0.01)
    assert breaker.wait_s(0.5, 0.1) == BASE_S - 0.5
    assert breaker.allows(BASE_S) and breaker.state == "half_open"
    assert not breaker.allows(BASE_S) and breaker.wait_s(BASE_S, 0.1) == 0.1  # one trial at a time
    breaker.success()
    assert breaker.state == "closed" and breaker.allows(BASE_S) and breaker.wait_s(BASE_S, 0.1) == 0.0


def test_a_refused_connection_opens_it_at_once_and_failed_trials_double_the_cool_down() -> None:
    breaker = Breaker()
    breaker.failure(0.0, refused=True)
    now, cool_downs = 0.0, []
    for _ in range(7):
        start = now
        while not breaker.allows(now):
            now += 0.5
        cool_downs.append(now - start)
        breaker.failure(now)  # the trial fails
    assert cool_downs == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_S, MAX_S]


def test_a_trial_given_up_lets_another_go() -> None:
    breaker = Breaker()
    breaker.failure(0.0, refused=True)
    assert breaker.allows(BASE_S)
    breaker.given_up()
    assert breaker.allows(BASE_S)


def test_the_monitor_reaching_the_backend_closes_a_circuit_opened_by_refusals_only() -> None:
    refused, failing = Breaker(), Breaker()
    refused.failure(0.0, refused=True)
    for _ in range(THRESHOLD):
        failing.failure(0.0)
    refused.reachable()
    failing.reachable()  # its /metrics answers, but its answers fail: it stays open
    assert refused.state == "closed" and refused.allows(0.0)
    assert failing.state == "open" and not failing.allows(0.0)


def test_a_burst_of_failures_opens_it_once_for_the_first_cool_down() -> None:
    breaker = Breaker()
    for _ in range(8):  # eight requests in flight fail together
        breaker.failure(0.0)
    assert not breaker.allows(BASE_S - 0.01) and breaker.allows(BASE_S)


def test_an_outage_starts_at_its_first_refused_connection_and_ends_when_it_answers() -> None:
    breaker = Breaker()
    breaker.failure(1.0)
    assert breaker.unreachable_since is None  # an answer that failed: not an outage
    breaker.failure(2.0, refused=True)
    breaker.failure(5.0, refused=True)  # still down: the outage began at 2
    assert breaker.allows(5.0) and breaker.unreachable_since == 2.0
    breaker.failure(5.0, refused=True)  # its trial refused too
    assert breaker.unreachable_since == 2.0
    breaker.success()
    assert breaker.unreachable_since is None
