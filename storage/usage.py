"""Usage rows: one per model call, keyed by (phase, attempt, seq).

Writing the same row twice is a no-op, so a retried write never counts twice.
Plan-level usage is always the sum of rows — there is no counter to keep in step.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from storage.db import Database
from storage.errors import Conflict
from storage.models import UsageRow
from storage.records import UsageRecord, snapshot


@dataclass(frozen=True)
class UsageTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    provider_tokens: int = 0  # reported by providers
    estimated_tokens: int = 0  # estimated where a provider reported nothing
    wasted_tokens: int = 0  # spent by attempts that died or lost the fence
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


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


def totals(db: Database, plan_id: str, *, phase_id: str | None = None) -> UsageTotals:
    """Sum of usage rows. Rows of attempts that completed nothing count as waste, not cost —
    except rows of phases still running, which are the live attempt's spend."""
    with db.transaction() as s:
        q = select(UsageRow.source, UsageRow.counted, func.sum(UsageRow.input_tokens),
                   func.sum(UsageRow.output_tokens), func.count()).where(UsageRow.plan_id == plan_id)
        if phase_id is not None:
            q = q.where(UsageRow.phase_id == phase_id)
        rows = s.execute(q.group_by(UsageRow.source, UsageRow.counted)).all()
    t = {"input_tokens": 0, "output_tokens": 0, "provider_tokens": 0, "estimated_tokens": 0,
         "wasted_tokens": 0, "calls": 0}
    for source, counted, tin, tout, n in rows:
        tin, tout = int(tin or 0), int(tout or 0)
        t["calls"] += int(n)
        if not counted:
            t["wasted_tokens"] += tin + tout
            continue
        t["input_tokens"] += tin
        t["output_tokens"] += tout
        t["provider_tokens" if source == "provider" else "estimated_tokens"] += tin + tout
    return UsageTotals(**t)


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
