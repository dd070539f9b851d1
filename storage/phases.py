"""The phase aggregate: claim with a lease, renew, complete fenced by attempt, fail, skip.

Claim + fence make results exactly-once on an at-least-once queue: a claim is a
conditional UPDATE that hands out a new attempt number and commits before the
model is called; the completing UPDATE matches that attempt, so a stale
duplicate can never overwrite a newer attempt's result.

The hot path (claim, completion, lease renewal) costs a fixed number of statements
whatever the plan's size: its SQL is :mod:`storage.sql`, one statement per operation
on Postgres.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update

from storage import event_shapes, fairshare
from storage.db import Database
from storage.event_shapes import NewEvent
from storage.models import Phase, Plan, utcnow
from storage.read_models import EventRecord, NewPhase
from storage.sql.base import Claimed, PlanLock, Result, plan_first
from storage.status import Outcome, PhaseStatus

__all__ = ["Claimed", "Finished", "Insertion", "claim_phase", "complete_phase", "fail_phase", "mark_enqueued",
           "release_enqueued", "release_phase", "release_waiting", "renew_leases", "skip_phases"]


def claim_phase(db: Database, phase_id: str, *, owner: str, lease: timedelta) -> Claimed | None:
    """Take a phase that is pending, or running with an expired lease, whose direct
    dependencies are complete, in a running plan that is not cancelled; store its
    ``phase_started`` event (with progress k/n as the claim saw it) and read its inputs
    with their full texts — one statement on Postgres.

    Returns None when the claim was refused (nothing written): the phase is final,
    leased by someone alive, not ready, or its plan is final or cancelled — the caller
    then acknowledges its message (see :func:`release_waiting`).
    """
    now = utcnow()
    if db.sql.folds:
        with db.statement() as conn:
            return db.sql.claim(conn, phase_id, owner=owner, now=now, lease=lease)
    with db.transaction() as s:
        return db.sql.claim(s, phase_id, owner=owner, now=now, lease=lease)


def release_waiting(db: Database, phase_id: str) -> bool:
    """After a refused claim: if the phase is pending and its inputs are not all done
    (the message arrived early), clear its enqueue mark so the next advance or the
    reconciler sends it again. True when that was the case."""
    with db.statement() as conn:
        return db.sql.release_waiting(conn, phase_id)


def release_phase(db: Database, phase_id: str, attempt: int) -> bool:
    """Give a running phase back (its worker is shutting down): its lease ends now and its
    enqueue mark is cleared, so the reconciler sends it to another worker at once — the
    same path as a worker that died, without waiting for the lease to run out. Fenced by
    the attempt; refused (False) when the plan was cancelled — the caller then fails the
    phase, which ends it cancelled."""
    now = utcnow()
    live_plan = plan_first(Plan.cancel_requested.is_(False))
    with db.transaction() as s:
        released = s.execute(update(Phase)
                             .where(Phase.id == phase_id, Phase.attempt == attempt,
                                    Phase.status == PhaseStatus.RUNNING, live_plan)
                             .values(lease_expires_at=now, enqueued_at=None)
                             .returning(Phase.id).execution_options(synchronize_session=False)).first()
    return released is not None


def renew_leases(db: Database, held: Sequence[tuple[str, int]], lease: timedelta) -> dict[str, bool]:
    """Heartbeat for every phase this worker runs, in one statement.

    Returns ``{phase_id: keep_going}``: False when the lease was lost (another
    attempt took over) or the plan was cancelled — the caller stops its model call.
    """
    if not held:
        return {}
    with db.statement() as conn:
        return db.sql.renew(conn, held, utcnow() + lease)


def mark_enqueued(db: Database, phase_ids: Sequence[str], *, stale_before: datetime | None) -> list[str]:
    """Mark phases as enqueued, skipping those enqueued after ``stale_before``
    (None: mark regardless). Returns the ids marked: only those are sent, so two
    concurrent advances never both send the same phase."""
    if not phase_ids:
        return []
    now = utcnow()
    q = update(Phase).where(Phase.id.in_(list(phase_ids)),
                            Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.RUNNING)), plan_first())
    if stale_before is not None:
        q = q.where(or_(Phase.enqueued_at.is_(None), Phase.enqueued_at < stale_before))
    with db.transaction() as s:
        marked = set(s.scalars(q.values(enqueued_at=now).returning(Phase.id)
                               .execution_options(synchronize_session=False)))
        if marked:
            s.execute(update(Plan).where(Plan.id == select(Phase.plan_id).where(Phase.id == next(iter(marked)))
                                         .scalar_subquery()).values(updated_at=now))
    return [pid for pid in phase_ids if pid in marked]


def release_enqueued(db: Database, phase_ids: Sequence[str]) -> None:
    """Clear the enqueue marks of phases whose canvas could not be sent."""
    if not phase_ids:
        return
    with db.transaction() as s:
        s.execute(update(Phase).where(Phase.id.in_(list(phase_ids)),
                                      Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.RUNNING)), plan_first())
                  .values(enqueued_at=None).execution_options(synchronize_session=False))


@dataclass(frozen=True)
class Insertion:
    """Phases to insert while completing another (a debate), and the phase whose pending
    dependents must now also wait for them. Positions are relative: the inserted phases
    go after every stored phase. At most the plan's ``max_debates`` groups are stored."""

    phases: Sequence[NewPhase]
    rewire: str  # pending phases that depend on this key also wait for the new phases
    event: NewEvent  # appended when the phases are inserted


@dataclass(frozen=True)
class EarlyStop:
    """Rounds a board skips because its panel agreed: the pending phases named in ``skip``
    end ``skipped`` (code ``plan.early_stop``, the reason, and each one's estimated tokens in
    ``meta.tokens_saved``), and a pending phase that depended on one of them depends on
    ``resume_from`` instead — so the decision and the chair run right after it."""

    skip: Sequence[str]
    resume_from: str
    reason: str
    tokens_per_phase: int
    event: NewEvent


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
    released: tuple[str, ...] = ()  # fair share: plans whose held phase this finish released (advance them)


class _Fenced(Exception):
    """Raised inside a finishing transaction to roll it back."""


def complete_phase(
    db: Database,
    *,
    plan_id: str,
    phase_id: str,
    attempt: int,
    text: str,
    summary: str,
    truncated: bool,
    fallback: bool,
    offloaded: bool,
    insertion: Insertion | None = None,
    verdict: dict[str, Any] | None = None,
    events: Sequence[NewEvent] = (),
    early_stop: EarlyStop | None = None,
    sent_hash: str | None = None,
    share: fairshare.Policy | None = None,
) -> Finished:
    """Finish a phase with its result, in one transaction, in the order DESIGN.md gives:
    lock the plan row → cancel flag → content → fenced status update → outbox event.
    The lease is cleared with the status. On Postgres, content + status + event are one
    statement after the lock (atomic: the content row exists iff the fenced update matched).

    Returns its outcome: completed, cancelled (the plan was cancelled while the model
    ran) or fenced (another attempt owns the phase; nothing was written), with the
    plan's progress, which the event carries too, and the events it stored.
    ``insertion`` is applied only while fewer than the plan's ``max_debates`` groups of
    that kind are stored (read under the plan's lock). ``verdict`` is stored with the status;
    ``events`` (a decision's ``decision_recorded``) are appended before ``phase_completed``;
    ``early_stop`` skips later rounds in the same transaction (:class:`EarlyStop`); ``sent_hash``
    (what the phase was sent: ``orchestrator.plan.fingerprint``) is stored with the status.
    With ``share`` (fair share is on) the free slots (the one it frees at least) go to held
    phases in the same transaction (:func:`storage.fairshare.release`).

    Idempotent for its own attempt: when a previous call committed but its
    caller never heard back (the connection dropped after COMMIT) and retries,
    the stored outcome of this attempt is returned and nothing is written again.
    """
    now = utcnow()
    result = Result(phase_id=phase_id, attempt=attempt, content_id=str(uuid.uuid4()), text=text, summary=summary,
                    truncated=truncated, fallback=fallback, offloaded=offloaded, verdict=verdict, sent_hash=sent_hash)
    try:
        with db.transaction() as s:
            plan = db.sql.lock_plan(s, plan_id, now)
            if plan is None:
                raise _Fenced
            if plan.cancel_requested:
                return _released(db, s, share, plan, now, _cancel(db, s, plan_id, phase_id, attempt, now))
            if insertion is None and not events and early_stop is None:
                done = db.sql.complete(s, plan_id, result, now)
                if done is None:
                    raise _Fenced
                event, k, n = done
                return _released(db, s, share, plan, now, Finished(Outcome.COMPLETED, k, n, (event,)))
            about = db.sql.store_result(s, plan_id, result, now)
            if about is None:
                raise _Fenced
            inserted = _insert(db, s, plan_id, insertion, plan, now) if insertion is not None else ()
            inserted += tuple(db.sql.append(s, plan_id, e, now) for e in events)
            if early_stop is not None:
                inserted += _stop_early(db, s, plan_id, early_stop, now)
            k, n = db.sql.progress(s, plan_id)
            event = db.sql.append(s, plan_id, event_shapes.phase_completed(
                about, attempt=attempt, chars=len(text), truncated=truncated, fallback=fallback,
                offloaded=offloaded, summary=summary, k=k, n=n), now)
            return _released(db, s, share, plan, now, Finished(Outcome.COMPLETED, k, n, (*inserted, event)))
    except _Fenced:
        return _stored_outcome(db, plan_id, phase_id, attempt)


def _released(db: Database, s: Any, share: fairshare.Policy | None, plan: PlanLock, now: datetime,
              done: Finished) -> Finished:
    """Under fair share, the slot a finishing phase frees goes to a held phase, in its transaction.
    No statement when the plan's lock saw nothing held (its ``held``): a hold that commits after
    that waits for the next finish or sweep."""
    if share is None or not plan.held:
        return done
    return dataclasses.replace(done, released=tuple(fairshare.release(s, db.dialect, share, now)))


def _cancel(db: Database, s: Any, plan_id: str, phase_id: str, attempt: int, now: datetime) -> Finished:
    about = s.execute(db.sql.finish_update(plan_id, phase_id, attempt, status=PhaseStatus.CANCELLED, finished_at=now)
                      .returning(Phase.key, Phase.expert, Phase.kind, Phase.round)).first()
    if about is None:
        raise _Fenced
    k, n = db.sql.progress(s, plan_id)
    event = db.sql.append(s, plan_id, event_shapes.phase_cancelled(
        about, attempt=attempt, k=k, n=n, reason="plan cancelled while the model ran"), now)
    return Finished(Outcome.CANCELLED, k, n, (event,))


def _stored_outcome(db: Database, plan_id: str, phase_id: str, attempt: int) -> Finished:
    """A finishing write matched nothing: this attempt's own earlier completion (committed,
    unheard) is reported as stored; anything else is fenced."""
    with db.transaction() as s:
        row = s.execute(select(Phase.status, Phase.attempt).where(Phase.id == phase_id,
                                                                  Phase.plan_id == plan_id)).first()
        if row is not None and row.attempt == attempt and row.status in (PhaseStatus.COMPLETED,
                                                                         PhaseStatus.CANCELLED):
            return Finished(Outcome(row.status), *db.sql.progress(s, plan_id))
    return Finished(Outcome.FENCED)


EARLY_STOP = "plan.early_stop"  # the error code of a phase an early stop skipped (views read it)


def _stop_early(db: Database, s: Any, plan_id: str, stop: EarlyStop, now: datetime) -> tuple[EventRecord, ...]:
    """Skip the rounds an agreement made unnecessary, and rewire what waited for them (under
    the plan's lock, in the completing transaction). Off the hot path: a round agreed."""
    pending = s.scalars(select(Phase).where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.PENDING)).all()
    skip = set(stop.skip)
    skipped = [row for row in pending if row.key in skip]
    if not skipped:
        return ()
    for row in skipped:
        row.status, row.finished_at, row.enqueued_at = PhaseStatus.SKIPPED, now, None
        row.error_code, row.error_message = EARLY_STOP, stop.reason
        row.meta = {**row.meta, "tokens_saved": stop.tokens_per_phase}
    for row in pending:
        if row.key not in skip and any(d in skip for d in row.depends_on):
            kept = [d for d in row.depends_on if d not in skip]
            row.depends_on = kept if stop.resume_from in kept else [*kept, stop.resume_from]
    s.flush()
    return (db.sql.append(s, plan_id, stop.event, now),)


def _insert(db: Database, s: Any, plan_id: str, ins: Insertion, plan: PlanLock,
            now: datetime) -> tuple[EventRecord, ...]:
    """Insert the phases (within the plan's limit) and rewire the pending phases that
    waited for ``ins.rewire``: their dependencies gain the new phases, and every phase
    downstream of it gains them as transitive inputs. Off the hot path: a check diverged."""
    if not ins.phases:
        return ()
    kind = ins.phases[0].kind
    groups = s.scalar(select(func.count(func.distinct(Phase.group_key)))
                      .where(Phase.plan_id == plan_id, Phase.kind == kind)) or 0
    if groups >= plan.max_debates:
        return (db.sql.append(s, plan_id, event_shapes.limit_reached(kind, limit=plan.max_debates, existing=groups),
                              now),)
    start = (s.scalar(select(func.max(Phase.position)).where(Phase.plan_id == plan_id)) or 0) + 1
    new_keys = [p.key for p in ins.phases]
    for p in ins.phases:
        s.add(Phase(id=str(uuid.uuid4()), plan_id=plan_id, key=p.key, kind=p.kind, expert=p.expert,
                    round=p.round, group_key=p.group_key, position=start + p.position,
                    depends_on=list(p.depends_on), inputs=list(p.inputs), meta=dict(p.meta),
                    status=PhaseStatus.PENDING, attempt=0, created_at=now))
    waiting = s.scalars(select(Phase).where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.PENDING,
                                            Phase.key.not_in(new_keys))).all()
    for row in waiting:
        if ins.rewire in row.depends_on:
            row.depends_on = [*row.depends_on, *[k for k in new_keys if k not in row.depends_on]]
        if ins.rewire in row.inputs:
            row.inputs = [*row.inputs, *[k for k in new_keys if k not in row.inputs]]
    s.flush()
    return (db.sql.append(s, plan_id, ins.event, now),)


def fail_phase(db: Database, *, plan_id: str, phase_id: str, attempt: int, code: str, message: str,
               share: fairshare.Policy | None = None) -> Finished:
    """Fail a phase, fenced by attempt. A cancelled plan's phase ends cancelled instead. With
    ``share``, the free slots go to held phases in the same transaction."""
    now = utcnow()
    try:
        with db.transaction() as s:
            plan = db.sql.lock_plan(s, plan_id, now)
            if plan is None:
                raise _Fenced
            status = PhaseStatus.CANCELLED if plan.cancel_requested else PhaseStatus.FAILED
            about = s.execute(db.sql.finish_update(plan_id, phase_id, attempt, status=status, finished_at=now,
                                                   error_code=code, error_message=message[:2000])
                              .returning(Phase.key, Phase.expert, Phase.kind, Phase.round)).first()
            if about is None:
                raise _Fenced
            k, n = db.sql.progress(s, plan_id)
            if status == PhaseStatus.CANCELLED:
                event = event_shapes.phase_cancelled(about, attempt=attempt, reason="plan cancelled", k=k, n=n,
                                                 error_code=code, error=message)
            else:
                event = event_shapes.phase_failed(about, attempt=attempt, error_code=code, error=message, k=k, n=n)
            return _released(db, s, share, plan, now, Finished(Outcome(status), k, n,
                                                         (db.sql.append(s, plan_id, event, now),)))
    except _Fenced:
        return Finished(Outcome.FENCED)


def skip_phases(db: Database, plan_id: str, skips: Mapping[str, Sequence[str]]) -> tuple[EventRecord, ...]:
    """Skip pending phases (and people's seats still waiting) that can never run now
    (``{reason: keys}``), under the plan's
    lock (so progress counted by concurrent completions stays exact). Returns the events
    it stored, one per reason that skipped something: an event names only the phases it
    skipped (a key given that was no longer pending — run meanwhile, or skipped already — is
    left out)."""
    skips = {reason: keys for reason, keys in skips.items() if keys}
    if not skips:
        return ()
    now = utcnow()
    with db.transaction() as s:
        db.sql.lock_plan(s, plan_id, now)
        stored = []
        for reason, keys in skips.items():
            skipped = set(s.scalars(
                update(Phase).where(Phase.plan_id == plan_id, Phase.key.in_(list(keys)),
                                    Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.AWAITING_INPUT)))
                .values(status=PhaseStatus.SKIPPED, finished_at=now, error_message=reason, enqueued_at=None)
                .returning(Phase.key).execution_options(synchronize_session=False)))
            if skipped:
                stored.append(db.sql.append(s, plan_id, event_shapes.phases_skipped(
                    [k for k in keys if k in skipped], reason), now))
        return tuple(stored)
