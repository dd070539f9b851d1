"""Usage rows: one per model call, keyed by (phase, attempt, seq).

Writing the same row twice is a no-op, so a retried write never counts twice.
Plan-level usage is always the sum of rows — there is no counter to keep in step.
"""

from __future__ import annotations

from sqlalchemy import func, select

from storage.db import Database
from storage.errors import Conflict
from storage.models import UsageRow
from storage.records import UsageRecord, snapshot


def record_usage(db: Database, *, plan_id: str, phase_id: str, attempt: int, seq: int, purpose: str,
                 model: str, input_tokens: int, output_tokens: int, source: str,
                 method: str | None) -> bool:
    """Insert one call's usage. Returns False when that (phase, attempt, seq) is already on record."""
    try:
        with db.transaction() as s:
            exists = s.scalar(select(UsageRow.id).where(UsageRow.phase_id == phase_id,
                                                        UsageRow.attempt == attempt, UsageRow.seq == seq))
            if exists is not None:
                return False
            s.add(UsageRow(plan_id=plan_id, phase_id=phase_id, attempt=attempt, seq=seq, purpose=purpose,
                           model=model, input_tokens=input_tokens, output_tokens=output_tokens,
                           source=source, method=method, counted=False))
        return True
    except Conflict:  # a concurrent identical write won
        return False


def spent_tokens(db: Database, plan_id: str) -> int:
    """Every token on record for the plan, cost and waste alike (what a budget must bound)."""
    with db.transaction() as s:
        v = s.scalar(select(func.sum(UsageRow.input_tokens + UsageRow.output_tokens))
                     .where(UsageRow.plan_id == plan_id))
    return int(v or 0)


def rows_for_plan(db: Database, plan_id: str) -> list[UsageRecord]:
    with db.transaction() as s:
        rows = s.scalars(select(UsageRow).where(UsageRow.plan_id == plan_id).order_by(UsageRow.id))
        return [snapshot(UsageRecord, r) for r in rows]
