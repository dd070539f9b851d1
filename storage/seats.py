"""A person's seat: a phase a person answers, never a worker.

A seat (``meta.human``) is never sent to a worker, and a worker's claim refuses it
(:meth:`storage.sql.base.Statements.claim_update`). When it is ready, the coordinator's
advance asks for it (:func:`ask`): ``pending → awaiting_input``, with a new attempt, the time
asked (``started_at``), its deadline (``due_at``) and an ``input_requested`` event. From there
nothing is held — no lease, no worker thread, no broker message — until one of:

- the person's answer (:func:`answer`): stored like a model's turn, in the order of a
  completion's writes (plan row lock → cancel flag → fenced status → content → events), fenced
  by the seat's status and attempt; who answered (a principal, never a token) and the client's
  idempotency key are kept on the phase, so the same key is told the stored outcome again;
- its deadline (:func:`expire`): ``awaiting_input → failed`` (``input.timed_out``), the plan's
  ``missing_expert`` rule deciding what that means. Every worker's sweep runs it; a conditional
  UPDATE fires each deadline once, whoever sweeps;
- a cancel (:func:`storage.plans.request_cancel` ends a waiting seat cancelled).

Each write locks the plan row first, like every finishing write, so progress k/n stays exact
and an answer racing a cancel or a deadline lands on one side of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update

from storage import event_shapes
from storage.db import Database
from storage.event_shapes import NewEvent
from storage.exceptions import NotFound
from storage.models import Content, Phase, Plan, utcnow
from storage.read_models import EventRecord
from storage.sql.base import PLAN_LOCK, text_sha256
from storage.status import TIMED_OUT, PhaseStatus, PlanStatus

__all__ = ["TIMED_OUT", "Answer", "Ask", "Expired", "answer", "ask", "due_plans", "expire"]


@dataclass(frozen=True)
class Ask:
    """A ready seat to ask: its deadline and the ``input_requested`` event to store with it
    (built by the control plane: the prompt is its business)."""

    phase_id: str
    due_at: datetime
    event: NewEvent


def ask(db: Database, plan_id: str, seats: Sequence[Ask], *, now: datetime | None = None) -> tuple[EventRecord, ...]:
    """Move each seat ``pending → awaiting_input`` if it still is pending, ready, and its plan
    runs uncancelled, under the plan's row lock; keep what it is asked on the phase
    (``meta.ask``: the prompt, the inputs to read, the role) and store its event — only when
    this call moved it (two advances racing ask once). Returns the events stored."""
    if not seats:
        return ()
    now = now or utcnow()
    stored = []
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None or plan.status != PlanStatus.RUNNING or plan.cancel_requested:
            return ()
        for seat in seats:
            moved = s.execute(
                update(Phase).where(Phase.id == seat.phase_id, Phase.plan_id == plan_id,
                                    Phase.status == PhaseStatus.PENDING, db.sql.human(), db.sql.ready())
                .values(status=PhaseStatus.AWAITING_INPUT, attempt=Phase.attempt + 1, started_at=now,
                        due_at=seat.due_at, enqueued_at=None, lease_owner=None, lease_expires_at=None)
                .returning(Phase.attempt, Phase.meta).execution_options(synchronize_session=False)).first()
            if moved is None:
                continue
            event = seat.event
            # what the person is asked stays with the seat (the page and the terminal show it)
            asked = {k: event.data.get(k) for k in ("prompt", "inputs", "role")}
            s.execute(update(Phase).where(Phase.id == seat.phase_id).values(meta={**(moved.meta or {}), "ask": asked})
                      .execution_options(synchronize_session=False))
            stored.append(db.sql.append(s, plan_id, NewEvent(event.type, {**event.data, "attempt": moved.attempt},
                                                             event.phase_key), now))
        if stored:
            plan.updated_at = now
    return tuple(stored)


@dataclass(frozen=True)
class Answer:
    """What :func:`answer` did: ``stored`` — the answer is on record (now, or ``replayed``: by an
    earlier call with the same idempotency key); else refused, ``status`` saying what the seat
    is (``error_code`` why it ended, ``due_at`` its deadline) and nothing written."""

    stored: bool
    status: PhaseStatus
    replayed: bool = False
    answered_by: dict[str, Any] | None = None
    answered_at: str | None = None
    error_code: str | None = None
    due_at: datetime | None = None
    cancel_requested: bool = False
    events: tuple[EventRecord, ...] = ()


def answer(db: Database, *, plan_id: str, key: str, text: str, summary: str, offloaded: bool,
           verdict: dict[str, Any] | None, actor: dict[str, Any] | None, idempotency_key: str | None,
           now: datetime | None = None) -> Answer:
    """Store a person's answer to seat ``key``, in one transaction: lock the plan row, read
    the cancel flag, then the fenced status update (``awaiting_input`` and this attempt →
    ``completed``, with who answered and the client's key), the content, ``input_received``
    and ``phase_completed`` with the plan's progress. No usage row: nothing was spent.

    Refused — nothing written — when the plan is cancelled, or the seat is not waiting (never
    asked yet, answered, cancelled, or past its deadline: ``due_at`` ≤ ``now``, even before a
    sweep has ended it). An answer whose ``idempotency_key`` matches the stored answer's is
    told that answer again (``replayed``)."""
    now = now or utcnow()
    with db.transaction() as s:
        lock = db.sql.lock_plan(s, plan_id, now)
        if lock is None:
            raise NotFound(f"no plan {plan_id!r}")
        row = s.execute(select(Phase.id, Phase.status, Phase.attempt, Phase.meta, Phase.due_at, Phase.error_code,
                               Phase.key, Phase.expert, Phase.kind, Phase.round)
                        .where(Phase.plan_id == plan_id, Phase.key == key)).first()
        if row is None:
            raise NotFound(f"plan {plan_id} has no phase {key!r}")
        given = (row.meta or {}).get("answer") or {}
        if (row.status == PhaseStatus.COMPLETED and idempotency_key is not None
                and given.get("idempotency_key") == idempotency_key):
            return Answer(True, PhaseStatus.COMPLETED, replayed=True, answered_by=given.get("by"),
                          answered_at=str(given.get("at")))
        if (lock.cancel_requested or row.status != PhaseStatus.AWAITING_INPUT
                or (row.due_at is not None and row.due_at <= now)):
            return Answer(False, PhaseStatus(row.status), error_code=row.error_code, due_at=row.due_at,
                          cancel_requested=lock.cancel_requested, answered_by=given.get("by"),
                          answered_at=given.get("at"))
        record = {"by": actor, "at": now.isoformat(), "idempotency_key": idempotency_key}
        content_id = str(uuid.uuid4())  # first: the phase's content_id references it
        s.add(Content(id=content_id, text=text, chars=len(text), sha256=text_sha256(text), created_at=now))
        s.flush()
        fenced = s.execute(
            update(Phase).where(Phase.id == row.id, Phase.plan_id == plan_id, Phase.attempt == row.attempt,
                                Phase.status == PhaseStatus.AWAITING_INPUT)
            .values(status=PhaseStatus.COMPLETED, summary=summary, truncated=False, verdict=verdict,
                    content_id=content_id, finished_at=now, error_code=None, error_message=None,
                    meta={**(row.meta or {}), "answer": record})
            .returning(Phase.id).execution_options(synchronize_session=False)).first()
        if fenced is None:  # cannot happen under the plan lock; refuse rather than guess
            s.execute(delete(Content).where(Content.id == content_id))
            return Answer(False, PhaseStatus(row.status))
        s.flush()
        k, n = db.sql.progress(s, plan_id)
        events = (
            db.sql.append(s, plan_id, event_shapes.input_received(row, attempt=row.attempt, actor=actor,
                                                                  chars=len(text)), now),
            db.sql.append(s, plan_id, event_shapes.phase_completed(
                row, attempt=row.attempt, chars=len(text), truncated=False, fallback=False, offloaded=offloaded,
                summary=summary, k=k, n=n), now),
        )
        return Answer(True, PhaseStatus.COMPLETED, answered_by=actor, answered_at=now.isoformat(), events=events)


def due_plans(db: Database, *, now: datetime, limit: int = 100) -> list[str]:
    """The plans with a seat past its deadline (``ix_phases_status_due_at``: never a scan of
    other phases), oldest deadline first."""
    with db.transaction() as s:
        rows = s.execute(select(Phase.plan_id, Phase.due_at)
                         .where(Phase.status == PhaseStatus.AWAITING_INPUT, Phase.due_at <= now)
                         .order_by(Phase.due_at).limit(limit)).all()
    return list(dict.fromkeys(r.plan_id for r in rows))


@dataclass(frozen=True)
class Expired:
    keys: list[str]
    events: tuple[EventRecord, ...] = ()


def expire(db: Database, plan_id: str, *, now: datetime) -> Expired:
    """End every seat of the plan whose deadline passed: ``awaiting_input → failed``
    (``input.timed_out``), under the plan's row lock, each with its ``phase_failed`` event.

    A conditional UPDATE decides: a seat that is no longer waiting (answered, cancelled, or
    ended by another sweep that got there first) matches nothing, so a deadline fires exactly
    once however many workers sweep at the same moment."""
    with db.transaction() as s:
        if db.sql.lock_plan(s, plan_id, now) is None:
            return Expired([])
        due = s.execute(select(Phase.id, Phase.expert, Phase.due_at)
                        .where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.AWAITING_INPUT,
                               Phase.due_at <= now).order_by(Phase.position)).all()
        keys, events = [], []
        for seat in due:
            when = seat.due_at.strftime("%Y-%m-%d %H:%M:%S UTC") if seat.due_at else "its deadline"
            message = f"{seat.expert} did not answer by {when}"
            ended = s.execute(
                update(Phase).where(Phase.id == seat.id, Phase.status == PhaseStatus.AWAITING_INPUT,
                                    Phase.due_at <= now)
                .values(status=PhaseStatus.FAILED, finished_at=now, error_code=TIMED_OUT, error_message=message)
                .returning(Phase.key, Phase.expert, Phase.kind, Phase.round, Phase.attempt)
                .execution_options(synchronize_session=False)).first()
            if ended is None:
                continue
            k, n = db.sql.progress(s, plan_id)
            keys.append(ended.key)
            events.append(db.sql.append(s, plan_id, event_shapes.phase_failed(
                ended, attempt=ended.attempt, error_code=TIMED_OUT, error=message, k=k, n=n), now))
        return Expired(keys, tuple(events))
