"""Reserve before you spend: a budget can be reached, never crossed.

Before a model call under a budget (a plan's ``budget: {max_tokens, usd}``, a tenant's
monthly budget in dollars) its worst case — the request's estimated tokens plus the model's
``max_output_tokens``, at its price, plus its per-call fee — is reserved (:func:`reserve`): in
one transaction, under the plan row's lock (``FOR NO KEY UPDATE``, as every lock of the plan
row, :data:`storage.sql.base.PLAN_LOCK`) and, for a tenant's budget, a transaction-scoped advisory
lock keyed by the tenant, what is on record (usage rows) and what is promised (open
reservations) are summed in ONE statement — one snapshot, so a settlement committing in
between can be seen neither twice nor not at all — and the reservation is inserted only if
the call fits. After the call, the reservation is settled: deleted in the transaction that
writes the call's usage row (:func:`storage.usage.record_usage` with ``reservation``), so a
call is counted once, as a reservation or as a row, never both and never neither.

A reservation whose attempt died (a SIGKILLed worker) would hold its worst case for good;
it is released when its phase is claimed again (the new attempt's first reservation deletes
its phase's older attempts' ones, in its own transaction) and by the reconciler
(:func:`release_stale`), which deletes every reservation whose attempt no longer runs.

No budget, no statement: a plan without one whose tenant has none never reaches this module.
On SQLite (one process) ``BEGIN IMMEDIATE`` is the lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, literal, not_, select

from storage import locks
from storage.db import Database
from storage.models import Phase, Plan, Reservation, UsageRow, utcnow
from storage.sql.base import PLAN_LOCK
from storage.status import PhaseStatus
from storage.tenancy import month_of, month_start, spent_this_month


@dataclass(frozen=True)
class Limits:
    """The budgets a call must fit: the plan's (``max_tokens``, ``usd``; None: no such limit)
    and its tenant's for the month (``tenant_usd``; None: none)."""

    max_tokens: int | None = None
    usd: float | None = None
    tenant_usd: float | None = None

    @property
    def plan(self) -> bool:
        return self.max_tokens is not None or self.usd is not None

    @property
    def any(self) -> bool:
        return self.plan or self.tenant_usd is not None


@dataclass(frozen=True)
class Refusal:
    """Why a call was not reserved: the budget it would cross (``budget``: ``max_tokens`` or
    ``usd`` of the plan, ``tenant`` for the tenant's month), what is spent (usage rows), what
    is reserved by calls in flight, the limit, and what the call needs at worst."""

    budget: str
    spent: float
    reserved: float
    limit: float
    need: float
    month: str | None = None

    @property
    def remaining(self) -> float:
        return max(0.0, self.limit - self.spent - self.reserved)


def tenant_lock_key(tenant: str) -> int:
    """The advisory-lock key of a tenant's spending (not its admissions': submit never waits on a call)."""
    return locks.lock_key(f"spend:{tenant}")


def reserve(db: Database, *, plan_id: str, phase_id: str, attempt: int, tenant: str, tokens: int,
            cost_usd: float | None, limits: Limits, now: datetime | None = None) -> int | Refusal:
    """Reserve one call's worst case (``tokens``, ``cost_usd``) if it fits every limit;
    returns the reservation's id, or the :class:`Refusal` of the first budget it would cross
    (nothing is written then). Releases, first, what older attempts of the phase still hold."""
    now = now or utcnow()
    with db.transaction() as s:
        if limits.plan:
            s.execute(select(Plan.id).where(Plan.id == plan_id).with_for_update(key_share=PLAN_LOCK["key_share"]))
        if limits.tenant_usd is not None and db.dialect == "postgresql":
            s.execute(select(func.pg_advisory_xact_lock(tenant_lock_key(tenant))))
        s.execute(delete(Reservation).where(Reservation.phase_id == phase_id, Reservation.attempt < attempt)
                  .execution_options(synchronize_session=False))
        zero = literal(0)
        ours = Reservation.plan_id == plan_id
        columns = [
            select(func.coalesce(func.sum(UsageRow.input_tokens + UsageRow.output_tokens), zero))
            .where(UsageRow.plan_id == plan_id).scalar_subquery(),
            select(func.coalesce(func.sum(Reservation.tokens), zero)).where(ours).scalar_subquery(),
            select(func.coalesce(func.sum(UsageRow.cost_usd), 0.0)).where(UsageRow.plan_id == plan_id)
            .scalar_subquery(),
            select(func.coalesce(func.sum(Reservation.cost_usd), 0.0)).where(ours).scalar_subquery(),
        ]
        since = month_start(now)
        if limits.tenant_usd is not None:
            columns += [spent_this_month(tenant, since),
                        select(func.coalesce(func.sum(Reservation.cost_usd), 0.0))
                        .where(Reservation.tenant == tenant).scalar_subquery()]
        row = s.execute(select(*columns)).one()  # one statement: one snapshot of rows and reservations
        spent_tokens, held_tokens, spent_usd, held_usd = int(row[0]), int(row[1]), float(row[2]), float(row[3])
        refusal = None
        if limits.max_tokens is not None and spent_tokens + held_tokens + tokens > limits.max_tokens:
            refusal = Refusal("max_tokens", spent_tokens, held_tokens, limits.max_tokens, tokens)
        elif limits.usd is not None and spent_usd + held_usd + (cost_usd or 0.0) > limits.usd:
            refusal = Refusal("usd", spent_usd, held_usd, limits.usd, cost_usd or 0.0)
        elif limits.tenant_usd is not None and float(row[4]) + float(row[5]) + (cost_usd or 0.0) > limits.tenant_usd:
            refusal = Refusal("tenant", float(row[4]), float(row[5]), limits.tenant_usd, cost_usd or 0.0,
                              month_of(now))
        if refusal is not None:
            return refusal
        held = Reservation(plan_id=plan_id, phase_id=phase_id, attempt=attempt, tenant=tenant, tokens=tokens,
                           cost_usd=cost_usd, created_at=now)
        s.add(held)
        s.flush()
        return int(held.id)


def release(db: Database, reservation: int) -> None:
    """Give a reservation back unspent (its call failed before any usage was known)."""
    with db.statement() as conn:
        conn.execute(delete(Reservation).where(Reservation.id == reservation))


def release_stale(db: Database) -> int:
    """Release every reservation whose attempt no longer runs (its phase is final, pending
    again, or claimed by a newer attempt): the reconciler's backstop for a worker that died
    holding one. A running attempt's reservation is kept, even past its lease: that attempt
    may still be calling the model. Returns how many were released."""
    running = (select(Phase.id).where(Phase.id == Reservation.phase_id, Phase.status == PhaseStatus.RUNNING,
                                      Phase.attempt == Reservation.attempt).exists())
    with db.statement() as conn:
        res = conn.execute(delete(Reservation).where(not_(running)))
    return int(res.rowcount or 0)
