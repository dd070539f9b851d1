"""The coordinator: the control plane, the only code that decides what runs next.

:meth:`~Coordinator.submit`, :meth:`~Coordinator.fork`, :meth:`~Coordinator.advance`, :meth:`~Coordinator.resume`,
:meth:`~Coordinator.cancel`, :meth:`~Coordinator.reconcile`, :meth:`~Coordinator.prune`,
:meth:`~Coordinator.update`, and people's (:meth:`~Coordinator.answer`, :meth:`~Coordinator.approve`,
:meth:`~Coordinator.send_back`, :meth:`~Coordinator.steer`, :meth:`~Coordinator.expire_deadlines`:
:mod:`orchestrator.control.people`): the commands (what a plan is and said is read by
:class:`~orchestrator.control.reads.PlanReads`). Every decision is re-derived from stored
status; the dispatcher and the bus only carry triggers. Running a phase is the data plane's job
(``tasks.runner.PhaseRunner``); the two meet only in the database.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from orchestrator.briefing.ingest import ingest
from orchestrator.control.dispatch import Dispatcher
from orchestrator.control.idle import why_idle
from orchestrator.control.people import AnswerResult, ApprovalResult, People, SendBackResult, SteerResult
from orchestrator.control.reads import PlanReads
from orchestrator.core.bus import Bus, publish_events
from orchestrator.core.errors import InvalidPlan, PlanConflict, ServiceUnavailable, translate_storage
from orchestrator.core.settings import Settings
from orchestrator.logs import bind
from orchestrator.metrics import recorder
from orchestrator.plan import dag, forks
from orchestrator.plan import overrides as overrides_
from orchestrator.plan.canvas import compile_canvas, orphans
from orchestrator.plan.expand import expand
from orchestrator.plan.human import check_deadlines
from orchestrator.plan.registry import ModelResolver
from orchestrator.plan.schema import check_update, dump_plan, load_plan, parse_plan
from orchestrator.plan.spending import budget_view, exhausted_summary
from storage import Database, contents, fairshare, phases, plans, retention, spend, usage
from storage import exceptions as storage_errors
from storage.identity import DEFAULT_TENANT, Principal
from storage.models import utcnow
from storage.plans import PlanState
from storage.read_models import PlanRecord
from storage.status import PhaseStatus, PlanStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SubmitResult:
    plan_id: str
    created: bool
    enqueued: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ForkResult:
    """What :meth:`Coordinator.fork` did: the new plan (``created`` False when its ``task_id``
    was already submitted with this same fork), its source and the phase it runs anew from,
    the phases it copied (``reused``: their contents shared, no cost), the phases before
    ``from_phase`` that run anyway (``rerun``: what they would be sent changed) and the keys
    sent to workers."""

    plan_id: str
    created: bool
    source: str
    from_phase: str
    reused: list[str] = field(default_factory=list)
    rerun: list[str] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResumeResult:
    plan_id: str
    enqueued: list[str]
    retried: list[str]
    status: PlanStatus
    reason: str | None = None  # when nothing was enqueued, why (:func:`orchestrator.control.idle.why_idle`)


@dataclass(frozen=True)
class CancelResult:
    plan_id: str
    cancelled: list[str]
    status: PlanStatus


class Coordinator:
    def __init__(self, db: Database, settings: Settings, dispatcher: Dispatcher, bus: Bus) -> None:
        self.db = db
        self.settings = settings
        self.dispatcher = dispatcher
        self.bus = bus
        self.reads = PlanReads(db)  # the commands find plans as the read side does
        self.models = ModelResolver.from_settings(settings)  # raises InvalidConfiguration for a bad registry
        self.people = People(self)  # seats, approval, steering (orchestrator.control.people)

    # ---------------------------------------------------------------- control plane

    @translate_storage
    def submit(self, source: Any, *, principal: Principal | None = None) -> SubmitResult:
        """Check the plan against the models this deployment runs, store it and all its
        phases atomically in the principal's tenant (the default tenant without one),
        then enqueue what is ready. Idempotent per (tenant, ``task_id``)."""
        plan = load_plan(source, max_bytes=self.settings.max_plan_bytes)
        check_deadlines(plan, self.settings.max_respond_within)
        tenant = principal.tenant if principal else DEFAULT_TENANT
        if self.settings.tenant_budget(tenant) is None:
            self.models.check_plan(plan)
        else:  # its month is counted in dollars: every model needs a price
            self.models.check_plan(plan, tenant_budget=tenant)
        created = plans.create_plan(
            self.db, title=plan.title, kind=plan.kind, spec=dump_plan(plan), phases=expand(plan),
            task_id=plan.task_id, max_active=self.settings.max_active_plans, max_debates=plan.max_debates,
            labels=plan.labels, priority=plan.priority,
            tenant=tenant, principal=principal,
            submit_rate=self.settings.submit_rate, briefing=ingest(plan.briefing, self.settings),
            monthly_usd=self.settings.tenant_budget(tenant))
        plan_id = created.plan_id
        publish_events(self.bus, plan_id, created.events)
        with bind(plan_id=plan_id):
            log.info("plan %s %s", plan_id, "submitted" if created.created else "already submitted",
                     extra={"action": "plan.submitted"})
            try:
                enqueued = self.advance(plan_id)
            except ServiceUnavailable as exc:  # stored; the reconciler will send it
                log.warning("plan stored but not enqueued: %s", exc, extra={"action": "plan.enqueue_failed"})
                enqueued = []
        return SubmitResult(plan_id, created.created, enqueued)

    @translate_storage
    def fork(self, ref: str, from_phase: Any, overrides: Any = None, *,
             principal: Principal | None = None) -> ForkResult:
        """A what-if fork of the plan ``ref`` names (:mod:`orchestrator.plan.forks`): a new plan,
        ``overrides`` merged over the source's stored spec (:mod:`orchestrator.plan.overrides`),
        whose phases before ``from_phase`` are copied from the source where what they would be
        sent is unchanged, and whose other phases run. Submitted like any plan, in the source's
        tenant: the same model checks, admission (active cap, submit rate, the tenant's month),
        budget and idempotency per its own ``task_id``. ``principal`` reaches only its tenant's
        plans (another tenant's is not found) and is recorded. Field errors name ``from`` or
        ``overrides.<field>``."""
        source_id = self.reads.resolve(ref, principal)
        state = plans.load_state(self.db, source_id)
        source_plan = parse_plan(state.plan.spec)
        from_key = forks.check_from(state.phases, source_plan, from_phase)
        title = f"{state.plan.title} (fork from {from_key})"[:overrides_.MAX_TITLE]
        spec = overrides_.merged(state.plan.spec, overrides, title=title)
        try:
            plan = load_plan(spec, max_bytes=self.settings.max_plan_bytes)
            self.models.check_plan(plan, tenant_budget=state.plan.tenant
                                   if self.settings.tenant_budget(state.plan.tenant) is not None else None)
            briefing = ingest(plan.briefing, self.settings)
        except InvalidPlan as exc:
            raise overrides_.prefixed(exc) from None
        stored = contents.of_phases(self.db, [p.id for p in state.phases if p.status == PhaseStatus.COMPLETED])
        chosen = forks.select(plan, source_plan, state.phases, {k: v.text for k, v in stored.items()}, from_key,
                              self.models, source_id=source_id)
        fork = plans.Fork(source=source_id, from_phase=from_key, reused=chosen.reused, skipped=chosen.skipped,
                          events=chosen.events)
        created = plans.create_plan(
            self.db, title=plan.title, kind=plan.kind, spec=dump_plan(plan), phases=chosen.phases,
            task_id=plan.task_id, max_active=self.settings.max_active_plans, max_debates=plan.max_debates,
            labels=plan.labels, priority=plan.priority, tenant=state.plan.tenant, principal=principal,
            submit_rate=self.settings.submit_rate, briefing=briefing,
            monthly_usd=self.settings.tenant_budget(state.plan.tenant), fork=fork)
        publish_events(self.bus, created.plan_id, created.events)
        with bind(plan_id=created.plan_id):
            log.info("plan %s forked from %s at %s: %d phase(s) reused, %d before it rerun", created.plan_id,
                     source_id, from_key, len(chosen.reused), len(chosen.rerun), extra={"action": "plan.forked"})
            try:
                enqueued = self.advance(created.plan_id)
            except ServiceUnavailable as exc:  # stored; the reconciler will send it
                log.warning("fork stored but not enqueued: %s", exc, extra={"action": "plan.enqueue_failed"})
                enqueued = []
        if not created.created:  # its task_id was submitted before: say what that plan reused
            kept = plans.load_state(self.db, created.plan_id)
            return ForkResult(created.plan_id, False, kept.plan.forked_from or source_id,
                              kept.plan.fork_phase or from_key, [p.key for p in kept.phases if p.reused_from], [],
                              enqueued)
        return ForkResult(created.plan_id, True, source_id, from_key, list(chosen.reused), chosen.rerun, enqueued)

    @translate_storage
    def advance(self, plan_id: str, *, force: bool = False) -> list[str]:
        """Re-derive the plan's next steps from stored status and send them as one canvas:
        what is ready now and everything statically downstream of it (:mod:`orchestrator.plan.canvas`).

        Reads the plan once. Idempotent and safe to run concurrently: a head is sent only
        by the call that marks it enqueued. ``force`` re-sends pending phases however
        recently they were sent (resume). Returns the keys the canvas carries.
        """
        with bind(plan_id=plan_id):
            state = plans.load_state(self.db, plan_id)
            if state.plan.final or state.plan.status == PlanStatus.AWAITING_APPROVAL:
                return []  # a draft waiting for a person: nothing runs until they decide
            skipped, current = dag.skips(state.phases)
            if skipped:
                publish_events(self.bus, plan_id, phases.skip_phases(self.db, plan_id, skipped))
                state = PlanState(state.plan, current)
            if self._finish_if_done(state):
                return []
            self.people.ask(state)  # people's seats whose turn came are asked, never sent
            now = utcnow()
            cutoff = now - timedelta(seconds=self.settings.requeue_after)
            heads = dag.sendable(state.phases, now=now, cutoff=cutoff, force=force)
            if not heads:
                return []
            marked = set(phases.mark_enqueued(self.db, [p.id for p in heads], stale_before=None if force else cutoff))
            heads = [p for p in heads if p.id in marked]
            if not heads:
                return []
            # a head sent before (or running) is being re-sent: its earlier canvas is broken,
            # so what that canvas would have triggered downstream is sent again too
            resent = [p.key for p in heads if force or p.enqueued_at is not None or p.status == PhaseStatus.RUNNING]
            canvas = compile_canvas(plan_id, state.phases, heads, resent=resent)
            phases.mark_enqueued(self.db, [r.phase_id for r in canvas.runs if r.phase_id not in marked],
                                 stale_before=None)
            phases.release_enqueued(self.db, [p.id for p in orphans(state.phases, resent,
                                                                     [r.key for r in canvas.runs])])
            try:
                self.dispatcher.send(canvas)
            except Exception as exc:
                phases.release_enqueued(self.db, [r.phase_id for r in canvas.runs])
                raise ServiceUnavailable(f"broker unavailable: {exc}") from exc
            recorder().taken_over(sum(1 for p in heads if p.status == PhaseStatus.RUNNING))  # their leases expired
            keys = [r.key for r in canvas.runs]
            log.info("enqueued %s", ", ".join(keys), extra={"action": "plan.enqueued"})
            return keys

    def _finish_if_done(self, state: PlanState) -> bool:
        if dag.outcome(state.plan, state.phases) is not None:  # a failed revision falls back to its draft
            state = self.people.fall_back(state)
        result = dag.outcome(state.plan, state.phases)
        if result is None:
            return False
        status, code, message = result
        if status == PlanStatus.AWAITING_APPROVAL:
            self.people.hold(state)
            return True
        if status == PlanStatus.BUDGET_EXHAUSTED:
            spent = usage.spent(self.db, state.plan.id)
            summary = exhausted_summary(budget_view(state.plan.spec.get("budget"), *spent))
            message = f"{summary}: {message}" if summary else message
        finished = plans.finish_plan(self.db, state.plan.id, status, error_code=code, error_message=message)
        if finished is not None:
            log.info("plan finished: %s", status, extra={"action": "plan.finished"})
            publish_events(self.bus, state.plan.id, [finished])
        return True

    @translate_storage
    def resume(self, ref: str, *, retry_failed: bool = False, principal: Principal | None = None) -> ResumeResult:
        """Rebuild from stored status: final phases stay final (failed ones rerun only with
        ``retry_failed``, recorded on the phase); the ready set is enqueued. One resume per
        plan at a time across all processes — others get :class:`ResumeInProgress`.
        ``principal`` (None: the operator) finds only its tenant's plans and is recorded."""
        plan_id = self.reads.resolve(ref, principal)
        with bind(plan_id=plan_id):
            owner = uuid.uuid4().hex
            try:
                plans.acquire_resume_guard(self.db, plan_id, owner=owner,
                                           hold=timedelta(seconds=self.settings.resume_guard_seconds))
            except storage_errors.Busy:
                state = plans.load_state(self.db, plan_id)
                if state.plan.status not in (PlanStatus.COMPLETED, PlanStatus.CANCELLED):
                    raise
                # final for good (reopen leaves it alone): the answer does not depend on the other resume
                return ResumeResult(plan_id, [], [], state.plan.status,
                                    why_idle(state, now=utcnow(), retry_failed=retry_failed))
            reopened = plans.reopen(self.db, plan_id, retry_failed=retry_failed, actor=principal)
            publish_events(self.bus, plan_id, reopened.events)
            enqueued = self.advance(plan_id, force=True)
            reason = None
            if not enqueued:  # nothing in flight for the guard to protect: the next resume may go at once
                plans.release_resume_guard(self.db, plan_id, owner)
                reason = why_idle(plans.load_state(self.db, plan_id), now=utcnow(), retry_failed=retry_failed)
            status = plans.get_plan(self.db, plan_id).status
            log.info("resumed: enqueued %s, retried %s", enqueued, reopened.keys, extra={"action": "plan.resumed"})
            return ResumeResult(plan_id, enqueued, reopened.keys, status, reason)

    @translate_storage
    def cancel(self, ref: str, *, principal: Principal | None = None) -> CancelResult:
        """Set the stored cancel flag; queued phases end cancelled without running, running
        ones end cancelled at their next safe point. Never a success after a cancel."""
        plan_id = self.reads.resolve(ref, principal)
        with bind(plan_id=plan_id):
            cancelled = plans.request_cancel(self.db, plan_id, actor=principal)
            publish_events(self.bus, plan_id, cancelled.events)
            self.advance(plan_id)
            return CancelResult(plan_id, cancelled.keys, plans.get_plan(self.db, plan_id).status)

    # ---------------------------------------------------------------- people at the table

    def answer(self, ref: str, key: str, text: object, *, idempotency_key: object = None,
               principal: Principal | None = None) -> AnswerResult:
        """A person's answer to seat ``key`` (:meth:`orchestrator.control.people.People.answer`)."""
        return self.people.answer(ref, key, text, idempotency_key=idempotency_key, principal=principal)

    def approve(self, ref: str, *, principal: Principal | None = None) -> ApprovalResult:
        """Approve the plan's draft (:meth:`orchestrator.control.people.People.approve`)."""
        return self.people.approve(ref, principal=principal)

    def send_back(self, ref: str, note: object, *, principal: Principal | None = None) -> SendBackResult:
        """Send the draft back once with a note (:meth:`orchestrator.control.people.People.send_back`)."""
        return self.people.send_back(ref, note, principal=principal)

    def steer(self, ref: str, note: object, *, principal: Principal | None = None) -> SteerResult:
        """A note for the phases still to start (:meth:`orchestrator.control.people.People.steer`)."""
        return self.people.steer(ref, note, principal=principal)

    def expire_deadlines(self, *, now: datetime | None = None) -> dict[str, list[str]]:
        """End the seats past their deadline, once each (:meth:`orchestrator.control.people.People.expire`)."""
        return self.people.expire(now=now)

    @translate_storage
    def reconcile(self) -> list[str]:
        """Beat: re-derive the canvas of every plan that stopped moving, after releasing what
        dead attempts still held reserved (:func:`storage.spend.release_stale`) and, under fair
        share, the held phases that fit the free slots (:func:`storage.fairshare.release_held`)."""
        released = spend.release_stale(self.db)
        if released:
            log.info("released %d reservation(s) of attempts that no longer run", released,
                     extra={"action": "reconcile.released"})
        share = fairshare.policy_of(self.settings)
        freed = fairshare.release_held(self.db, share) if share is not None else []
        if freed:  # the backstop: a release lost with its worker, a slot a limit change freed
            log.info("released %d held phase(s) into free slots", len(freed),
                     extra={"action": "reconcile.released_held"})
        stalled = plans.stalled_plan_ids(self.db, now=utcnow(),
                                         requeue_after=timedelta(seconds=self.settings.requeue_after))
        stalled = [*dict.fromkeys(freed), *(p for p in stalled if p not in freed)]
        nudged = []
        recorder().reconciled("stalled", len(stalled))
        for plan_id in stalled:
            try:
                if self.advance(plan_id):
                    nudged.append(plan_id)
            except ServiceUnavailable as exc:
                recorder().reconciled("failed")
                log.warning("reconcile of %s failed: %s", plan_id, exc, extra={"action": "reconcile.failed"})
        recorder().reconciled("nudged", len(nudged))
        if nudged:
            log.info("reconciled %d plan(s)", len(nudged), extra={"action": "reconcile.nudged"})
        return nudged

    @translate_storage
    def prune(self, *, every: float | None = None, now: datetime | None = None) -> retention.Pruned | None:
        """Apply the retention policy (:mod:`storage.retention`). With ``every``, only if no
        process of the fleet has within ``every`` seconds (None then: not due)."""
        now = now or utcnow()
        if every is not None and not retention.claim(self.db, every, now=now):
            return None
        keep = self.settings.retain_finished_days
        done = retention.prune(
            self.db, older_than=now - timedelta(days=self.settings.retention_days),
            max_events_per_plan=self.settings.max_events_per_plan,
            delete_before=now - timedelta(days=keep) if keep else None,
            batch=self.settings.retention_batch, per_pass=self.settings.retention_pass_plans, now=now)
        recorder().pruned(done.events)
        if done.events or done.plans:
            log.info("retention: %d finished plan(s) deleted, %d event(s) pruned", done.plans, done.events,
                     extra={"action": "retention.pruned"})
        return done

    @translate_storage
    def update(self, ref: str, changes: dict[str, Any], *, principal: Principal | None = None) -> PlanRecord:
        """Change a plan's title, labels or (while it runs) ``max_debates`` and ``priority``: ``changes`` holds
        only the fields the caller sent, merged with the stored plan and validated again as a
        whole before anything is stored (:func:`orchestrator.plan.schema.check_update`)."""
        plan_id = self.reads.resolve(ref, principal)
        current = plans.get_plan(self.db, plan_id)
        merged = check_update(current.title, current.labels, current.max_debates, changes, current.priority)
        try:
            updated = plans.update_plan(self.db, plan_id, merged, actor=principal)
        except storage_errors.Conflict as exc:  # max_debates or priority of a plan that has ended
            field_name = "priority" if "priority" in merged else "max_debates"
            raise PlanConflict(str(exc), details=[{"field": field_name, "message": "the plan has ended"}]) from exc
        publish_events(self.bus, plan_id, updated.events)
        return updated.plan
