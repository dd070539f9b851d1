"""What is live across every tenant, for monitoring (the API's ``/metrics``). Read-only.

Only live rows are counted, each through an index, so a scrape costs the same however many
finished plans are kept: running plans through ``ix_plans_status``, their phases through
``ix_phases_plan_status`` (plan, status), pending webhook deliveries through
``ix_webhook_deliveries_due``. Nothing here adds up history — finished plans,
usage — which grows without bound (the workers count phases, calls and tokens as they
happen: ``orchestrator.metrics``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, select

from storage.db import Database
from storage.models import Phase, Plan, WebhookDelivery
from storage.status import DeliveryStatus, PhaseStatus, PlanStatus

#: A pending webhook delivery due longer ago than this has waited for a courier: none is
#: running (no worker has the key), or they are saturated.
OVERDUE = timedelta(minutes=1)


@dataclass(frozen=True)
class LiveCounts:
    plans: int  # plans running now
    cancelling: int  # … of which a cancel was requested (they end at their phases' next safe point)
    phases: dict[str, int]  # the phases of running plans, by status
    expired_leases: int  # running phases of running plans whose lease has expired (their worker died)
    webhooks_pending: int = 0  # webhook deliveries not yet delivered nor failed
    webhooks_overdue: int = 0  # … of which due for longer than OVERDUE: no courier took them


def live_counts(db: Database, *, now: datetime) -> LiveCounts:
    running = Plan.status == PlanStatus.RUNNING
    expired = case((Phase.lease_expires_at < now, 1), else_=0)
    with db.transaction() as s:
        plans, cancelling = s.execute(
            select(func.count(), func.coalesce(func.sum(case((Plan.cancel_requested, 1), else_=0)), 0))
            .where(running)).one()
        rows = s.execute(select(Phase.status, func.count(), func.coalesce(func.sum(expired), 0))
                         .join(Plan, Plan.id == Phase.plan_id).where(running).group_by(Phase.status)).all()
        pending, overdue = s.execute(  # ix_webhook_deliveries_due (status, next_attempt_at)
            select(func.count(), func.coalesce(func.sum(case((WebhookDelivery.next_attempt_at < now - OVERDUE, 1),
                                                             else_=0)), 0))
            .where(WebhookDelivery.status == DeliveryStatus.PENDING)).one()
    return LiveCounts(int(plans), int(cancelling), {status: int(n) for status, n, _ in rows},
                      sum(int(e) for status, _, e in rows if status == PhaseStatus.RUNNING), int(pending),
                      int(overdue))
