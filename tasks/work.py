"""A claimed phase: what the runner and its hooks know about the work in hand."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.schema import BoardPlan, TeamPlan
from storage.records import PhaseRecord


@dataclass(frozen=True)
class PhaseWork:
    """A claimed phase: everything needed to run it, fenced by ``attempt``."""

    plan: BoardPlan | TeamPlan
    plan_id: str
    phase: PhaseRecord
    attempt: int
    inputs: list[PhaseRecord]
    all_phases: list[PhaseRecord]

    @property
    def key(self) -> str:
        return self.phase.key
