"""A claimed phase: what the runner and its hooks know about the work in hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.plan.schema import BoardPlan, TeamPlan
from storage.read_models import PhaseRecord


@dataclass(frozen=True)
class PhaseWork:
    """A claimed phase: everything needed to run it, fenced by ``attempt``. ``inputs`` are
    its transitive inputs in plan order, read in the claim; ``texts`` the full text of each
    completed one (phase id -> text), never a summary; ``notes`` the plan's steering notes as
    the claim read them (those sent before the phase started)."""

    plan: BoardPlan | TeamPlan
    plan_id: str
    phase: PhaseRecord
    attempt: int
    inputs: list[PhaseRecord]
    texts: dict[str, str]
    notes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.phase.key
