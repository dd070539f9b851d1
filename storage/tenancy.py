"""Admission of a new plan into a tenant: the submit rate, the active-plan cap, the monthly budget.

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

from sqlalchemy import func, or_, select

from storage import locks
from storage.exceptions import BudgetSpent, CapacityExceeded, RateLimited
from storage.models import Plan, UsageRow, utcnow
from storage.status import PlanStatus

RATE_WINDOW = timedelta(minutes=1)


def lock_key(tenant: str) -> int:
    """The advisory-lock key of a tenant's admissions."""
    return locks.lock_key(f"admit:{tenant}")


def month_start(now: datetime) -> datetime:
    """The first instant of ``now``'s calendar month (UTC)."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


#: a plan not finished: running, or waiting for its draft's approval (it spent, and may spend again)
UNFINISHED = (PlanStatus.RUNNING, PlanStatus.AWAITING_APPROVAL)


def month_of(now: datetime) -> str:
    return f"{now.year:04d}-{now.month:02d}"


def spent_this_month(tenant: str, since: datetime) -> Any:
    """The tenant's US dollars on record since ``since`` (the month's start), as a scalar
    subquery: the usage rows of its plans that could have spent since then (running or waiting
    for approval, or finished since), so its cost does not grow with the tenant's history."""
    live = or_(Plan.status.in_(UNFINISHED), Plan.finished_at >= since)
    return (select(func.coalesce(func.sum(UsageRow.cost_usd), 0.0))
            .join(Plan, Plan.id == UsageRow.plan_id)
            .where(Plan.tenant == tenant, live, UsageRow.created_at >= since)
            .scalar_subquery())


def _usd(amount: float) -> str:
    """Dollars as people read them: cents, and the millionths below a cent that calls cost."""
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.6f}"


def admit(s: Any, dialect: str, tenant: str, *, max_active: int, submit_rate: int,
          monthly_usd: float | None = None) -> datetime:
    """Raise :class:`RateLimited`, :class:`CapacityExceeded` or :class:`BudgetSpent` (the
    tenant's ``monthly_usd`` is spent this calendar month) if ``tenant`` may not add a plan
    now; otherwise return the plan's creation time, read once the tenant's lock is held (held
    until the transaction ends) — so creation times follow the lock order."""
    if dialect == "postgresql":
        s.execute(select(func.pg_advisory_xact_lock(lock_key(tenant))))
    now = utcnow()
    if monthly_usd is not None:
        spent = float(s.scalar(select(spent_this_month(tenant, month_start(now)))) or 0.0)
        if spent >= monthly_usd:
            raise BudgetSpent(f"tenant {tenant!r} has spent {_usd(spent)} of its budget of {_usd(monthly_usd)} for "
                              f"{month_of(now)} (UTC); a new plan is accepted next month or once the operator "
                              "raises it (CONCLAVE_TENANT_BUDGETS)", tenant=tenant, spent_usd=spent,
                              budget_usd=monthly_usd, month=month_of(now))
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
                                                                    Plan.status.in_(UNFINISHED))) or 0
    if active >= max_active:
        raise CapacityExceeded(f"{active} plans are active, the limit is {max_active} per tenant "
                               f"(tenant {tenant!r}; CONCLAVE_MAX_ACTIVE_PLANS)")
    return now
