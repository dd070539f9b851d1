"""Why a resume sent nothing: one sentence a user can act on, derived from stored status.

A resume re-sends every phase that could run (:meth:`Coordinator.resume
<orchestrator.control.coordinator.Coordinator.resume>`); when there is none, the plan is
final, is being cancelled, waits on phases that hold a live lease (a worker is on them —
or was, until its lease runs out), waits for a person (a seat's answer, until its deadline, or
an approval), or waits on a failure that only ``retry_failed`` reruns.
"""

from __future__ import annotations

from datetime import datetime

from orchestrator.plan.dag import awaited
from storage.plans import PlanState
from storage.status import PhaseStatus, PlanStatus


def why_idle(state: PlanState, *, now: datetime, retry_failed: bool) -> str:
    """Why nothing of ``state``'s plan can be sent now."""
    plan = state.plan
    if plan.status == PlanStatus.CANCELLED:
        return "the plan was cancelled: a cancelled plan stays final (submit it again to rerun it)"
    if plan.status == PlanStatus.COMPLETED:
        return "the plan completed: nothing is left to run"
    if plan.status in (PlanStatus.FAILED, PlanStatus.BUDGET_EXHAUSTED):
        what = f"the plan ended {plan.status}" + (f" ({plan.error_code})" if plan.error_code else "")
        if retry_failed:
            return f"{what} and has no failed phase to run again"
        return f"{what}: resume with --retry-failed (retry_failed) to run its failed phases again"
    if plan.status == PlanStatus.AWAITING_APPROVAL:
        draft = [p.key for p in state.phases if p.meta.get("terminal")]
        return (f"waiting for approval of its draft ({draft[-1] if draft else 'the answer'}) since "
                f"{plan.updated_at:%Y-%m-%d %H:%M:%S} UTC: approve it (conclave approve {plan.id}) or send it back "
                f"once with a note (conclave send-back {plan.id} NOTE)")
    if plan.cancel_requested:
        return "the plan is being cancelled: its running phases stop at their next safe point"
    leased = sorted((p for p in state.phases if p.status == PhaseStatus.RUNNING and p.lease_expires_at is not None
                     and p.lease_expires_at > now), key=lambda p: p.lease_expires_at or now)
    if leased:
        until = max(p.lease_expires_at or now for p in leased)
        keys = ", ".join(p.key for p in leased)
        return (f"running: {keys} held by a worker whose lease lasts until {until:%Y-%m-%d %H:%M:%S} UTC "
                f"({(until - now).total_seconds():.0f}s); if that worker died, resume after then, or let "
                f"the reconciler hand it on")
    seats = awaited(state.phases)
    if seats:
        who = "; ".join(f"{p.expert} ({p.key})" + (f" until {p.due_at:%Y-%m-%d %H:%M:%S} UTC" if p.due_at else "")
                        for p in seats[:5]) + (" …" if len(seats) > 5 else "")
        return (f"waiting for input from {who}: nothing runs until they answer (conclave answer {plan.id} KEY) "
                f"or their time is up")
    waiting = [p.key for p in state.phases if p.status == PhaseStatus.PENDING]
    if waiting:
        return f"nothing is ready: {', '.join(waiting[:5])}{' …' if len(waiting) > 5 else ''} wait on their inputs"
    return "nothing is left to send: every phase has ended"
