"""When a delivery is tried again, and when it is given up.

After failed attempt ``n`` the next comes ``backoff(n)`` later: ``30 s · 2^(n-1)``, at most an
hour, of which a random half is taken off (jitter, so a receiver coming back is not hit by
every delivery in the same second):

    attempt   1       2       3      4      5      6       7        8 …
    next in   15-30s  30-60s  1-2m   2-4m   4-8m   8-16m   16-32m   30-60m …

until ``CONCLAVE_WEBHOOK_RETRY_HOURS`` (72) after the event: the last attempt is made at that
horizon, and a delivery that fails it is ``failed``. A receiver down for an hour gets every
delivery within about an hour of coming back; one down for three days loses what is older.

A courier holds a delivery it took for :func:`lease` — the request's timeout and a margin —
as the row's ``next_attempt_at``: if it dies, the row is due again when that passes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

FIRST_DELAY = 30.0
MAX_DELAY = 3600.0
LEASE_MARGIN = 5.0


def backoff(attempt: int, draw: float) -> float:
    """Seconds until the attempt after failed attempt ``attempt`` (1-based); ``draw`` in
    [0, 1) takes up to half of it off."""
    full = min(MAX_DELAY, FIRST_DELAY * 2.0 ** min(max(attempt, 1) - 1, 32))
    return full * (1.0 - 0.5 * min(max(draw, 0.0), 1.0))


def next_attempt(attempt: int, *, now: datetime, since: datetime, horizon: timedelta,
                 draw: float) -> datetime | None:
    """When to try again after failed attempt ``attempt`` made at ``now``, for a delivery
    of an event at ``since``; None once the horizon is reached: give up."""
    deadline = since + horizon
    if now >= deadline:
        return None
    return min(now + timedelta(seconds=backoff(attempt, draw)), deadline)


def lease(timeout: float) -> timedelta:
    """How long a courier holds a delivery it took: its request ends within ``timeout``."""
    return timedelta(seconds=timeout + LEASE_MARGIN)
