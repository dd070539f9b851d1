"""Approval before the answer goes out.

A plan whose answer needs a person's approval (``synthesis: {approve: true}``,
``final: {approve: true}``) writes it as a draft: the synthesis (or the board's final)
completes with its content like any phase, and the plan, instead of completing, waits —
``running → awaiting_approval`` (:func:`hold`), a status that is not final and holds nothing
(no phase runs, no message waits). From there, under the plan's row lock, one of:

- :func:`approve`: ``awaiting_approval → completed``; the draft is the plan's result;
- :func:`send_back`: once per plan, with a note: a revision phase is inserted (it rewrites the
  draft, which it reads as an input, with the note in its prompt) and the plan runs again
  (``→ running``); once the revision is written it waits for approval again;
- a cancel (:func:`storage.plans.request_cancel`): ``→ cancelled``.

A revision that fails (its model failed on every try) does not lose the plan: :func:`fall_back`
makes the first draft the plan's answer again, with the failure recorded on it, and the plan
waits for approval of that draft (the one send-back is spent).

Every one locks the plan row first and checks the status it found, so an approval racing a
cancel is decided by who locks first: the other finds the plan final and is refused.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update

from storage import event_shapes
from storage.db import Database
from storage.event_shapes import NewEvent
from storage.exceptions import NotFound
from storage.models import Phase, Plan, utcnow
from storage.outbox import Outbox
from storage.read_models import EventRecord, NewPhase
from storage.sql.base import PLAN_LOCK
from storage.status import PhaseStatus, PlanStatus

REVISION_OF = "revision_of"  # the meta key of a revision phase: the key of the draft it rewrites

__all__ = ["REVISION_OF", "Decided", "approve", "fall_back", "hold", "send_back"]


def hold(db: Database, plan_id: str, event: NewEvent, *, now: datetime | None = None) -> EventRecord | None:
    """The plan's draft is written: ``running → awaiting_approval`` with ``event``, once (a
    running, uncancelled plan only). None when this call did not move it."""
    now = now or utcnow()
    with db.transaction() as s:
        moved = s.execute(update(Plan).where(Plan.id == plan_id, Plan.status == PlanStatus.RUNNING,
                                             Plan.cancel_requested.is_(False))
                          .values(status=PlanStatus.AWAITING_APPROVAL, updated_at=now)
                          .returning(Plan.id).execution_options(synchronize_session=False)).first()
        if moved is None:
            return None
        outbox = Outbox(s, plan_id)
        outbox.append(event)
        return outbox.records()[0]


@dataclass(frozen=True)
class Decided:
    """What :func:`approve` or :func:`send_back` did: ``done`` (and the events it stored), or
    refused — the plan's ``status`` (and ``cancel_requested``) say why; ``revised``: the key of
    the plan's revision phase, when it has one (a second send-back is refused for it)."""

    done: bool
    status: PlanStatus
    cancel_requested: bool = False
    revised: str | None = None
    events: tuple[EventRecord, ...] = ()


def _revision(s: Any, plan_id: str) -> str | None:
    rows = s.execute(select(Phase.key, Phase.meta).where(Phase.plan_id == plan_id)).all()
    return next((r.key for r in rows if (r.meta or {}).get(REVISION_OF)), None)


def approve(db: Database, plan_id: str, *, draft: str, revision: int, actor: dict[str, Any] | None) -> Decided:
    """Approve the plan's draft (phase ``draft``): ``awaiting_approval → completed`` with
    ``approved`` (who) and ``plan_finished``, under the plan's row lock; refused (nothing written)
    when the plan is not waiting for approval — a cancel got there first, or it was approved."""
    now = utcnow()
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        if plan.status != PlanStatus.AWAITING_APPROVAL or plan.cancel_requested:
            return Decided(False, PlanStatus(plan.status), plan.cancel_requested, _revision(s, plan_id))
        plan.status, plan.finished_at, plan.updated_at = PlanStatus.COMPLETED, now, now
        plan.error_code = plan.error_message = None
        outbox = Outbox(s, plan_id)
        outbox.append(event_shapes.approved(phase=draft, revision=revision, actor=actor))
        outbox.append(event_shapes.plan_finished(PlanStatus.COMPLETED, error_code=None, error=None))
        return Decided(True, PlanStatus.COMPLETED, events=outbox.records())


def send_back(db: Database, plan_id: str, *, draft: str, revision: NewPhase, note: str,
              actor: dict[str, Any] | None) -> Decided:
    """Send the draft (phase ``draft``) back with ``note``: insert ``revision`` (after every
    stored phase; it is now the plan's terminal phase, the draft no longer), record ``sent_back``
    (who, the note) and run the plan again — once per plan: refused when the plan already has a
    revision, or is not waiting for approval."""
    now = utcnow()
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        revised = _revision(s, plan_id)
        if plan.status != PlanStatus.AWAITING_APPROVAL or plan.cancel_requested or revised is not None:
            return Decided(False, PlanStatus(plan.status), plan.cancel_requested, revised)
        old = s.scalar(select(Phase).where(Phase.plan_id == plan_id, Phase.key == draft))
        if old is None:
            raise NotFound(f"plan {plan_id} has no phase {draft!r}")
        old.meta = {**(old.meta or {}), "terminal": False, "revised_by": revision.key}
        start = (s.scalar(select(func.max(Phase.position)).where(Phase.plan_id == plan_id)) or 0) + 1
        s.add(Phase(id=str(uuid.uuid4()), plan_id=plan_id, key=revision.key, kind=revision.kind,
                    expert=revision.expert, round=revision.round, group_key=revision.group_key,
                    position=start, depends_on=list(revision.depends_on), inputs=list(revision.inputs),
                    meta={**revision.meta, REVISION_OF: draft}, status=PhaseStatus.PENDING, attempt=0,
                    created_at=now))
        plan.status, plan.updated_at = PlanStatus.RUNNING, now
        outbox = Outbox(s, plan_id)
        outbox.append(event_shapes.sent_back(phase=draft, revision=revision.key, note=note, actor=actor))
        return Decided(True, PlanStatus.RUNNING, revised=revision.key, events=outbox.records())


def fall_back(db: Database, plan_id: str, *, revision: str, now: datetime | None = None) -> bool:
    """The revision ``revision`` failed: the draft it rewrote is the plan's terminal phase again
    (``meta.revision_failed``: the revision's key, error code and message), the revision no
    longer (``meta.fell_back``). Under the plan's row lock, once: only for a running,
    uncancelled plan whose revision failed and whose draft is written. Returns whether it moved
    it (the coordinator then holds the plan for approval of the draft)."""
    now = now or utcnow()
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None or plan.status != PlanStatus.RUNNING or plan.cancel_requested:
            return False
        rewrite = s.scalar(select(Phase).where(Phase.plan_id == plan_id, Phase.key == revision))
        if rewrite is None or rewrite.status != PhaseStatus.FAILED or not (rewrite.meta or {}).get("terminal"):
            return False
        draft = s.scalar(select(Phase).where(Phase.plan_id == plan_id,
                                             Phase.key == (rewrite.meta or {}).get(REVISION_OF)))
        if draft is None or draft.status != PhaseStatus.COMPLETED:
            return False
        rewrite.meta = {**(rewrite.meta or {}), "terminal": False, "fell_back": True}
        draft.meta = {**(draft.meta or {}), "terminal": True,
                      "revision_failed": {"phase": rewrite.key, "error_code": rewrite.error_code,
                                          "error": rewrite.error_message}}
        plan.updated_at = now
        return True
