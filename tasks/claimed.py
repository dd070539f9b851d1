"""A claimed phase: what the runner and its hooks know about the work in hand."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage.read_models import PhaseRecord


@dataclass(frozen=True)
class PhaseWork:
    """A claimed phase: everything needed to run it, fenced by ``attempt``. ``inputs`` are
    its transitive inputs in plan order, read in the claim; ``texts`` the full text of each
    completed one (phase id -> text), never a summary."""

    plan: BoardPlan | TeamPlan
    plan_id: str
    phase: PhaseRecord
    attempt: int
    inputs: list[PhaseRecord]
    texts: dict[str, str]

    @property
    def key(self) -> str:
        return self.phase.key
