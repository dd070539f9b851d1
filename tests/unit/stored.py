"""Stored-phase records for unit tests, built from real plans the way ``submit`` stores them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from orchestrator.plan.expand import expand
from orchestrator.plan.schema import BoardPlan, TeamPlan, load_plan
from storage.read_models import NewPhase, PhaseRecord

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str, **changes: Any) -> BoardPlan | TeamPlan:
    """An example plan (``board``/``team``), optionally with top-level fields changed. It runs
    as the README runs it, on the example registry (``examples/models.yaml``, whose stances
    make the team's experts disagree): its models are the plan's here, where no registry is."""
    plan = load_plan(EXAMPLES / f"{name}.yaml").model_dump(mode="json")
    models = yaml.safe_load((EXAMPLES / "models.yaml").read_text())["models"]
    return load_plan({**plan, "models": plan.get("models") or models, **changes})


def record(p: NewPhase, status: str = "completed") -> PhaseRecord:
    return PhaseRecord(
        id=f"id-{p.key}", plan_id="plan-1", key=p.key, kind=p.kind, expert=p.expert, round=p.round,
        group_key=p.group_key, position=p.position, depends_on=list(p.depends_on), inputs=list(p.inputs),
        meta=dict(p.meta),
        status=status, attempt=1 if status != "pending" else 0, lease_owner=None, lease_expires_at=None,
        enqueued_at=None, retries_requested=0, summary=None, truncated=False, error_code=None,
        error_message=None, started_at=None, finished_at=None)


def stored(plan: BoardPlan | TeamPlan, *, pending: Iterable[str] = (),
           failed: Iterable[str] = ()) -> list[PhaseRecord]:
    """Every phase of ``plan`` as stored, completed unless named ``pending`` or ``failed``."""
    waiting, gone = set(pending), set(failed)
    return [record(p, "pending" if p.key in waiting else "failed" if p.key in gone else "completed")
            for p in expand(plan)]



def inputs_of(phase: PhaseRecord, phases: Iterable[PhaseRecord]) -> list[PhaseRecord]:
    """The phase's stored transitive inputs as records in plan order — what its claim reads."""
    return sorted((p for p in phases if p.key in phase.inputs), key=lambda p: p.position)
