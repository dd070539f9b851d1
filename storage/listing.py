"""A tenant's plans, newest first, a page at a time.

Keyset pagination on (created_at, id) — the order of ``ix_plans_tenant_created_at`` —
so a page costs the same however many plans are stored, and a plan created while a
client pages is never shown twice. The cursor is opaque to clients: the last row's
(created_at, id), encoded. Rows carry no spec (a spec may be a megabyte), and each
row's progress: its phases done and in all.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime

from sqlalchemy import and_, exists, func, or_, select

from storage.db import Database
from storage.models import Phase, Plan
from storage.read_models import snapshot
from storage.status import PHASE_FINAL, PlanStatus

MAX_PAGE = 200


@dataclass(frozen=True)
class PlanSummary:
    id: str
    tenant: str
    task_id: str | None
    title: str
    kind: str
    status: PlanStatus
    labels: list[str]
    cancel_requested: bool
    error_code: str | None
    created_at: datetime
    finished_at: datetime | None
    phases_done: int = 0  # phases in a final status (completed, failed, cancelled, skipped)
    phases_total: int = 0  # debates inserted so far included

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", PlanStatus(self.status))


@dataclass(frozen=True)
class Page:
    plans: list[PlanSummary]
    next_cursor: str | None  # None: this is the last page


def encode_cursor(created_at: datetime, plan_id: str) -> str:
    raw = f"{created_at.isoformat()}|{plan_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor stands for; ``ValueError`` for anything this module
    did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, sep, plan_id = raw.partition("|")
        if not sep or not plan_id or len(plan_id) > 36:
            raise ValueError
        moment = datetime.fromisoformat(when)
        if moment.tzinfo is None:
            raise ValueError
        return moment, plan_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("not a cursor this API handed out") from None


_COUNTED = ("phases_done", "phases_total")
_COLUMNS = (*(Plan.__table__.c[f.name] for f in fields(PlanSummary) if f.name not in _COUNTED),
            # the progress, counted per listed row (ix_phases_plan_status)
            select(func.count()).where(Phase.plan_id == Plan.id, Phase.status.in_(list(PHASE_FINAL)))
            .correlate(Plan).scalar_subquery().label("phases_done"),
            select(func.count()).where(Phase.plan_id == Plan.id).correlate(Plan).scalar_subquery()
            .label("phases_total"))  # the summary's fields, nothing more


def list_plans(db: Database, *, tenant: str | None, statuses: Sequence[str] = (), labels: Sequence[str] = (),
               created_after: datetime | None = None, created_before: datetime | None = None,
               task_id: str | None = None, limit: int = 50, cursor: str | None = None) -> Page:
    """One page of plans, newest first. ``tenant`` None: every tenant (an admin).
    A plan matches when its status is one of ``statuses`` (any if empty), it carries
    every one of ``labels``, and it was created in (``created_after``, ``created_before``)."""
    limit = max(1, min(limit, MAX_PAGE))
    q = select(*_COLUMNS)
    if tenant is not None:
        q = q.where(Plan.tenant == tenant)
    if statuses:
        q = q.where(Plan.status.in_(list(statuses)))
    if task_id is not None:
        q = q.where(Plan.task_id == task_id)
    if created_after is not None:
        q = q.where(Plan.created_at > created_after)
    if created_before is not None:
        q = q.where(Plan.created_at < created_before)
    for label in labels:
        tags = db.sql.json_elements(Plan.__table__.c.labels)
        q = q.where(exists(select(tags.c.value).where(tags.c.value == label)))
    if cursor is not None:
        at, last_id = decode_cursor(cursor)
        q = q.where(or_(Plan.created_at < at, and_(Plan.created_at == at, Plan.id < last_id)))
    q = q.order_by(Plan.created_at.desc(), Plan.id.desc()).limit(limit + 1)
    with db.transaction() as s:
        rows = s.execute(q).all()
    page = [snapshot(PlanSummary, r) for r in rows[:limit]]
    more = len(rows) > limit
    return Page(page, encode_cursor(page[-1].created_at, page[-1].id) if more and page else None)
