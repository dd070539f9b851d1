"""Steering a running meeting: notes people send while a plan runs.

A note is appended to the plan's ``notes`` column and recorded as a ``steered`` event naming
who sent it, under the plan's row lock. A phase is given the notes its claim reads — in the
claim's one statement (:meth:`storage.sql.base.Statements.plan_notes`) — so every phase that
starts after a note has it, and a phase already running is not changed. A plan never steered
costs nothing more: its notes are an empty list read with the claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage import event_shapes
from storage.db import Database
from storage.exceptions import NotFound
from storage.models import Plan, utcnow
from storage.outbox import Outbox
from storage.read_models import EventRecord
from storage.sql.base import PLAN_LOCK
from storage.status import PlanStatus

__all__ = ["Steered", "steer"]


@dataclass(frozen=True)
class Steered:
    """``done`` with the note's number ``n``; else refused: the plan's ``status`` (and
    ``cancel_requested``) say why, or ``full`` — it holds its limit of notes."""

    done: bool
    status: PlanStatus
    n: int = 0
    cancel_requested: bool = False
    full: bool = False
    events: tuple[EventRecord, ...] = ()


def steer(db: Database, plan_id: str, note: str, *, actor: dict[str, Any] | None, max_notes: int) -> Steered:
    """Append ``note`` to a running plan's notes (at most ``max_notes``), with its ``steered`` event."""
    now = utcnow()
    with db.transaction() as s:
        plan = s.get(Plan, plan_id, with_for_update=PLAN_LOCK)
        if plan is None:
            raise NotFound(f"no plan {plan_id!r}")
        notes = list(plan.notes or [])
        if plan.status != PlanStatus.RUNNING or plan.cancel_requested:
            return Steered(False, PlanStatus(plan.status), len(notes), plan.cancel_requested)
        if len(notes) >= max_notes:
            return Steered(False, PlanStatus(plan.status), len(notes), full=True)
        n = len(notes) + 1
        plan.notes = [*notes, {"n": n, "note": note, "by": actor, "at": now.isoformat()}]
        plan.updated_at = now
        outbox = Outbox(s, plan_id)
        outbox.append(event_shapes.steered(n=n, note=note, actor=actor))
        return Steered(True, PlanStatus.RUNNING, n, events=outbox.records())
