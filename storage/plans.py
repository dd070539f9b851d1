"""The plan aggregate: creation, lookup, cancellation, the resume guard, finishing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update

from storage.briefings import add_briefing
from storage.db import Database
from storage.errors import Busy, CapacityExceeded, Conflict, NotFound
from storage.models import PLAN_FINAL, Event, Phase, Plan, utcnow
from storage.records import NewDocument, NewPhase, PhaseRecord, PlanRecord, snapshot

# Serialises the capacity check with the insert (SQLite's BEGIN IMMEDIATE already does).
_CAPACITY_LOCK = 0x636F6E636C617665  # "conclave"


@dataclass(frozen=True)
class PlanState:
    plan: PlanRecord
    phases: list[PhaseRecord]

    def by_key(self) -> dict[str, PhaseRecord]:
        return {p.key: p for p in self.phases}


def create_plan(
    db: Database,
    *,
    title: str,
    kind: str,
    spec: dict[str, Any],
    phases: Sequence[NewPhase],
    task_id: str | None,
    max_active: int,
    briefing: Sequence[NewDocument] = (),
) -> tuple[str, bool]:
    """Insert a plan, all its phases and its briefing (documents and chunks) in one
    transaction: a failure anywhere stores nothing.

    Idempotent per ``task_id``: a second submission with the same id returns the
    first plan (``created`` False) when its spec is identical, and raises
    :class:`Conflict` when it differs. Refuses with :class:`CapacityExceeded`
    when ``max_active`` plans are already running — also when submissions race:
    the count and the insert are serialised by a database lock, so concurrent
    submissions from many processes never exceed the limit.
    """
    if task_id is not None:
        existing = _by_task_id(db, task_id)
        if existing is not None:
            return _same_spec_or_conflict(existing, spec, task_id), False
    plan_id = str(uuid.uuid4())
    try:
        with db.transaction() as s:
            if db.dialect == "postgresql":  # count and insert as one step across processes
                s.execute(select(func.pg_advisory_xact_lock(_CAPACITY_LOCK)))
            active = s.scalar(select(func.count()).select_from(Plan).where(Plan.status == "running")) or 0
            if active >= max_active:
                raise CapacityExceeded(
                    f"{active} plans are active, the limit is {max_active} (CONCLAVE_MAX_ACTIVE_PLANS)"
                )
            now = utcnow()
            s.add(Plan(id=plan_id, task_id=task_id, title=title, kind=kind, spec=spec,
                       status="running", created_at=now, updated_at=now))
            s.flush()
            for p in phases:
                s.add(_phase_row(plan_id, p, now))
            n_chunks = add_briefing(s, plan_id, briefing)
            s.add(Event(plan_id=plan_id, type="plan_submitted",
                        data={"title": title, "kind": kind, "phases": len(phases),
                              **({"documents": len(briefing), "chunks": n_chunks} if briefing else {})}))
    except Conflict:
        if task_id is not None:  # lost a race with an identical submission
            existing = _by_task_id(db, task_id)
            if existing is not None:
                return _same_spec_or_conflict(existing, spec, task_id), False
        raise
    return plan_id, True


def _phase_row(plan_id: str, p: NewPhase, now: datetime) -> Phase:
    return Phase(id=str(uuid.uuid4()), plan_id=plan_id, key=p.key, kind=p.kind, expert=p.expert,
                 round=p.round, group_key=p.group_key, position=p.position, depends_on=list(p.depends_on),
                 meta=dict(p.meta), status="pending", attempt=0, created_at=now)


def _by_task_id(db: Database, task_id: str) -> PlanRecord | None:
    with db.transaction() as s:
        row = s.scalar(select(Plan).where(Plan.task_id == task_id))
        return snapshot(PlanRecord, row) if row else None


def _same_spec_or_conflict(existing: PlanRecord, spec: dict[str, Any], task_id: str) -> str:
    if existing.spec != spec:
        raise Conflict(f"task_id {task_id!r} was already submitted with a different plan ({existing.id})")
    return existing.id


def resolve(db: Database, ref: str) -> str:
    """A plan id from a plan id or the external task id it was submitted with."""
    with db.transaction() as s:
        found = s.scalar(select(Plan.id).where(or_(Plan.id == ref, Plan.task_id == ref)))
    if found is None:
        raise NotFound(f"no plan with id or task_id {ref!r}")
    return found


def get_plan(db: Database, plan_id: str) -> PlanRecord:
    with db.transaction() as s:
        row = s.get(Plan, plan_id)
        if row is None:
            raise NotFound(f"no plan {plan_id!r}")
        return snapshot(PlanRecord, row)


def load_state(db: Database, plan_id: str) -> PlanState:
    """The plan and all its phases in one consistent read."""
    with db.transaction() as s:
        state = _state(s, plan_id)
    if state is None:
        raise NotFound(f"no plan {plan_id!r}")
    return state


def state_of_phase(db: Database, phase_id: str) -> PlanState | None:
    """The state of the plan a phase belongs to (None for an unknown phase), in one read."""
    with db.transaction() as s:
        plan_id = s.scalar(select(Phase.plan_id).where(Phase.id == phase_id))
        return None if plan_id is None else _state(s, plan_id)


def _state(s: Any, plan_id: str) -> PlanState | None:
    row = s.get(Plan, plan_id)
    if row is None:
        return None
    phases = s.scalars(select(Phase).where(Phase.plan_id == plan_id).order_by(Phase.position)).all()
    return PlanState(snapshot(PlanRecord, row), [snapshot(PhaseRecord, p) for p in phases])


def request_cancel(db: Database, plan_id: str) -> list[str]:
    """Set the stored cancel flag and cancel every pending phase. Returns their keys.

    Running phases notice the flag at their next safe point (heartbeat, completion).
    """
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=True)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        if plan.status in PLAN_FINAL:
            return []
        now = utcnow()
        plan.cancel_requested = True
        plan.updated_at = now
        keys = list(s.scalars(select(Phase.key).where(Phase.plan_id == plan_id, Phase.status == "pending")))
        s.execute(update(Phase).where(Phase.plan_id == plan_id, Phase.status == "pending")
                  .values(status="cancelled", finished_at=now, enqueued_at=None))
        s.add(Event(plan_id=plan_id, type="cancel_requested", data={"cancelled": keys}))
        return keys


def acquire_resume_guard(db: Database, plan_id: str, owner: str, hold: timedelta) -> None:
    """Take the plan's resume guard for ``hold``, or raise :class:`Busy`.

    A conditional UPDATE in the database, so it holds across API processes.
    """
    now = utcnow()
    with db.transaction() as s:
        res = s.execute(
            update(Plan)
            .where(Plan.id == plan_id, or_(Plan.resume_until.is_(None), Plan.resume_until < now))
            .values(resume_owner=owner, resume_until=now + hold)
        )
        if res.rowcount == 1:  # type: ignore[attr-defined]
            return
        exists = s.scalar(select(Plan.resume_until).where(Plan.id == plan_id))
    if exists is None:
        raise NotFound(f"no plan {plan_id!r}")
    raise Busy(f"resume already in progress for plan {plan_id} (guard held until {exists.isoformat()})")


def reopen(db: Database, plan_id: str, *, retry_failed: bool) -> list[str]:
    """Prepare a plan for resume; with ``retry_failed``, failed phases (and the phases
    skipped because of them) go back to pending and the retry is recorded on each.

    Only a plan that is running or ended failed / budget_exhausted is reopened: a
    completed or cancelled plan is final for good, and its phases are left alone
    (never a pending phase under a final plan). Returns the keys reset."""
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=True)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        reset: list[str] = []
        reopenable = plan.status in ("running", "failed", "budget_exhausted") and not plan.cancel_requested
        if retry_failed and reopenable:
            rows = s.scalars(select(Phase).where(Phase.plan_id == plan_id,
                                                 Phase.status.in_(("failed", "skipped")))).all()
            for ph in rows:
                if ph.status == "failed":
                    ph.retries_requested += 1
                ph.status, ph.error_code, ph.error_message = "pending", None, None
                ph.finished_at = ph.enqueued_at = None
                reset.append(ph.key)
            if reset:
                s.add(Event(plan_id=plan_id, type="retry_requested", data={"phases": reset}))
        if plan.status in ("failed", "budget_exhausted") and reset:
            plan.status, plan.error_code, plan.error_message, plan.finished_at = "running", None, None, None
        plan.updated_at = utcnow()
        return reset


def finish_plan(db: Database, plan_id: str, status: str, *, error_code: str | None = None,
                error_message: str | None = None) -> bool:
    """Move a running plan to a final status once. Returns whether this call did it."""
    now = utcnow()
    with db.transaction() as s:
        res = s.execute(update(Plan).where(Plan.id == plan_id, Plan.status == "running")
                        .values(status=status, error_code=error_code, error_message=error_message,
                                finished_at=now, updated_at=now))
        if res.rowcount != 1:  # type: ignore[attr-defined]
            return False
        s.add(Event(plan_id=plan_id, type="plan_finished",
                    data={"status": status, "error_code": error_code, "error": error_message}))
        return True


def running_plan_ids(db: Database, *, limit: int = 500) -> list[str]:
    with db.transaction() as s:
        return list(s.scalars(select(Plan.id).where(Plan.status == "running")
                              .order_by(Plan.updated_at).limit(limit)))


def stalled_plan_ids(db: Database, *, now: datetime, requeue_after: timedelta, limit: int = 500) -> list[str]:
    """Running plans that stopped moving: a phase whose lease expired, a phase enqueued
    long ago and never claimed (its message was lost), or no stored progress at all
    for ``requeue_after`` (a lost chord body). The reconciler re-derives their canvas."""
    cutoff = now - requeue_after
    with db.transaction() as s:
        expired = select(Phase.plan_id).where(Phase.status == "running", Phase.lease_expires_at < now)
        lost = select(Phase.plan_id).where(Phase.status == "pending", Phase.enqueued_at < cutoff)
        q = (select(Plan.id).where(Plan.status == "running")
             .where(or_(Plan.id.in_(expired), Plan.id.in_(lost), Plan.updated_at < cutoff))
             .order_by(Plan.updated_at).limit(limit))
        return list(s.scalars(q))
