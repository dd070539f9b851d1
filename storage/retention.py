"""Bounded retention: what finished plans keep, and for how long. An active plan is never pruned.

A pass (:func:`prune`) does three things, each in batches of plans, each batch one
transaction, so a worker killed mid-pass leaves every plan either whole or gone:

1. **Whole plans**, only when the operator asks (``delete_before``, from
   ``CONCLAVE_RETAIN_FINISHED_DAYS``): a plan that finished before it is deleted with
   everything that belongs to it — phases, usage, events, documents, chunks (and, on SQLite,
   their full-text rows, by trigger) — oldest first, at most ``per_pass`` plans; and the
   contents its phases pointed at, each only once no phase references it any more: a what-if
   fork's copied phases share their source's contents (:mod:`storage.contents`), so deleting
   the source leaves them to the fork. The candidates are this batch's phases' contents only,
   each checked through ``ix_phases_content_id``: the cost is the batch's, not the history's.
2. **Newly finished plans** lose every event past the per-plan cap (the newest are kept)
   and those older than ``older_than``, and their transient rows (resume guards, enqueue
   marks) are cleared — once, when the plan has been finished ``GRACE``.
3. **Plans that finished before ``older_than``** lose their remaining events, and their
   webhook deliveries that are final (delivered or failed): a finished plan's events are kept
   for ``CONCLAVE_RETENTION_DAYS`` after it finished. A pending delivery stays until it ends.

Results, contents and usage are otherwise kept: they are the record.

Steps 2 and 3 walk finished plans by keyset on ``(finished_at, id)`` (index
``ix_plans_finished_at``) from a watermark kept in ``fleet_state``, moved in the transaction
of the batch it covers; step 1 reads the same index from its start, which deletion keeps
near. So a pass looks only at plans that finished since the last one or have come due: it
costs the same with 100 or 100,000 finished plans.

The fleet-wide schedule is :func:`claim`: a compare-and-set of the time retention last ran,
so however many workers sweep, retention runs once per interval between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, func, or_, select, true, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from storage.db import Database
from storage.models import (
    Chunk,
    Content,
    Document,
    Event,
    FleetState,
    Phase,
    Plan,
    UsageRow,
    WebhookDelivery,
    utcnow,
)
from storage.status import PLAN_FINAL, DeliveryStatus

#: How long a plan has been finished before step 2 trims it. The watermark moves by
#: ``finished_at``, stamped before its transaction commits: a finish that commits later than
#: a newer one (or comes from a worker whose clock lags) would slip behind the watermark
#: unless it is at most this late.
GRACE = timedelta(minutes=5)

RAN = "retention"  # fleet_state: when retention last ran
TRIMMED = "retention.trimmed"  # fleet_state: watermark of step 2
AGED = "retention.aged"  # fleet_state: watermark of step 3

#: Every table with a ``plan_id``, children before parents (chunks before documents, usage
#: before phases): a batch deletes in this order, never relying on cascades. Contents have no
#: plan: they go after the phases, when nothing references them (:func:`_delete_contents`).
BELONGS_TO_PLAN = (WebhookDelivery, Chunk, Document, UsageRow, Event, Phase)


@dataclass
class Pruned:
    """What one pass did."""

    plans: int = 0  # finished plans deleted whole
    events: int = 0  # events deleted from the plans kept
    trimmed: int = 0  # plans visited by steps 2 and 3


def claim(db: Database, every: float, *, now: datetime | None = None) -> bool:
    """True when retention is due fleet-wide (it has not run within ``every`` seconds), and
    record that it runs now; False otherwise. Atomic: of two processes asking at once, one
    gets True."""
    now = now or utcnow()
    with db.transaction() as s:
        _ensure(s, RAN)
        res = s.execute(update(FleetState)
                        .where(FleetState.name == RAN,
                               or_(FleetState.at.is_(None), FleetState.at <= now - timedelta(seconds=every)))
                        .values(at=now).execution_options(synchronize_session=False))
        return bool(res.rowcount)  # type: ignore[attr-defined]


def prune(db: Database, *, older_than: datetime, max_events_per_plan: int,
          delete_before: datetime | None = None, batch: int = 100, per_pass: int = 1000,
          now: datetime | None = None) -> Pruned:
    """One bounded pass (the module's steps 1-3): each step visits at most ``per_pass``
    plans, ``batch`` per transaction."""
    now = now or utcnow()
    done = Pruned()
    if delete_before is not None:
        _batches(per_pass, batch, lambda n: _delete_plans(db, delete_before, n, done))
    _batches(per_pass, batch, lambda n: _walk(db, TRIMMED, now - GRACE, n, done,
                                              older_than=older_than, cap=max_events_per_plan))
    _batches(per_pass, batch, lambda n: _walk(db, AGED, older_than, n, done, older_than=older_than, cap=None))
    return done


def _batches(per_pass: int, batch: int, run: Callable[[int], int]) -> None:
    left = per_pass
    while left > 0:
        n = min(batch, left)
        got = run(n)
        left -= got
        if got < n:
            return


def _delete_plans(db: Database, before: datetime, n: int, done: Pruned) -> int:
    with db.transaction() as s:
        ids = list(s.scalars(
            select(Plan.id).where(Plan.finished_at < before, Plan.status.in_(PLAN_FINAL))
            .order_by(Plan.finished_at, Plan.id).limit(n).with_for_update(skip_locked=True)))
        if not ids:
            return 0
        pointed = sorted({str(c) for c in s.scalars(select(Phase.content_id).where(
            Phase.plan_id.in_(ids), Phase.content_id.is_not(None)))})
        for table in BELONGS_TO_PLAN:
            s.execute(delete(table).where(table.plan_id.in_(ids)).execution_options(synchronize_session=False))
        s.execute(delete(Plan).where(Plan.id.in_(ids)).execution_options(synchronize_session=False))
        _delete_contents(s, pointed)
        done.plans += len(ids)
        return len(ids)


def _delete_contents(s: Session, candidates: list[str]) -> None:
    """Delete the contents among ``candidates`` that no phase references any more. They are
    locked first (``FOR UPDATE``: a fork inserting a reference to one holds ``KEY SHARE`` on it,
    so this waits for that fork to commit, and a fork that comes later waits for this), and
    only then counted, by a statement of its own — on Postgres it sees every reference committed
    before the lock was granted. A content some phase still points at stays."""
    if not candidates:
        return
    s.execute(select(Content.id).where(Content.id.in_(candidates)).with_for_update())
    referenced = select(Phase.id).where(Phase.content_id == Content.id).exists()
    s.execute(delete(Content).where(Content.id.in_(candidates), ~referenced)
              .execution_options(synchronize_session=False))


def _walk(db: Database, mark_name: str, until: datetime, n: int, done: Pruned, *,
          older_than: datetime, cap: int | None) -> int:
    """Visit the next ``n`` plans after the watermark ``mark_name`` that finished before
    ``until``, trim their events (and, with ``cap``, cap them and clear transient rows) and
    move the watermark past them — one transaction."""
    with db.transaction() as s:
        mark = _ensure(s, mark_name, lock=True)
        after = true() if mark.at is None else or_(
            Plan.finished_at > mark.at, and_(Plan.finished_at == mark.at, Plan.id > (mark.ref or "")))
        rows = s.execute(select(Plan.id, Plan.finished_at)
                         .where(Plan.finished_at.is_not(None), Plan.finished_at < until, after)
                         .order_by(Plan.finished_at, Plan.id).limit(n)).all()
        if not rows:
            return 0
        ids = [r.id for r in rows]
        mark.at, mark.ref = rows[-1].finished_at, rows[-1].id
        final = select(Plan.id).where(Plan.id.in_(ids), Plan.status.in_(PLAN_FINAL))  # not resumed since
        # step 2: events older than the period; step 3: the plan finished before it, so all
        old = Event.created_at < older_than if cap is not None else true()
        res = s.execute(delete(Event).where(Event.plan_id.in_(final), old)
                        .execution_options(synchronize_session=False))
        done.events += res.rowcount or 0  # type: ignore[attr-defined]
        if cap is None:  # step 3: the record of what was sent goes with the events it reported
            s.execute(delete(WebhookDelivery).where(WebhookDelivery.plan_id.in_(final),
                                                    WebhookDelivery.status != DeliveryStatus.PENDING)
                      .execution_options(synchronize_session=False))
        if cap is not None:
            ranked = (select(Event.id, func.row_number().over(partition_by=Event.plan_id, order_by=Event.id.desc())
                             .label("newest")).where(Event.plan_id.in_(final)).subquery())
            res = s.execute(delete(Event).where(Event.id.in_(select(ranked.c.id).where(ranked.c.newest > cap)))
                            .execution_options(synchronize_session=False))
            done.events += res.rowcount or 0  # type: ignore[attr-defined]
            s.execute(update(Plan).where(Plan.id.in_(final), Plan.resume_until.is_not(None))
                      .values(resume_owner=None, resume_until=None).execution_options(synchronize_session=False))
            s.execute(update(Phase).where(Phase.plan_id.in_(final), Phase.enqueued_at.is_not(None))
                      .values(enqueued_at=None).execution_options(synchronize_session=False))
        done.trimmed += len(ids)
        return len(ids)


def _ensure(s: Session, name: str, *, lock: bool = False) -> FleetState:
    """The ``fleet_state`` row ``name``, created if missing (two creators do not collide)."""
    dialect = s.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    s.execute(insert(FleetState).values(name=name).on_conflict_do_nothing(index_elements=["name"]))
    query = select(FleetState).where(FleetState.name == name)
    return s.scalars(query.with_for_update() if lock else query).one()
