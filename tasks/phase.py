"""Task bodies: ``conclave.run_phase``, ``conclave.advance``, ``conclave.reconcile``, ``conclave.prune``.

Thin on purpose: they call only the phase runner's and the coordinator's public
methods. ``run_phase`` is safe to deliver any number of times: the claim hands out
one attempt, the completion is fenced by it, and a message whose phase is final or
leased by someone alive is acknowledged without doing anything.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from orchestrator import tracing
from orchestrator.core.errors import ServiceUnavailable
from orchestrator.logs import bind
from tasks import runtime
from tasks.housekeeping import PRUNE_EVERY


@shared_task(name="conclave.run_phase", bind=True, acks_late=True, max_retries=None)
def run_phase(self: Any, plan_id: str, phase_id: str, phase_key: str | None = None, advance: bool = False) -> str:
    """``advance``: the canvas's ``advance`` that follows this run, done here once the phase
    is stored (or found nothing to do), as the chain's next task would have — one task fewer."""
    outcome = _run_phase(self, plan_id, phase_id, phase_key)
    if advance:
        with bind(plan_id=plan_id):
            runtime.current(self.app).coordinator.advance(plan_id)
    return outcome


def _run_phase(self: Any, plan_id: str, phase_id: str, phase_key: str | None) -> str:
    rt = runtime.current(self.app)
    with bind(plan_id=plan_id, phase=phase_key, worker=self.request.hostname):
        try:
            work = rt.runner.claim(phase_id, owner=rt.worker_id, plan_id=plan_id)
        except ServiceUnavailable as exc:  # nothing claimed yet: safe to redeliver later
            raise self.retry(exc=exc, countdown=min(2 ** min(self.request.retries, 5), 30)) from exc
        if work is None:
            return "noop"
        with bind(attempt=work.attempt), rt.leases.hold(phase_id, work.attempt) as lease, \
                tracing.phase_span(plan_id=work.plan_id, phase_id=phase_id, key=work.key, attempt=work.attempt,
                                   kind=work.phase.kind) as span:
            outcome = rt.runner.execute(work, lease)
            span.outcome(outcome)
            return outcome


@shared_task(name="conclave.advance", bind=True, acks_late=True)
def advance(self: Any, plan_id: str) -> list[str]:
    with bind(plan_id=plan_id):
        return runtime.current(self.app).coordinator.advance(plan_id)


@shared_task(name="conclave.reconcile", bind=True, ignore_result=True)
def reconcile(self: Any) -> bool:
    """Beat's reconcile: a sweep under the same fleet-wide lock as every worker's own."""
    return runtime.current(self.app).housekeeper.sweep()


@shared_task(name="conclave.prune", bind=True, ignore_result=True)
def prune(self: Any) -> int:
    """Retention, when it is due fleet-wide (the housekeepers share the same schedule)."""
    done = runtime.current(self.app).coordinator.prune(every=PRUNE_EVERY)
    return done.events if done else 0
