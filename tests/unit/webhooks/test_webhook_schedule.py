"""When a failed delivery is tried again: exponential backoff from 15-30 s, doubling, at most
an hour apart, with jitter; the last attempt at the horizon (72 h after the event by default),
then none — the delivery is failed. So a receiver down for an hour, or a day, misses nothing:
an attempt comes at most an hour after it is back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.webhooks.schedule import FIRST_DELAY, MAX_DELAY, backoff, lease, next_attempt

EVENT = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
HORIZON = timedelta(hours=72)


@pytest.mark.parametrize(("attempt", "low", "high"), [
    (1, 15, 30), (2, 30, 60), (3, 60, 120), (4, 120, 240), (5, 240, 480), (6, 480, 960), (7, 960, 1920),
    (8, 1800, 3600), (9, 1800, 3600), (40, 1800, 3600), (10_000, 1800, 3600)])
def test_backoff_doubles_to_an_hour_and_jitter_takes_off_at_most_half(attempt: int, low: float, high: float) -> None:
    assert backoff(attempt, 0.0) == min(high, MAX_DELAY)
    assert backoff(attempt, 0.999999) == pytest.approx(min(high, MAX_DELAY) / 2, rel=1e-5)
    assert backoff(attempt, 1.0) >= low and all(low <= backoff(attempt, d / 10) <= high for d in range(10))


def test_the_first_retry_comes_within_half_a_minute() -> None:
    assert FIRST_DELAY / 2 <= backoff(1, 0.5) <= FIRST_DELAY


def test_attempts_come_until_the_horizon_the_last_one_at_it_then_none() -> None:
    now, attempt, times = EVENT, 1, []
    while (after := next_attempt(attempt, now=now, since=EVENT, horizon=HORIZON, draw=0.0)) is not None:
        assert now < after <= EVENT + HORIZON
        assert after - now <= timedelta(seconds=MAX_DELAY)  # never more than an hour without an attempt
        times.append(after)
        now, attempt = after, attempt + 1
    assert times[-1] == EVENT + HORIZON  # the last attempt is made at the horizon ...
    assert next_attempt(attempt, now=EVENT + HORIZON, since=EVENT, horizon=HORIZON, draw=0.0) is None  # ... then none
    assert 70 < len(times) < 90  # about 80 attempts over three days


def test_a_receiver_down_for_an_hour_is_tried_again_within_the_hour_after() -> None:
    now, attempt = EVENT, 1
    while now < EVENT + timedelta(hours=1):
        after = next_attempt(attempt, now=now, since=EVENT, horizon=HORIZON, draw=0.5)
        assert after is not None
        now, attempt = after, attempt + 1
    assert now <= EVENT + timedelta(hours=2)


def test_a_courier_holds_a_delivery_past_its_request_deadline() -> None:
    assert lease(10.0) > timedelta(seconds=10) and lease(2.0) < lease(10.0)
