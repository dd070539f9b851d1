"""Pure decisions over stored phases: what is ready, what must be skipped, how a plan ends.

Everything here is derived from stored status on every call — there is no
in-memory state to lose or to get out of step (resume is just another call).
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.records import PhaseRecord, PlanRecord
from storage.status import GIVEN_UP, PhaseStatus, PlanStatus


def _tolerant(phase: PhaseRecord) -> bool:
    return bool(phase.meta.get("tolerate_failed_deps"))


def inputs_done(phase: PhaseRecord, by_key: dict[str, PhaseRecord]) -> bool:
    """Every dependency completed — or, for a phase that tolerates missing inputs
    (a board's round summary), every dependency final."""
    for key in phase.depends_on:
        dep = by_key.get(key)
        if dep is None:
            return False
        if dep.status == PhaseStatus.COMPLETED:
            continue
        if _tolerant(phase) and dep.status in GIVEN_UP:
            continue
        return False
    return True


def blocked(phase: PhaseRecord, by_key: dict[str, PhaseRecord]) -> bool:
    """A dependency ended without a result and the phase cannot do without it."""
    if _tolerant(phase):
        return False
    return any((d := by_key.get(k)) is not None and d.status in GIVEN_UP for k in phase.depends_on)


def ready(phases: Sequence[PhaseRecord]) -> list[PhaseRecord]:
    by_key = {p.key: p for p in phases}
    return [p for p in phases if p.status == PhaseStatus.PENDING and inputs_done(p, by_key)]


def to_skip(phases: Sequence[PhaseRecord]) -> list[str]:
    """Pending phases that can never run; skipping cascades on the next call."""
    by_key = {p.key: p for p in phases}
    return [p.key for p in phases if p.status == PhaseStatus.PENDING and blocked(p, by_key)]


def outcome(plan: PlanRecord, phases: Sequence[PhaseRecord]) -> tuple[PlanStatus, str | None, str | None] | None:
    """(status, error_code, error_message) once every phase is final, else None."""
    if any(not p.final for p in phases):
        return None
    if plan.cancel_requested:
        return PlanStatus.CANCELLED, "plan.cancelled", "the plan was cancelled"
    exhausted = [p for p in phases if p.error_code == "llm.budget_exhausted"]
    if exhausted:
        return PlanStatus.BUDGET_EXHAUSTED, "plan.budget_exhausted", exhausted[0].error_message
    terminal = [p for p in phases if p.meta.get("terminal")]
    if terminal and all(p.status == PhaseStatus.COMPLETED for p in terminal):
        return PlanStatus.COMPLETED, None, None
    failed = [p for p in phases if p.status == PhaseStatus.FAILED]
    first = failed[0] if failed else None
    message = f"phase {first.key} failed: {first.error_message}" if first else "the final phase did not run"
    return PlanStatus.FAILED, (first.error_code if first else "plan.incomplete"), message


def transitive_inputs(phase: PhaseRecord, by_key: dict[str, PhaseRecord]) -> list[PhaseRecord]:
    """Every phase this one depends on, directly or not, in plan order."""
    seen: set[str] = set()
    stack = list(phase.depends_on)
    while stack:
        key = stack.pop()
        if key in seen or key not in by_key:
            continue
        seen.add(key)
        stack.extend(by_key[key].depends_on)
    return sorted((by_key[k] for k in seen), key=lambda p: p.position)
