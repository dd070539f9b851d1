"""What each of some plans has cost so far: what a list of plans shows beside each row
(the UI's ``/ui/``; how far each has got is the listing's own, ``PlanSummary.phases_done``),
read for a whole page of plans in one grouped query, never one per plan.

The cost is the plan's as its view counts it: the rows of the attempt that completed each
phase, and the current attempt of a phase still running (live spend), never an attempt that died.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import and_, func, select

from storage.db import Database
from storage.models import Phase, UsageRow
from storage.status import PhaseStatus


def spent_tokens(db: Database, plan_ids: Sequence[str]) -> dict[str, int]:
    """Each plan's tokens so far, by id (a plan that has spent nothing is absent)."""
    ids = list(dict.fromkeys(plan_ids))
    if not ids:
        return {}
    paid = and_(Phase.attempt == UsageRow.attempt,
                Phase.status.in_([PhaseStatus.COMPLETED, PhaseStatus.RUNNING]))
    with db.transaction() as s:
        rows = s.execute(select(UsageRow.plan_id, func.sum(UsageRow.input_tokens + UsageRow.output_tokens))
                         .join(Phase, Phase.id == UsageRow.phase_id)
                         .where(UsageRow.plan_id.in_(ids), paid).group_by(UsageRow.plan_id)).tuples().all()
    return {plan_id: int(tokens or 0) for plan_id, tokens in rows}
