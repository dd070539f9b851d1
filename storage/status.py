"""The stored status vocabularies, defined once.

Values are what the ``status`` columns hold (``StrEnum``: a member *is* its string,
so rows written before these enums existed read back unchanged, and JSON shows the
plain value).

- phase: ``pending → running → completed | failed``; ``pending | running → cancelled``;
  ``skipped`` when a dependency failed. A person's seat (``meta.human``) is never run by a
  worker: ``pending → awaiting_input`` when it is ready (the coordinator's advance), then
  ``→ completed`` by the person's answer, ``→ failed`` (``input.timed_out``) at its deadline,
  or ``→ cancelled``. Final: completed, failed, cancelled, skipped.
- plan: ``running → completed | failed | cancelled | budget_exhausted``; a plan whose answer
  needs a person's approval ``running → awaiting_approval`` once its draft is written, then
  ``→ completed`` (approved), ``→ running`` (sent back once, for a revision) or ``→ cancelled``.
- webhook delivery: ``pending → delivered | failed`` (``failed``: retried until its horizon
  and never answered with a 2xx).
"""

from __future__ import annotations

from enum import StrEnum


class PhaseStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    AWAITING_INPUT = "awaiting_input"  # a person's seat, asked: no lease, no worker, no message

    @property
    def final(self) -> bool:
        return self in PHASE_FINAL


class PlanStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    AWAITING_APPROVAL = "awaiting_approval"  # its draft is written; a person approves or sends it back

    @property
    def final(self) -> bool:
        return self in PLAN_FINAL


class DeliveryStatus(StrEnum):
    """A webhook delivery's (:mod:`storage.webhook_outbox`)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self is not DeliveryStatus.PENDING


PHASE_FINAL: frozenset[PhaseStatus] = frozenset(
    {PhaseStatus.COMPLETED, PhaseStatus.FAILED, PhaseStatus.CANCELLED, PhaseStatus.SKIPPED})
PLAN_FINAL: frozenset[PlanStatus] = frozenset(
    {PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED, PlanStatus.BUDGET_EXHAUSTED})
#: the error code of a person's seat that nobody answered by its deadline (:mod:`storage.seats`)
TIMED_OUT = "input.timed_out"
# A phase that ended without a result: its dependents cannot use it.
GIVEN_UP: frozenset[PhaseStatus] = frozenset({PhaseStatus.FAILED, PhaseStatus.SKIPPED, PhaseStatus.CANCELLED})


class Outcome(StrEnum):
    """How a write that finishes a phase ended: the status it stored, or ``fenced``
    (another attempt owns the phase; nothing was written)."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    FENCED = "fenced"
    RELEASED = "released"  # the worker gave the phase back unfinished (shutdown); nothing final was written
