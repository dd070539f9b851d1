"""How far each of some plans has got, and what it has cost: what a list of plans shows
beside each row (the UI's ``/ui/``), read for a whole page of plans in two grouped
queries, never one per plan.

``done`` counts the phases in a final status (completed, failed, cancelled, skipped), as
a plan's view does (:attr:`orchestrator.plan.views.PlanView.done`); ``tokens`` is the
plan's cost as its view counts it: the rows of the attempt that completed each phase, and
the current attempt of a phase still running (live spend), never an attempt that died.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, case, func, select

from storage.db import Database
from storage.models import Phase, UsageRow
from storage.status import PHASE_FINAL, PhaseStatus


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    tokens: int


def progress(db: Database, plan_ids: Sequence[str]) -> dict[str, Progress]:
    """Each plan's progress and cost, by id (a plan with no phases is absent)."""
    ids = list(dict.fromkeys(plan_ids))
    if not ids:
        return {}
    final = [str(s) for s in PHASE_FINAL]
    paid = and_(Phase.attempt == UsageRow.attempt,
                Phase.status.in_([PhaseStatus.COMPLETED, PhaseStatus.RUNNING]))
    with db.transaction() as s:
        counts = s.execute(select(Phase.plan_id, func.count(), func.sum(case((Phase.status.in_(final), 1), else_=0)))
                           .where(Phase.plan_id.in_(ids)).group_by(Phase.plan_id)).all()
        spent = dict(s.execute(select(UsageRow.plan_id, func.sum(UsageRow.input_tokens + UsageRow.output_tokens))
                               .join(Phase, Phase.id == UsageRow.phase_id)
                               .where(UsageRow.plan_id.in_(ids), paid).group_by(UsageRow.plan_id)).tuples().all())
    return {plan_id: Progress(done=int(done or 0), total=int(total), tokens=int(spent.get(plan_id) or 0))
            for plan_id, total, done in counts}
