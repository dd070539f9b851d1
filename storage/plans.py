"""The plan aggregate: creation, lookup, cancellation, the resume guard, finishing."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update

from storage import event_shapes, tenancy
from storage.briefings import add_briefing
from storage.db import Database
from storage.event_shapes import NewEvent
from storage.exceptions import Ambiguous, Busy, Conflict, NotFound
from storage.identity import DEFAULT_TENANT, Principal
from storage.ids import MIN_PREFIX, as_id_prefix, as_plan_id, is_short_prefix, new_plan_id
from storage.models import Content, Phase, Plan, utcnow
from storage.outbox import Outbox
from storage.phases import EARLY_STOP
from storage.read_models import EventRecord, NewDocument, NewPhase, PhaseRecord, PlanRecord, snapshot
from storage.sql.base import PLAN_LOCK
from storage.status import PLAN_FINAL, PhaseStatus, PlanStatus

_REOPENABLE = (PlanStatus.RUNNING, PlanStatus.FAILED, PlanStatus.BUDGET_EXHAUSTED)

@dataclass(frozen=True)
class Created:
    """What :func:`create_plan` did: the plan's id, whether this call stored it, and
    the events it stored (none when the plan already existed)."""

    plan_id: str
    created: bool
    events: tuple[EventRecord, ...] = ()


@dataclass(frozen=True)
class Reused:
    """A phase a fork copies from its source as completed: the source's content, shared by
    reference (no new content row), its verdict and summary, and the hash of what it was sent
    (equal, by the fork's selection, to what the fork's phase would be sent)."""

    content_id: str
    sent_hash: str
    summary: str | None
    truncated: bool
    verdict: dict[str, Any] | None


@dataclass(frozen=True)
class Skipped:
    """A phase a fork stores skipped, as its source's early stop skipped it (the round summary
    that stopped was copied)."""

    error_code: str
    error_message: str | None


@dataclass(frozen=True)
class Fork:
    """What makes a new plan a what-if fork of ``source`` (:func:`create_plan`): the phase it
    runs anew from, the phases it copies (:class:`Reused`) or stores skipped (:class:`Skipped`),
    and the events that tell it (``plan_forked``, and the debates and early stops its copied
    phases decided in the source, replayed)."""

    source: str
    from_phase: str
    reused: Mapping[str, Reused]
    skipped: Mapping[str, Skipped]
    events: Sequence[NewEvent] = ()


@dataclass(frozen=True)
class Cancelled:
    """What :func:`request_cancel` did: the pending phases it cancelled and the events it stored."""

    keys: list[str]
    events: tuple[EventRecord, ...] = ()


@dataclass(frozen=True)
class Reopened:
    """What :func:`reopen` reset to pending, and the events it stored."""

    keys: list[str]
    events: tuple[EventRecord, ...] = ()


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
    tenant: str = DEFAULT_TENANT,
    principal: Principal | None = None,
    submit_rate: int = 0,
    briefing: Sequence[NewDocument] = (),
    max_debates: int = 0,
    labels: Sequence[str] = (),
    monthly_usd: float | None = None,
    fork: Fork | None = None,
    priority: int = 0,
) -> Created:
    """Insert a plan, all its phases and its briefing (documents and chunks) in one
    transaction, in ``tenant``: a failure anywhere stores nothing.

    Idempotent per (tenant, ``task_id``): a second submission with the same id returns
    the first plan (``created`` False) when its spec is identical, and raises
    :class:`Conflict` when it differs. Within the tenant, refuses with
    :class:`RateLimited` after ``submit_rate`` new plans in the last minute (0: no
    limit; ``retry_after`` says when the oldest leaves the window) and with
    :class:`CapacityExceeded` when ``max_active`` plans are running — also when
    submissions race: both are derived from stored plan rows, counted and inserted
    under a per-tenant database lock; with :class:`BudgetSpent` once the tenant's
    ``monthly_usd`` (None: no budget) is spent this month. ``principal`` is recorded on the
    ``plan_submitted`` event (id and name, never a token).

    With ``fork`` the plan is a what-if fork (:class:`Fork`), admitted like any plan: its
    copied phases are stored completed, pointing at their source's contents — locked ``FOR KEY
    SHARE`` first, so retention cannot delete one under it; one already gone (the source was
    deleted meanwhile) is :class:`NotFound` and nothing is stored.
    """
    if task_id is not None:
        existing = _by_task_id(db, tenant, task_id)
        if existing is not None:
            return Created(_same_spec_or_conflict(existing, spec, task_id), False)
    plan_id = new_plan_id()
    try:
        with db.transaction() as s:
            now = tenancy.admit(s, db.dialect, tenant, max_active=max_active, submit_rate=submit_rate,
                                monthly_usd=monthly_usd)
            s.add(Plan(id=plan_id, tenant=tenant, task_id=task_id, title=title, kind=kind, spec=spec,
                       max_debates=max_debates, labels=list(labels), priority=priority,
                       status=PlanStatus.RUNNING, created_at=now, updated_at=now,
                       forked_from=fork.source if fork else None, fork_phase=fork.from_phase if fork else None))
            s.flush()
            if fork is not None:
                _hold_contents(s, fork)
            for p in phases:
                s.add(_phase_row(plan_id, p, now) if fork is None else _forked_row(plan_id, p, now, fork))
            n_chunks = add_briefing(s, plan_id, briefing)
            outbox = Outbox(s, plan_id)
            outbox.append(event_shapes.plan_submitted(title=title, kind=kind, phases=len(phases), tenant=tenant,
                                                  principal=principal.audit() if principal else None,
                                                  documents=len(briefing), chunks=n_chunks))
            for event in fork.events if fork is not None else ():
                outbox.append(event)
            stored = outbox.records()
    except Conflict:
        if task_id is not None:  # lost a race with an identical submission
            existing = _by_task_id(db, tenant, task_id)
            if existing is not None:
                return Created(_same_spec_or_conflict(existing, spec, task_id), False)
        raise
    return Created(plan_id, True, stored)


def _phase_row(plan_id: str, p: NewPhase, now: datetime) -> Phase:
    return Phase(id=str(uuid.uuid4()), plan_id=plan_id, key=p.key, kind=p.kind, expert=p.expert,
                 round=p.round, group_key=p.group_key, position=p.position, depends_on=list(p.depends_on),
                 inputs=list(p.inputs), meta=dict(p.meta), status=PhaseStatus.PENDING, attempt=0, created_at=now)


def _forked_row(plan_id: str, p: NewPhase, now: datetime, fork: Fork) -> Phase:
    """A fork's phase: copied from its source as completed (no attempt: never claimed here, and
    so no usage row), stored skipped as the source's early stop skipped it, or pending."""
    row = _phase_row(plan_id, p, now)
    reused, skipped = fork.reused.get(p.key), fork.skipped.get(p.key)
    if reused is not None:
        row.status, row.finished_at, row.reused_from = PhaseStatus.COMPLETED, now, fork.source
        row.content_id, row.sent_hash, row.verdict = reused.content_id, reused.sent_hash, reused.verdict
        row.summary, row.truncated = reused.summary, reused.truncated
    elif skipped is not None:
        row.status, row.finished_at = PhaseStatus.SKIPPED, now
        row.error_code, row.error_message = skipped.error_code, skipped.error_message
    return row


def _hold_contents(s: Any, fork: Fork) -> None:
    """Lock the contents a fork reuses against deletion until it commits (``FOR KEY SHARE``: what
    the foreign key's check would take, taken first so a vanished one is told apart), and
    refuse the fork when one is gone — its source was deleted meanwhile."""
    wanted = {r.content_id for r in fork.reused.values()}
    if not wanted:
        return
    found = set(s.scalars(select(Content.id).where(Content.id.in_(sorted(wanted)))
                          .with_for_update(key_share=True, read=True)))
    if found != wanted:
        raise NotFound(f"plan {fork.source} was deleted while the fork was made: "
                       f"{len(wanted - found)} of the contents it would reuse are gone")


def _by_task_id(db: Database, tenant: str, task_id: str) -> PlanRecord | None:
    with db.transaction() as s:
        row = s.scalar(select(Plan).where(Plan.tenant == tenant, Plan.task_id == task_id))
        return snapshot(PlanRecord, row) if row else None


def _same_spec_or_conflict(existing: PlanRecord, spec: dict[str, Any], task_id: str) -> str:
    if existing.spec != spec:
        raise Conflict(f"task_id {task_id!r} was already submitted with a different plan ({existing.id})")
    return existing.id


def resolve(db: Database, ref: str, tenant: str | None = None) -> str:
    """A plan id from a plan id, the external task id it was submitted with, or a unique
    prefix of its id.

    Deterministic: a ``ref`` shaped like a plan id (:func:`storage.ids.as_plan_id`) is
    looked up among plan ids only, anything else among task ids first and then, if no
    task id is exactly ``ref`` and it can begin a plan id (:func:`storage.ids.as_id_prefix`),
    among the ids that start with it — one must, or it is :class:`Ambiguous` naming them.
    With a ``tenant``, only that tenant's plans are found (another tenant's plan is "not
    found", and never makes a prefix ambiguous). Without one (the operator), a task id used
    in several tenants is a :class:`Conflict` naming them rather than an arbitrary pick."""
    plan_id = as_plan_id(ref)
    q = select(Plan.id, Plan.tenant).where(Plan.id == plan_id if plan_id is not None else Plan.task_id == ref)
    if tenant is not None:
        q = q.where(Plan.tenant == tenant)
    with db.transaction() as s:
        rows = s.execute(q.limit(2)).all()
    if not rows and plan_id is None and (prefix := as_id_prefix(ref)) is not None:
        return _by_prefix(db, ref, prefix, tenant)
    if not rows:
        short = plan_id is None and is_short_prefix(ref)  # "8": what a user means by it is a prefix
        raise NotFound(f"no plan with {'id' if plan_id else 'task_id'} {ref!r}"
                       + (f" (an id prefix needs at least {MIN_PREFIX} characters)" if short else ""))
    if len(rows) > 1:
        tenants = ", ".join(sorted(r[1] for r in rows))
        raise Conflict(f"task_id {ref!r} is used in several tenants ({tenants}): use the plan id")
    return str(rows[0][0])


PREFIX_CANDIDATES = 10  # at most this many ids named by an ambiguous prefix's error


def _by_prefix(db: Database, ref: str, prefix: str, tenant: str | None) -> str:
    q = select(Plan.id).where(Plan.id.like(f"{prefix}%"))  # hex digits and hyphens: nothing to escape
    q = q if tenant is None else q.where(Plan.tenant == tenant)
    with db.transaction() as s:
        ids = [str(i) for i in s.scalars(q.order_by(Plan.id).limit(PREFIX_CANDIDATES + 1))]
    if not ids:
        raise NotFound(f"no plan with id, id prefix or task_id {ref!r}")
    if len(ids) > 1:
        shown = ", ".join(ids[:PREFIX_CANDIDATES]) + (", …" if len(ids) > PREFIX_CANDIDATES else "")
        raise Ambiguous(f"id prefix {ref!r} matches {'more than ' if len(ids) > PREFIX_CANDIDATES else ''}"
                        f"{min(len(ids), PREFIX_CANDIDATES)} plans: {shown}; give more of the id",
                        ids[:PREFIX_CANDIDATES])
    return ids[0]


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


def get_spec(db: Database, plan_id: str) -> dict[str, Any]:
    """The plan's spec as stored at submit — immutable, so a worker may cache it parsed.
    Anything that can change later is a plan column, read where it is needed."""
    with db.statement() as conn:
        spec = conn.scalar(select(Plan.spec).where(Plan.id == plan_id))
    if spec is None:
        raise NotFound(f"no plan {plan_id!r}")
    return dict(spec)


def _state(s: Any, plan_id: str) -> PlanState | None:
    row = s.get(Plan, plan_id)
    if row is None:
        return None
    phases = s.scalars(select(Phase).where(Phase.plan_id == plan_id).order_by(Phase.position)).all()
    return PlanState(snapshot(PlanRecord, row), [snapshot(PhaseRecord, p) for p in phases])


def request_cancel(db: Database, plan_id: str, actor: Principal | None = None) -> Cancelled:
    """Set the stored cancel flag and cancel every pending phase and every person's seat
    still waiting for its answer. Returns their keys.

    Running phases notice the flag at their next safe point (heartbeat, completion). A plan
    waiting for approval ends cancelled here, under the same row lock as an approval: one of
    the two wins, never both.
    ``actor`` (who asked) is recorded on the ``cancel_requested`` event.
    """
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        if plan.status in PLAN_FINAL:
            return Cancelled([])
        now = utcnow()
        plan.cancel_requested = True
        plan.updated_at = now
        waiting = Phase.status.in_((PhaseStatus.PENDING, PhaseStatus.AWAITING_INPUT))  # a seat asked: it ends too
        keys = list(s.scalars(select(Phase.key).where(Phase.plan_id == plan_id, waiting).order_by(Phase.position)))
        s.execute(update(Phase).where(Phase.plan_id == plan_id, waiting)
                  .values(status=PhaseStatus.CANCELLED, finished_at=now, enqueued_at=None))
        outbox = Outbox(s, plan_id)
        outbox.append(event_shapes.cancel_requested(keys, actor=actor.audit() if actor else None))
        if plan.status == PlanStatus.AWAITING_APPROVAL:  # nothing runs: its draft is never approved
            plan.status, plan.finished_at = PlanStatus.CANCELLED, now
            plan.error_code, plan.error_message = "plan.cancelled", "the plan was cancelled"
            outbox.append(event_shapes.plan_finished(PlanStatus.CANCELLED, error_code=plan.error_code,
                                                     error=plan.error_message))
        return Cancelled(keys, outbox.records())


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


def release_resume_guard(db: Database, plan_id: str, owner: str) -> None:
    """Give back the guard ``owner`` took, at once (a resume that sent nothing has no canvas
    in flight to protect from a second one); a guard another resume holds stays."""
    with db.transaction() as s:
        s.execute(update(Plan).where(Plan.id == plan_id, Plan.resume_owner == owner)
                  .values(resume_owner=None, resume_until=None))


def reopen(db: Database, plan_id: str, *, retry_failed: bool, actor: Principal | None = None) -> Reopened:
    """Prepare a plan for resume; with ``retry_failed``, failed phases (and the phases
    skipped because of them) go back to pending and the retry is recorded on each. Rounds a
    board skipped because its panel agreed (``plan.early_stop``) stay skipped: that was a
    decision, not a failure.

    Only a plan that is running or ended failed / budget_exhausted is reopened: a
    completed or cancelled plan is final for good, and its phases are left alone
    (never a pending phase under a final plan). Every resume is recorded as a
    ``resume_requested`` event naming ``actor`` (who asked). Returns the keys reset."""
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        reset: list[str] = []
        outbox = Outbox(s, plan_id)
        reopenable = plan.status in _REOPENABLE and not plan.cancel_requested
        if retry_failed and reopenable:
            rows = s.scalars(select(Phase).where(Phase.plan_id == plan_id,
                                                 Phase.status.in_((PhaseStatus.FAILED, PhaseStatus.SKIPPED)),
                                                 Phase.error_code.is_distinct_from(EARLY_STOP))).all()
            for ph in rows:
                if ph.status == PhaseStatus.FAILED:
                    ph.retries_requested += 1
                ph.status, ph.error_code, ph.error_message = PhaseStatus.PENDING, None, None
                ph.finished_at = ph.enqueued_at = ph.due_at = None  # a seat nobody answered is asked again
                reset.append(ph.key)
            if reset:
                outbox.append(event_shapes.retry_requested(reset))
        outbox.append(event_shapes.resume_requested(retry_failed=retry_failed, reset=reset,
                                                actor=actor.audit() if actor else None))
        if plan.status in (PlanStatus.FAILED, PlanStatus.BUDGET_EXHAUSTED) and reset:
            plan.status, plan.error_code, plan.error_message, plan.finished_at = PlanStatus.RUNNING, None, None, None
        plan.updated_at = utcnow()
        return Reopened(reset, outbox.records())


def finish_plan(db: Database, plan_id: str, status: PlanStatus, *, error_code: str | None = None,
                error_message: str | None = None) -> EventRecord | None:
    """Move a running plan to a final status once. Returns the ``plan_finished`` event
    when this call did it, None when the plan was already final."""
    now = utcnow()
    with db.transaction() as s:
        res = s.execute(update(Plan).where(Plan.id == plan_id, Plan.status == PlanStatus.RUNNING)
                        .values(status=status, error_code=error_code, error_message=error_message,
                                finished_at=now, updated_at=now))
        if res.rowcount != 1:  # type: ignore[attr-defined]
            return None
        outbox = Outbox(s, plan_id)
        outbox.append(event_shapes.plan_finished(status, error_code=error_code, error=error_message))
        return outbox.records()[0]


def running_plan_ids(db: Database, *, limit: int = 500) -> list[str]:
    with db.transaction() as s:
        return list(s.scalars(select(Plan.id).where(Plan.status == PlanStatus.RUNNING)
                              .order_by(Plan.updated_at).limit(limit)))


def stalled_plan_ids(db: Database, *, now: datetime, requeue_after: timedelta, limit: int = 500) -> list[str]:
    """Running plans that stopped moving, for the reconciler to re-derive:

    - a phase whose lease expired (its worker died);
    - a phase that has been READY — every direct dependency final, the last of them
      before ``requeue_after`` ago — and neither claimed nor marked enqueued since then
      (its message was lost). A phase sent in a big canvas waits, marked, for its inputs
      without looking lost: it is ready only once they are final;
    - no stored progress for ``requeue_after``, nothing running on a live lease and no
      person's seat waiting for its answer (a lost chord body: every phase final, or blocked,
      and no ``advance`` came).
    """
    cutoff = now - requeue_after
    with db.transaction() as s:
        # every reason is looked up per running plan (the (plan_id, status) index), never across
        # all the phases ever stored: a pass costs the same however many finished plans are kept
        expired = select(Phase.plan_id).where(Phase.plan_id == Plan.id, Phase.status == PhaseStatus.RUNNING,
                                              Phase.lease_expires_at < now)
        lost = (select(Phase.plan_id)
                .where(Phase.plan_id == Plan.id, Phase.status == PhaseStatus.PENDING, Phase.held_at.is_(None),
                       or_(Phase.enqueued_at.is_(None), Phase.enqueued_at < cutoff),
                       db.sql.ready_since_cutoff(cutoff)))
        # a seat waiting for a person is progress nobody owes, a held phase waits for a release:
        # its plan is not re-derived every pass
        alive = (select(Phase.id).where(Phase.plan_id == Plan.id,
                                        or_((Phase.status == PhaseStatus.RUNNING) & (Phase.lease_expires_at >= now),
                                            Phase.status == PhaseStatus.AWAITING_INPUT,
                                            (Phase.status == PhaseStatus.PENDING) & Phase.held_at.is_not(None)))
                 .exists())
        q = (select(Plan.id).where(Plan.status == PlanStatus.RUNNING)
             .where(or_(Plan.id.in_(expired), Plan.id.in_(lost), (Plan.updated_at < cutoff) & ~alive))
             .order_by(Plan.updated_at).limit(limit))
        return list(s.scalars(q))


@dataclass(frozen=True)
class Updated:
    """What :func:`update_plan` did: the plan as stored now, and the event it stored
    (none when nothing changed)."""

    plan: PlanRecord
    events: tuple[EventRecord, ...] = ()


PATCHABLE = ("title", "labels", "max_debates", "priority")


def update_plan(db: Database, plan_id: str, changes: dict[str, Any], *, actor: Principal | None = None) -> Updated:
    """Apply already-validated ``changes`` (a subset of :data:`PATCHABLE`) under the plan's
    row lock, recording who changed what in a ``plan_updated`` event. ``max_debates`` and
    ``priority`` change only while the plan runs (:class:`Conflict` after): completions read it
    under the same lock, so a check that completes later sees the new limit."""
    unknown = set(changes) - set(PATCHABLE)
    if unknown:
        raise ValueError(f"not patchable: {sorted(unknown)}")
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        for name in ("max_debates", "priority"):
            if name in changes and plan.status in PLAN_FINAL:
                raise Conflict(f"plan {plan_id} is {plan.status}: {name} changes only while it runs")
        changed = {k: v for k, v in changes.items() if getattr(plan, k) != v}
        for key, value in changed.items():
            setattr(plan, key, value)
        outbox = Outbox(s, plan_id)
        if changed:
            plan.updated_at = utcnow()
            outbox.append(event_shapes.plan_updated(changed, actor=actor.audit() if actor else None))
        events = outbox.records()
        s.flush()
        return Updated(snapshot(PlanRecord, plan), events)
