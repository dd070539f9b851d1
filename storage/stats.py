"""Counts across all plans, for monitoring (``/metrics``). Read-only aggregates."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from storage.db import Database
from storage.models import Phase, Plan, UsageRow
from storage.usage import counted


@dataclass(frozen=True)
class UsageGroup:
    source: str
    counted: bool
    input_tokens: int
    output_tokens: int
    calls: int


@dataclass(frozen=True)
class FleetStats:
    plans_by_status: dict[str, int]
    phases_by_status: dict[str, int]
    usage: list[UsageGroup]


def fleet_stats(db: Database) -> FleetStats:
    with db.transaction() as s:
        plans = {k: int(v) for k, v in s.execute(select(Plan.status, func.count()).group_by(Plan.status))}
        phases = {k: int(v) for k, v in s.execute(select(Phase.status, func.count()).group_by(Phase.status))}
        cost = counted().label("counted")
        rows = s.execute(select(UsageRow.source, cost, func.coalesce(func.sum(UsageRow.input_tokens), 0),
                                func.coalesce(func.sum(UsageRow.output_tokens), 0), func.count())
                         .join(Phase, Phase.id == UsageRow.phase_id)
                         .group_by(UsageRow.source, cost))
        usage = [UsageGroup(src, bool(cost_), int(tin), int(tout), int(n)) for src, cost_, tin, tout, n in rows]
    return FleetStats(plans, phases, usage)
