"""The phase aggregate: claim with a lease, renew, complete fenced by attempt, fail, skip.

Claim + fence make results exactly-once on an at-least-once queue: a claim is a
conditional UPDATE that hands out a new attempt number and commits before the
model is called; the completing UPDATE matches that attempt, so a stale
duplicate can never overwrite a newer attempt's result.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, or_, select, update

from storage import payloads
from storage.db import Database
from storage.events import Outbox
from storage.models import Content, Phase, Plan, UsageRow, utcnow
from storage.payloads import NewEvent
from storage.records import EventRecord, NewPhase, PhaseRecord, snapshot
from storage.status import PHASE_FINAL, Outcome, PhaseStatus


@dataclass(frozen=True)
class Claim:
    phase: PhaseRecord  # as it is after the claim (status running, the new attempt)
    attempt: int
    event: EventRecord  # phase_started, as stored


def claim_phase(db: Database, phase_id: str, *, owner: str, lease: timedelta,
                progress: tuple[int, int]) -> Claim | None:
    """Take a phase that is pending, or running with an expired lease.

    Returns None when the phase is final, leased by someone alive, or its plan is
    cancelled — the caller then acknowledges its message and does nothing.
    ``progress`` is (k, n): phases final and in all, as the caller read them before
    claiming; the ``phase_started`` event carries it.
    """
    now = utcnow()
    with db.transaction() as s:
        cancelled = select(Plan.id).where(Plan.cancel_requested.is_(True))
        res = s.execute(
            update(Phase)
            .where(Phase.id == phase_id, Phase.plan_id.not_in(cancelled))
            .where(or_(Phase.status == PhaseStatus.PENDING,
                       (Phase.status == PhaseStatus.RUNNING) & (Phase.lease_expires_at < now)))
            .values(status=PhaseStatus.RUNNING, attempt=Phase.attempt + 1, lease_owner=owner,
                    lease_expires_at=now + lease, started_at=now, enqueued_at=None)
            .returning(Phase.attempt)
        )
        attempt = res.scalar()
        if attempt is None:
            return None
        row = s.get(Phase, phase_id)
        assert row is not None
        outbox = Outbox(s, row.plan_id)
        k, n = progress
        outbox.append(payloads.phase_started(row, attempt=attempt, worker=owner, k=k, n=n))
        return Claim(snapshot(PhaseRecord, row), attempt, outbox.records()[0])


def renew_leases(db: Database, held: Sequence[tuple[str, int]], lease: timedelta) -> dict[str, bool]:
    """Heartbeat for every phase this worker runs, in one transaction.

    Returns ``{phase_id: keep_going}``: False when the lease was lost (another
    attempt took over) or the plan was cancelled — the caller stops its model call.
    """
    if not held:
        return {}
    now = utcnow()
    out: dict[str, bool] = {}
    with db.transaction() as s:
        for phase_id, attempt in held:
            res = s.execute(update(Phase).where(Phase.id == phase_id, Phase.attempt == attempt,
                                                Phase.status == PhaseStatus.RUNNING)
                            .values(lease_expires_at=now + lease))
            out[phase_id] = res.rowcount == 1  # type: ignore[attr-defined]
        ids = [pid for pid, ok in out.items() if ok]
        if ids:
            cancelled = s.scalars(select(Phase.id).join(Plan, Plan.id == Phase.plan_id)
                                  .where(Phase.id.in_(ids), Plan.cancel_requested.is_(True)))
            for pid in cancelled:
                out[pid] = False
    return out


def mark_enqueued(db: Database, phase_ids: Sequence[str], *, stale_before: datetime | None) -> list[str]:
    """Mark phases as enqueued, skipping those enqueued after ``stale_before``
    (None: mark regardless). Returns the ids marked: only those are sent, so two
    concurrent advances never both send the same phase."""
    if not phase_ids:
        return []
    now = utcnow()
    marked: list[str] = []
    with db.transaction() as s:
        for pid in phase_ids:
            q = update(Phase).where(Phase.id == pid, Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.RUNNING)))
            if stale_before is not None:
                q = q.where(or_(Phase.enqueued_at.is_(None), Phase.enqueued_at < stale_before))
            if s.execute(q.values(enqueued_at=now)).rowcount == 1:  # type: ignore[attr-defined]
                marked.append(pid)
        if marked:
            plan_id = s.scalar(select(Phase.plan_id).where(Phase.id == marked[0]))
            s.execute(update(Plan).where(Plan.id == plan_id).values(updated_at=now))
    return marked


def release_enqueued(db: Database, phase_id: str) -> None:
    """A message arrived before its phase was ready: let the next advance send it again."""
    with db.transaction() as s:
        s.execute(update(Phase).where(Phase.id == phase_id, Phase.status == PhaseStatus.PENDING)
                  .values(enqueued_at=None))


@dataclass(frozen=True)
class Insertion:
    """Phases to insert while completing another (a debate), and the existing
    phases that must now also wait for them."""

    phases: Sequence[NewPhase]
    extra_deps: Mapping[str, Sequence[str]]  # existing phase key -> keys it must also wait for
    event: NewEvent  # appended when the phases are inserted


@dataclass(frozen=True)
class Finished:
    """How a completing or failing write ended, and the plan's progress right after it:
    ``k`` of ``n`` phases final (``n`` grows when a debate is inserted). Counted inside
    the transaction, under the plan's row lock, so concurrent phases never report the
    same ``k``."""

    status: Outcome
    k: int = 0
    n: int = 0
    events: tuple[EventRecord, ...] = ()  # what this call stored, to publish after commit


def _progress(s: Any, plan_id: str) -> tuple[int, int]:
    final = func.sum(case((Phase.status.in_(PHASE_FINAL), 1), else_=0))
    n, k = s.execute(select(func.count(), final).where(Phase.plan_id == plan_id)).one()
    return int(k or 0), int(n or 0)


def _lock(s: Any, phase_id: str) -> tuple[Plan, Phase] | None:
    """Lock a phase's plan row, then the phase row — the one lock order every write that
    finishes a phase uses, so they serialise per plan and never deadlock."""
    plan_id = s.scalar(select(Phase.plan_id).where(Phase.id == phase_id))
    if plan_id is None:
        return None
    plan = s.get(Plan, plan_id, with_for_update=True)
    row = s.get(Phase, phase_id, with_for_update=True)
    return None if plan is None or row is None else (plan, row)


def complete_phase(
    db: Database,
    *,
    phase_id: str,
    attempt: int,
    text: str,
    summary: str,
    truncated: bool,
    fallback: bool,
    offloaded: bool,
    insertion: Insertion | None = None,
    max_groups: int | None = None,
) -> Finished:
    """Finish a phase with its result, in one transaction, in the order DESIGN.md gives:
    cancel flag → content → fenced status update (+ usage marked as the phase's cost)
    → outbox event. The lease is cleared in the same transaction as the result.

    Returns its outcome: completed, cancelled (the plan was cancelled while the model
    ran) or fenced (another attempt owns the phase; nothing was written), with the
    plan's progress, which the event carries too, and the events it stored.
    ``insertion`` is applied only when fewer than ``max_groups`` groups of that kind exist.

    Idempotent for its own attempt: when a previous call committed but its
    caller never heard back (the connection dropped after COMMIT) and retries,
    the stored outcome of this attempt is returned and nothing is written again.
    """
    now = utcnow()
    try:
        with db.transaction() as s:
            locked = _lock(s, phase_id)
            if locked is None:
                return Finished(Outcome.FENCED)
            plan, row = locked
            plan_id = plan.id
            if row.attempt == attempt and row.status in (PhaseStatus.COMPLETED, PhaseStatus.CANCELLED):
                # this attempt's own completion, committed by an earlier try
                return Finished(Outcome(row.status), *_progress(s, plan_id))
            if row.attempt != attempt or row.status != PhaseStatus.RUNNING:
                return Finished(Outcome.FENCED)
            outbox = Outbox(s, plan_id)
            if plan.cancel_requested:
                row.status, row.finished_at = PhaseStatus.CANCELLED, now
                row.lease_owner = row.lease_expires_at = None
                k, n = _progress(s, plan_id)
                outbox.append(payloads.phase_cancelled(row, attempt=attempt, k=k, n=n,
                                                       reason="plan cancelled while the model ran"))
                return Finished(Outcome.CANCELLED, k, n, outbox.records())
            s.add(Content(id=str(uuid.uuid4()), plan_id=plan_id, phase_id=phase_id, attempt=attempt,
                          text=text, chars=len(text), created_at=now))
            s.flush()
            res = s.execute(update(Phase).where(Phase.id == phase_id, Phase.attempt == attempt,
                                                Phase.status == PhaseStatus.RUNNING)
                            .values(status=PhaseStatus.COMPLETED, summary=summary, truncated=truncated,
                                    finished_at=now, lease_owner=None, lease_expires_at=None,
                                    error_code=None, error_message=None)
                            .execution_options(synchronize_session=False))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                raise _Fenced
            s.execute(update(UsageRow).where(UsageRow.phase_id == phase_id, UsageRow.attempt == attempt)
                      .values(counted=True))
            plan.updated_at = now
            if insertion is not None:
                _insert(s, outbox, plan_id, insertion, max_groups)
            k, n = _progress(s, plan_id)
            outbox.append(payloads.phase_completed(row, attempt=attempt, chars=len(text), truncated=truncated,
                                                   fallback=fallback, offloaded=offloaded, summary=summary,
                                                   k=k, n=n))
            return Finished(Outcome.COMPLETED, k, n, outbox.records())
    except _Fenced:
        return Finished(Outcome.FENCED)


class _Fenced(Exception):
    """Raised inside the completing transaction to roll it back."""


def _insert(s: Any, outbox: Outbox, plan_id: str, ins: Insertion, max_groups: int | None) -> None:
    if not ins.phases:
        return
    kind = ins.phases[0].kind
    if max_groups is not None:
        groups = s.scalar(select(func.count(func.distinct(Phase.group_key)))
                          .where(Phase.plan_id == plan_id, Phase.kind == kind)) or 0
        if groups >= max_groups:
            outbox.append(payloads.limit_reached(kind, limit=max_groups, existing=groups))
            return
    now = utcnow()
    for p in ins.phases:
        s.add(Phase(id=str(uuid.uuid4()), plan_id=plan_id, key=p.key, kind=p.kind, expert=p.expert,
                    round=p.round, group_key=p.group_key, position=p.position,
                    depends_on=list(p.depends_on), meta=dict(p.meta), status=PhaseStatus.PENDING, attempt=0,
                    created_at=now))
    for key, extra in ins.extra_deps.items():
        target = s.scalar(select(Phase).where(Phase.plan_id == plan_id, Phase.key == key))
        if target is not None and target.status == PhaseStatus.PENDING:
            target.depends_on = [*target.depends_on, *[k for k in extra if k not in target.depends_on]]
    outbox.append(ins.event)


def fail_phase(db: Database, *, phase_id: str, attempt: int, code: str, message: str) -> Finished:
    """Fail a phase, fenced by attempt. A cancelled plan's phase ends cancelled instead."""
    now = utcnow()
    with db.transaction() as s:
        locked = _lock(s, phase_id)
        if locked is None:
            return Finished(Outcome.FENCED)
        plan, row = locked
        plan_id = plan.id
        if row.attempt != attempt or row.status != PhaseStatus.RUNNING:
            return Finished(Outcome.FENCED)
        status = PhaseStatus.CANCELLED if plan.cancel_requested else PhaseStatus.FAILED
        row.status, row.finished_at = status, now
        row.error_code, row.error_message = code, message[:2000]
        row.lease_owner = row.lease_expires_at = None
        plan.updated_at = now
        k, n = _progress(s, plan_id)
        outbox = Outbox(s, plan_id)
        if status == PhaseStatus.CANCELLED:
            outbox.append(payloads.phase_cancelled(row, attempt=attempt, reason="plan cancelled", k=k, n=n,
                                                   error_code=code, error=message))
        else:
            outbox.append(payloads.phase_failed(row, attempt=attempt, error_code=code, error=message, k=k, n=n))
        return Finished(Outcome(status), k, n, outbox.records())


def skip_phases(db: Database, plan_id: str, keys: Sequence[str], reason: str) -> tuple[EventRecord, ...]:
    """Skip pending phases that can never run. Returns the event it stored."""
    if not keys:
        return ()
    now = utcnow()
    with db.transaction() as s:
        s.execute(update(Phase).where(Phase.plan_id == plan_id, Phase.key.in_(keys),
                                      Phase.status == PhaseStatus.PENDING)
                  .values(status=PhaseStatus.SKIPPED, finished_at=now, error_message=reason, enqueued_at=None))
        outbox = Outbox(s, plan_id)
        outbox.append(payloads.phases_skipped(keys, reason))
        return outbox.records()

