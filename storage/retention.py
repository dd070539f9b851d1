"""Bounded retention: what finished plans keep. An active plan is never pruned.

Finished plans lose their events older than the retention period and every event
past the per-plan cap (the newest are kept), and their transient rows (resume
guards, enqueue marks) are cleared. Results, contents and usage are kept: they
are the record.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, or_, select, update

from storage.db import Database
from storage.models import Event, Phase, Plan
from storage.status import PLAN_FINAL


def prune(db: Database, *, older_than: datetime, max_events_per_plan: int, batch: int = 200) -> int:
    """Returns the number of events deleted.

    Bounded: one call looks at no more than ``batch * 10`` finished plans, and only
    at those that still have something to prune (events older than ``older_than``
    or more than ``max_events_per_plan``) — so successive calls reach every
    finished plan instead of revisiting the same ones.
    """
    deleted = 0
    with db.transaction() as s:
        finished = select(Plan.id).where(Plan.status.in_(PLAN_FINAL))
        candidates = list(s.scalars(
            select(Event.plan_id).where(Event.plan_id.in_(finished)).group_by(Event.plan_id)
            .having(or_(func.count() > max_events_per_plan, func.min(Event.created_at) < older_than))
            .limit(batch * 10)))
        if candidates:
            res = s.execute(delete(Event).where(Event.plan_id.in_(candidates), Event.created_at < older_than))
            deleted += res.rowcount or 0  # type: ignore[attr-defined]
        for plan_id in candidates:
            keep_from = s.scalar(select(Event.id).where(Event.plan_id == plan_id).order_by(Event.id.desc())
                                 .offset(max_events_per_plan - 1).limit(1))
            if keep_from is not None:
                res = s.execute(delete(Event).where(Event.plan_id == plan_id, Event.id < keep_from))
                deleted += res.rowcount or 0  # type: ignore[attr-defined]
        s.execute(update(Plan).where(Plan.status.in_(PLAN_FINAL), Plan.resume_until.is_not(None))
                  .values(resume_owner=None, resume_until=None))
        s.execute(update(Phase).where(Phase.plan_id.in_(finished), Phase.enqueued_at.is_not(None))
                  .values(enqueued_at=None))
    return deleted
