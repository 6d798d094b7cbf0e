from __future__ import annotations

import pytest

from app.features.circuit_breaker import CircuitBreaker
from tests.support.manual_clock import ManualClock


def test_opens_after_consecutive_failures_only() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(3, 2.0, clock)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()  # resets the streak
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state == "closed" and breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    assert not breaker.allow()


def test_half_open_lets_one_probe_through_and_closes_on_success() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(1, 2.0, clock)
    breaker.record_failure()
    clock.now += 1.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.state == "half_open"
    assert breaker.allow()
    assert not breaker.allow()  # the probe is still out
    breaker.record_success()
    assert breaker.state == "closed"
    assert breaker.allow() and breaker.allow()


def test_failed_probe_reopens_for_a_full_period() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(2, 2.0, clock)
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 2.0
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    clock.now += 1.0
    assert not breaker.allow()
    clock.now += 1.0
    assert breaker.allow()


def test_a_lost_probe_does_not_wedge_the_breaker() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(1, 2.0, clock)
    breaker.record_failure()
    clock.now += 2.0
    assert breaker.allow()  # probe caller never reports back
    clock.now += 1.0
    assert not breaker.allow()
    clock.now += 1.0
    assert breaker.allow()


def test_calls_in_flight_together_fail_as_one_stall() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(3, 2.0, clock)
    batch = [breaker.now() for _ in range(8)]  # eight lookups go out at once
    clock.now += 0.01
    for started in batch:  # and all miss the deadline together
        breaker.record_failure(started)
    assert breaker.state == "closed"  # one stall, counted once
    for _ in range(2):  # two more stalls, each seen by a call that began after the last
        started = breaker.now()
        clock.now += 0.01
        breaker.record_failure(started)
    assert breaker.state == "open"


def test_a_success_ends_the_streak_of_stalls() -> None:
    clock = ManualClock()
    breaker = CircuitBreaker(2, 2.0, clock)
    started = breaker.now()
    clock.now += 0.01
    breaker.record_failure(started)
    breaker.record_success()
    late = breaker.now() - 1.0  # began before the counted failure: would have shared it
    breaker.record_failure(late)
    assert breaker.state == "closed"
    breaker.record_failure(breaker.now())
    assert breaker.state == "open"


@pytest.mark.parametrize(("threshold", "reset"), [(0, 1.0), (1, 0.0)])
def test_rejects_bad_settings(threshold: int, reset: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(threshold, reset)
