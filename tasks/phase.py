"""Task bodies: ``conclave.run_phase``, ``conclave.advance``, ``conclave.reconcile``, ``conclave.prune``.

They only call the coordinator's public functions. ``run_phase`` is safe to
deliver any number of times: the claim hands out one attempt, the completion is
fenced by it, and a message whose phase is final or leased by someone alive is
acknowledged without doing anything.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from celery import shared_task

from orchestrator.coordinator import PhaseWork
from orchestrator.errors import ServiceUnavailable
from orchestrator.logs import bind
from storage.status import Outcome
from tasks import runtime
from tasks.hooks import RecordUsage, StopWhenCancelled, TokenBudget
from tasks.lease import Lease
from tasks.llm.errors import LLMError
from tasks.llm.gateway import Gateway

log = logging.getLogger(__name__)


@shared_task(name="conclave.run_phase", bind=True, acks_late=True, max_retries=None)
def run_phase(self: Any, plan_id: str, phase_id: str, phase_key: str | None = None) -> str:
    rt = runtime.current(self.app)
    with bind(plan_id=plan_id, phase=phase_key):
        try:
            work = rt.coordinator.claim(phase_id, owner=rt.worker_id)
        except ServiceUnavailable as exc:  # nothing claimed yet: safe to redeliver later
            raise self.retry(exc=exc, countdown=min(2 ** min(self.request.retries, 5), 30)) from exc
        if work is None:
            return "noop"
        with bind(attempt=work.attempt), rt.leases.hold(phase_id, work.attempt) as lease:
            return execute(rt, work, lease)


def execute(rt: runtime.Runtime, work: PhaseWork, lease: Lease) -> str:
    coordinator = rt.coordinator
    gateway = Gateway(rt.providers, hooks=[StopWhenCancelled(lease), TokenBudget(coordinator, work),
                                           RecordUsage(coordinator, work)])
    seq = itertools.count()

    def on_text(text: str) -> None:
        coordinator.publish_text(work, next(seq), text)

    try:
        decided = coordinator.decide_without_model(work)  # e.g. a lexical divergence check
        if decided is not None:
            completion = decided
        else:
            spec, request = coordinator.prepare(work)
            completion = gateway.call(spec, request, on_text=on_text, should_stop=lease.should_stop)
            followup = coordinator.followup(work, request, completion)
            if followup is not None:
                completion = gateway.call(spec, followup, should_stop=lease.should_stop)
    except LLMError as exc:
        coordinator.fail(work, exc.code, exc.message)
        return Outcome.FAILED
    except ServiceUnavailable:
        raise  # the lease will expire and the reconciler hands the phase to another attempt
    except Exception as exc:  # a bug must fail the phase, not strand the plan
        log.exception("phase crashed", extra={"action": "phase.crashed"})
        coordinator.fail(work, "conclave.internal", f"{type(exc).__name__}: {exc}")
        return Outcome.FAILED
    return coordinator.complete(work, completion)


@shared_task(name="conclave.advance", bind=True, acks_late=True)
def advance(self: Any, plan_id: str) -> list[str]:
    with bind(plan_id=plan_id):
        return runtime.current(self.app).coordinator.advance(plan_id)


@shared_task(name="conclave.reconcile", bind=True, ignore_result=True)
def reconcile(self: Any) -> list[str]:
    return runtime.current(self.app).coordinator.reconcile()


@shared_task(name="conclave.prune", bind=True, ignore_result=True)
def prune(self: Any) -> int:
    return runtime.current(self.app).coordinator.prune()
