"""Admission of a new plan into a tenant: the submit rate and the active-plan cap.

Both limits are derived from stored plan rows — never a counter kept somewhere else —
and checked inside the inserting transaction under a per-tenant lock, so racing
submissions from any number of processes cannot exceed them: on Postgres a
transaction-scoped advisory lock keyed by the tenant, on SQLite the write lock that
``BEGIN IMMEDIATE`` takes. Tenants do not wait for each other.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from storage import locks
from storage.exceptions import CapacityExceeded, RateLimited
from storage.models import Plan, utcnow

RATE_WINDOW = timedelta(minutes=1)


def lock_key(tenant: str) -> int:
    """The advisory-lock key of a tenant's admissions."""
    return locks.lock_key(f"admit:{tenant}")


def admit(s: Any, dialect: str, tenant: str, *, max_active: int, submit_rate: int) -> datetime:
    """Raise :class:`RateLimited` or :class:`CapacityExceeded` if ``tenant`` may not add
    a plan now; otherwise return the plan's creation time, read once the tenant's lock is
    held (held until the transaction ends) — so creation times follow the lock order."""
    if dialect == "postgresql":
        s.execute(select(func.pg_advisory_xact_lock(lock_key(tenant))))
    now = utcnow()
    if submit_rate > 0:
        since = now - RATE_WINDOW
        recent, oldest = s.execute(
            select(func.count(), func.min(Plan.created_at)).where(Plan.tenant == tenant, Plan.created_at > since)
        ).one()
        if recent >= submit_rate:
            wait = (oldest + RATE_WINDOW - now).total_seconds() if oldest is not None else 1.0
            retry_after = min(int(RATE_WINDOW.total_seconds()), max(1, math.ceil(wait)))  # clocks may differ
            raise RateLimited(f"tenant {tenant!r} submitted {recent} plans in the last minute, the limit is "
                              f"{submit_rate} (CONCLAVE_SUBMIT_RATE); retry in {retry_after}s", retry_after)
    active = s.scalar(select(func.count()).select_from(Plan).where(Plan.tenant == tenant,
                                                                    Plan.status == "running")) or 0
    if active >= max_active:
        raise CapacityExceeded(f"{active} plans are active, the limit is {max_active} per tenant "
                               f"(tenant {tenant!r}; CONCLAVE_MAX_ACTIVE_PLANS)")
    return now
