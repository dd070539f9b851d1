"""Usage rows: one per model call, keyed by (phase, attempt, seq).

Writing the same row twice is a no-op (one ``INSERT … ON CONFLICT DO NOTHING``), so a
retried write never counts twice. Plan-level usage is always the sum of rows — there is
no counter to keep in step. Whether a row is its phase's cost is derived, never stored:
it is iff its attempt is the attempt that completed the phase (:func:`counted`).
"""

from __future__ import annotations

from sqlalchemy import and_, func, select
from sqlalchemy.sql import ColumnElement

from storage.db import Database
from storage.models import Phase, UsageRow
from storage.read_models import UsageRecord
from storage.status import PhaseStatus


def counted() -> ColumnElement[bool]:
    """A usage row (joined to its phase) is the phase's cost: its attempt completed the phase."""
    return and_(Phase.status == PhaseStatus.COMPLETED, Phase.attempt == UsageRow.attempt)


def record_usage(db: Database, *, plan_id: str, phase_id: str, attempt: int, seq: int, purpose: str,
                 model: str, input_tokens: int, output_tokens: int, source: str,
                 method: str | None, cost_usd: float | None = None, reservation: int | None = None) -> bool:
    """Insert one call's usage (``cost_usd``: its price at the time, None for a model without
    one) and, with ``reservation`` (the call's, :func:`storage.spend.reserve`), settle it: the
    reservation is released by the same write, so the call is counted once — one statement
    on Postgres either way. Returns False when that (phase, attempt, seq) is already on record."""
    values = {"plan_id": plan_id, "phase_id": phase_id, "attempt": attempt, "seq": seq, "purpose": purpose,
              "model": model, "input_tokens": input_tokens, "output_tokens": output_tokens, "source": source,
              "method": method, "cost_usd": cost_usd}
    with db.statement() as conn:
        if reservation is None:
            return db.sql.insert_usage(conn, values)
        return db.sql.settle_usage(conn, values, reservation)


def spent_tokens(db: Database, plan_id: str) -> int:
    """Every token on record for the plan, cost and waste alike (what a budget must bound)."""
    with db.transaction() as s:
        v = s.scalar(select(func.sum(UsageRow.input_tokens + UsageRow.output_tokens))
                     .where(UsageRow.plan_id == plan_id))
    return int(v or 0)


def spent(db: Database, plan_id: str) -> tuple[int, float | None]:
    """Every token and US dollar on record for the plan, waste included (what a budget
    bounds); the dollars are None when a call on record had no price."""
    with db.transaction() as s:
        tokens, usd, unpriced = s.execute(
            select(func.coalesce(func.sum(UsageRow.input_tokens + UsageRow.output_tokens), 0),
                   func.coalesce(func.sum(UsageRow.cost_usd), 0.0),
                   func.count().filter(UsageRow.cost_usd.is_(None)))
            .where(UsageRow.plan_id == plan_id)).one()
    return int(tokens), None if unpriced else float(usd or 0.0)


def rows_for_plan(db: Database, plan_id: str) -> list[UsageRecord]:
    with db.transaction() as s:
        rows = s.execute(select(UsageRow, counted().label("counted")).join(Phase, Phase.id == UsageRow.phase_id)
                         .where(UsageRow.plan_id == plan_id).order_by(UsageRow.id))
        return [UsageRecord(phase_id=u.phase_id, attempt=u.attempt, seq=u.seq, purpose=u.purpose, model=u.model,
                            input_tokens=u.input_tokens, output_tokens=u.output_tokens, source=u.source,
                            method=u.method, counted=bool(c), cost_usd=u.cost_usd) for u, c in rows]
