"""The coordinator: the only code that decides what runs next.

Control plane (API, CLI, beat): :meth:`submit`, :meth:`advance`, :meth:`resume`,
:meth:`cancel`, :meth:`reconcile`. Data plane (task bodies): :meth:`claim`,
:meth:`decide_without_model`, :meth:`prepare`, :meth:`record_usage`,
:meth:`complete`, :meth:`fail`, :meth:`renew`. Every decision is re-derived from
stored status; the broker and the bus only carry triggers.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from orchestrator import dag
from orchestrator.briefing.ingest import ingest
from orchestrator.bus import Bus
from orchestrator.canvas import Canvas, compile_canvas
from orchestrator.debates import MalformedVerdict, debate_insertion, parse_verdict
from orchestrator.divergence import lexical_verdict
from orchestrator.errors import ServiceUnavailable, storage_boundary, translate_storage
from orchestrator.expand import expand
from orchestrator.logs import bind
from orchestrator.prompts import build_request, divergence_retry
from orchestrator.schema import BoardPlan, TeamPlan, dump_plan, load_plan, parse_plan
from orchestrator.settings import Settings
from storage import Database, Unavailable, contents, events, phases, plans, retention, usage
from storage.models import utcnow
from storage.plans import PlanState
from storage.records import EventRecord, PhaseRecord, PlanRecord
from tasks.llm.types import ChatRequest, Completion, ModelSpec, Usage

log = logging.getLogger(__name__)
T = TypeVar("T")


class Dispatcher(Protocol):
    """Sends a compiled canvas to the broker. Raises on broker failure."""

    def send(self, canvas: Canvas) -> None: ...


@dataclass(frozen=True)
class SubmitResult:
    plan_id: str
    created: bool
    enqueued: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResumeResult:
    plan_id: str
    enqueued: list[str]
    retried: list[str]
    status: str


@dataclass(frozen=True)
class CancelResult:
    plan_id: str
    cancelled: list[str]
    status: str


@dataclass(frozen=True)
class PhaseWork:
    """A claimed phase: everything a task needs to run it, fenced by ``attempt``."""

    plan: BoardPlan | TeamPlan
    plan_id: str
    phase: PhaseRecord
    attempt: int
    inputs: list[PhaseRecord]
    all_phases: list[PhaseRecord]

    @property
    def key(self) -> str:
        return self.phase.key


def as_text(result: object) -> str:
    """A result as stored text. Results that are not strings (a provider returning
    structured content, None) are serialised — never sliced or measured as strings."""
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    return json.dumps(result, ensure_ascii=False, default=str, indent=2)


class Coordinator:
    def __init__(self, db: Database, settings: Settings, dispatcher: Dispatcher, bus: Bus) -> None:
        self.db = db
        self.settings = settings
        self.dispatcher = dispatcher
        self.bus = bus

    # ---------------------------------------------------------------- control plane

    @translate_storage
    def submit(self, source: Any) -> SubmitResult:
        """Store a plan and all its phases atomically, then enqueue what is ready.
        Idempotent per ``task_id``."""
        plan = load_plan(source, max_bytes=self.settings.max_plan_bytes)
        plan_id, created = plans.create_plan(
            self.db, title=plan.title, kind=plan.kind, spec=dump_plan(plan), phases=expand(plan),
            task_id=plan.task_id, max_active=self.settings.max_active_plans,
            briefing=ingest(plan.briefing, self.settings))
        with bind(plan_id=plan_id):
            log.info("plan %s %s", plan_id, "submitted" if created else "already submitted",
                     extra={"action": "plan.submitted"})
            try:
                enqueued = self.advance(plan_id)
            except ServiceUnavailable as exc:  # stored; the reconciler will send it
                log.warning("plan stored but not enqueued: %s", exc, extra={"action": "plan.enqueue_failed"})
                enqueued = []
        return SubmitResult(plan_id, created, enqueued)

    @translate_storage
    def advance(self, plan_id: str, *, force: bool = False) -> list[str]:
        """Re-derive the plan's next steps from stored status and enqueue them.

        Idempotent and safe to run concurrently: a phase is sent only by the call
        that marks it enqueued. ``force`` re-sends pending phases however recently
        they were sent (resume). Returns the keys enqueued.
        """
        with bind(plan_id=plan_id):
            state = plans.load_state(self.db, plan_id)
            if state.plan.final:
                return []
            state = self._skip_blocked(state)
            if self._finish_if_done(state):
                return []
            now = utcnow()
            heads = dag.ready(state.phases) + [
                p for p in state.phases
                if p.status == "running" and p.lease_expires_at is not None and p.lease_expires_at < now]
            if not heads:
                return []
            stale_before = None if force else now - timedelta(seconds=self.settings.requeue_after)
            marked = set(phases.mark_enqueued(self.db, [p.id for p in heads], stale_before=stale_before))
            heads = [p for p in heads if p.id in marked]
            if not heads:
                return []
            canvas = compile_canvas(plan_id, state.phases, heads)
            successors = [r.phase_id for r in canvas.runs if r.phase_id not in marked]
            phases.mark_enqueued(self.db, successors, stale_before=None)
            try:
                self.dispatcher.send(canvas)
            except Exception as exc:
                for p in heads:
                    phases.release_enqueued(self.db, p.id)
                raise ServiceUnavailable(f"broker unavailable: {exc}") from exc
            keys = [r.key for r in canvas.runs]
            log.info("enqueued %s", ", ".join(keys), extra={"action": "plan.enqueued"})
            return keys

    def _skip_blocked(self, state: PlanState) -> PlanState:
        exhausted = any(p.error_code == "llm.budget_exhausted" for p in state.phases)
        while True:
            if exhausted:
                keys = [p.key for p in state.phases if p.status == "pending"]
                reason = "the plan's token budget is exhausted"
            else:
                keys = dag.to_skip(state.phases)
                reason = "a phase it depends on did not complete"
            if not keys:
                return state
            phases.skip_phases(self.db, state.plan.id, keys, reason)
            state = plans.load_state(self.db, state.plan.id)

    def _finish_if_done(self, state: PlanState) -> bool:
        result = dag.outcome(state.plan, state.phases)
        if result is None:
            return False
        status, code, message = result
        if plans.finish_plan(self.db, state.plan.id, status, error_code=code, error_message=message):
            log.info("plan finished: %s", status, extra={"action": "plan.finished"})
            self.bus.publish(state.plan.id, {"type": "plan_finished", "status": status, "error": message})
        return True

    @translate_storage
    def resume(self, ref: str, *, retry_failed: bool = False) -> ResumeResult:
        """Rebuild from stored status: final phases stay final (failed ones rerun only with
        ``retry_failed``, recorded on the phase); the ready set is enqueued. One resume per
        plan at a time across all processes — others get :class:`ResumeInProgress`."""
        plan_id = plans.resolve(self.db, ref)
        with bind(plan_id=plan_id):
            plans.acquire_resume_guard(self.db, plan_id, owner=uuid.uuid4().hex,
                                       hold=timedelta(seconds=self.settings.resume_guard_seconds))
            retried = plans.reopen(self.db, plan_id, retry_failed=retry_failed)
            enqueued = self.advance(plan_id, force=True)
            status = plans.get_plan(self.db, plan_id).status
            log.info("resumed: enqueued %s, retried %s", enqueued, retried, extra={"action": "plan.resumed"})
            return ResumeResult(plan_id, enqueued, retried, status)

    @translate_storage
    def cancel(self, ref: str) -> CancelResult:
        """Set the stored cancel flag; queued phases end cancelled without running, running
        ones end cancelled at their next safe point. Never a success after a cancel."""
        plan_id = plans.resolve(self.db, ref)
        with bind(plan_id=plan_id):
            keys = plans.request_cancel(self.db, plan_id)
            self.bus.publish(plan_id, {"type": "cancel_requested", "cancelled": keys})
            self.advance(plan_id)
            return CancelResult(plan_id, keys, plans.get_plan(self.db, plan_id).status)

    @translate_storage
    def reconcile(self) -> list[str]:
        """Beat: re-derive the canvas of every plan that stopped moving."""
        stalled = plans.stalled_plan_ids(self.db, now=utcnow(),
                                         requeue_after=timedelta(seconds=self.settings.requeue_after))
        nudged = []
        for plan_id in stalled:
            try:
                if self.advance(plan_id):
                    nudged.append(plan_id)
            except ServiceUnavailable as exc:
                log.warning("reconcile of %s failed: %s", plan_id, exc, extra={"action": "reconcile.failed"})
        if nudged:
            log.info("reconciled %d plan(s)", len(nudged), extra={"action": "reconcile.nudged"})
        return nudged

    @translate_storage
    def prune(self) -> int:
        """Beat: apply the retention policy to finished plans."""
        cutoff = utcnow() - timedelta(days=self.settings.retention_days)
        n = retention.prune(self.db, older_than=cutoff, max_events_per_plan=self.settings.max_events_per_plan)
        if n:
            log.info("pruned %d event(s)", n, extra={"action": "retention.pruned"})
        return n

    # ---------------------------------------------------------------- read side

    @translate_storage
    def state(self, ref: str) -> PlanState:
        return plans.load_state(self.db, plans.resolve(self.db, ref))

    @translate_storage
    def result_text(self, ref: str) -> str | None:
        state = self.state(ref)
        terminal = [p for p in state.phases if p.meta.get("terminal")]
        return contents.read_text(self.db, state.plan.id, terminal[-1].key) if terminal else None

    @translate_storage
    def phase_text(self, plan_id: str, key: str) -> str | None:
        return contents.read_text(self.db, plan_id, key)

    @translate_storage
    def list_events(self, plan_id: str, after: int = 0, limit: int = 1000) -> list[EventRecord]:
        return events.list_events(self.db, plan_id, after=after, limit=limit)

    @translate_storage
    def get_plan(self, ref: str) -> PlanRecord:
        return plans.get_plan(self.db, plans.resolve(self.db, ref))

    # ---------------------------------------------------------------- data plane

    def claim(self, phase_id: str, owner: str) -> PhaseWork | None:
        """Claim a phase for this worker, or None when there is nothing to do."""
        with storage_boundary():
            state = plans.state_of_phase(self.db, phase_id)
            if state is None:
                return None
            plan_id = state.plan.id
            by_key = state.by_key()
            phase = next((p for p in state.phases if p.id == phase_id), None)
            if phase is None or phase.final or state.plan.final:
                return None
            if not dag.inputs_done(phase, by_key):
                phases.release_enqueued(self.db, phase_id)  # the next advance will send it
                return None
            claim = phases.claim_phase(self.db, phase_id, owner=owner,
                                       lease=timedelta(seconds=self.settings.lease_seconds))
        if claim is None:
            return None
        self.bus.publish(plan_id, {"type": "phase_started", "phase": phase.key, "expert": phase.expert,
                                   "kind": phase.kind, "round": phase.round, "attempt": claim.attempt,
                                   "k": sum(1 for p in state.phases if p.final), "n": len(state.phases)})
        return PhaseWork(parse_plan(state.plan.spec), plan_id, claim.phase, claim.attempt,
                         dag.transitive_inputs(phase, by_key), state.phases)

    def decide_without_model(self, work: PhaseWork) -> Completion | None:
        """The result of a phase that needs no model call, or None: a divergence check of a
        plan with ``divergence: lexical`` reads its experts' stances from their full texts
        (:mod:`orchestrator.divergence`) — deterministic, no tokens, no usage row."""
        plan = work.plan
        if work.phase.kind != "divergence" or not isinstance(plan, TeamPlan) or plan.divergence != "lexical":
            return None
        examined = [p for p in work.inputs if p.key in work.phase.meta.get("examines", []) and p.expert]
        with storage_boundary():
            texts = contents.read_texts(self.db, [p.id for p in examined if p.status == "completed"])
        verdict, stances = lexical_verdict(plan.question, [(p.expert or "", texts[p.id])
                                                           for p in examined if p.id in texts])
        answer = {**verdict.model_dump(), "method": "lexical", "stances": stances}
        return Completion(text=json.dumps(answer), usage=Usage(0, 0, "estimated", "lexical"),
                          finish_reason="lexical")

    def prepare(self, work: PhaseWork) -> tuple[ModelSpec, ChatRequest]:
        """The model and the request for a claimed phase, built from the full text of
        its inputs (resolved from the content store, never from summaries)."""
        with storage_boundary():
            texts = contents.read_texts(self.db, [p.id for p in work.inputs if p.status == "completed"])
        expert = work.plan.expert(work.phase.expert or "")
        return self.model_spec(work.plan, expert.model), build_request(work.plan, work.phase, work.inputs, texts)

    def model_spec(self, plan: BoardPlan | TeamPlan, name: str) -> ModelSpec:
        cfg = plan.models.get(name)
        s = self.settings
        if cfg is None:
            return ModelSpec(name=name, provider=s.default_provider, first_chunk_timeout=s.first_chunk_timeout,
                             idle_timeout=s.idle_timeout, deadline=s.call_deadline,
                             max_output_tokens=s.max_output_tokens, context_window=s.context_window,
                             options={"latency": s.offline_latency})
        options = dict(cfg.options)
        if cfg.provider == "offline":
            options.setdefault("latency", s.offline_latency)
        return ModelSpec(
            name=name, provider=cfg.provider, model=cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
            first_chunk_timeout=cfg.first_chunk_timeout or s.first_chunk_timeout,
            idle_timeout=cfg.idle_timeout or s.idle_timeout, deadline=cfg.deadline or s.call_deadline,
            max_output_tokens=cfg.max_output_tokens or s.max_output_tokens,
            context_window=cfg.context_window or s.context_window, temperature=cfg.temperature,
            max_retries=cfg.max_retries, options=options)

    def followup(self, work: PhaseWork, request: ChatRequest, completion: Completion) -> ChatRequest | None:
        """A corrective request when a structured answer is malformed (once), else None."""
        if work.phase.kind != "divergence" or request.hints.get("retry"):
            return None
        try:
            parse_verdict(completion.text)
        except MalformedVerdict as exc:
            return divergence_retry(request, str(exc))
        return None

    def spent_tokens(self, plan_id: str) -> int:
        with storage_boundary():
            return usage.spent_tokens(self.db, plan_id)

    def record_usage(self, work: PhaseWork, *, seq: int, purpose: str, spec: ModelSpec, used: Usage) -> None:
        """Write one call's usage as soon as it is known — idempotent per (phase, attempt, seq)."""
        self._durably(lambda: usage.record_usage(
            self.db, plan_id=work.plan_id, phase_id=work.phase.id, attempt=work.attempt, seq=seq,
            purpose=purpose, model=f"{spec.provider}:{spec.model or spec.name}", input_tokens=used.input_tokens,
            output_tokens=used.output_tokens, source=used.source, method=used.method))

    def complete(self, work: PhaseWork, completion: Completion) -> str:
        """Store the result (see :func:`storage.phases.complete_phase` for the order of
        writes), then publish. Returns completed | cancelled | fenced."""
        text = as_text(completion.text)
        insertion, max_groups = None, None
        if work.phase.kind == "divergence" and isinstance(work.plan, TeamPlan):
            try:
                verdict = parse_verdict(text)
            except MalformedVerdict:
                verdict = None
                log.warning("divergence verdict malformed after retry; no debate",
                            extra={"action": "debate.no_verdict"})
            if verdict is not None:
                insertion = debate_insertion(work.plan, work.phase, verdict, work.all_phases)
                max_groups = work.plan.max_debates
        summary = text if len(text) <= self.settings.summary_chars else text[: self.settings.summary_chars] + "…"
        data = {"attempt": work.attempt, "expert": work.phase.expert,
                "kind": work.phase.kind, "round": work.phase.round, "chars": len(text),
                "truncated": completion.truncated, "fallback": completion.fallback,
                "offloaded": len(text) > self.settings.inline_limit, "summary": summary}
        done = self._durably(lambda: phases.complete_phase(
            self.db, phase_id=work.phase.id, attempt=work.attempt, text=text, summary=summary,
            truncated=completion.truncated, event_data=data, insertion=insertion, max_groups=max_groups))
        outcome = done.status
        if outcome == "fenced":
            log.warning("result discarded: another attempt owns the phase", extra={"action": "phase.fenced"})
            return outcome
        self.bus.publish(work.plan_id, {"type": f"phase_{outcome}", "phase": work.key, **data, **done.progress})
        log.info("phase %s %s (%d chars)", work.key, outcome, len(text), extra={"action": f"phase.{outcome}"})
        return outcome

    def fail(self, work: PhaseWork, code: str, message: str) -> None:
        done = self._durably(lambda: phases.fail_phase(self.db, phase_id=work.phase.id, attempt=work.attempt,
                                                       code=code, message=message))
        if done.status != "fenced":
            self.bus.publish(work.plan_id, {"type": f"phase_{done.status}", "phase": work.key,
                                            "expert": work.phase.expert, "kind": work.phase.kind,
                                            "round": work.phase.round, "error_code": code, "error": message[:300],
                                            **done.progress})
            log.warning("phase %s %s: %s %s", work.key, done.status, code, message[:200],
                        extra={"action": f"phase.{done.status}"})

    def renew(self, held: Sequence[tuple[str, int]]) -> dict[str, bool]:
        with storage_boundary():
            return phases.renew_leases(self.db, held, timedelta(seconds=self.settings.lease_seconds))

    def publish_text(self, work: PhaseWork, seq: int, text: str) -> None:
        self.bus.publish(work.plan_id, {"type": "chunk", "phase": work.key, "expert": work.phase.expert,
                                        "seq": seq, "text": text})

    def _durably(self, write: Callable[[], T]) -> T:
        """Retry a result write while the database is unavailable (with backoff, up to
        ``db_retry_seconds``). Every write it wraps is idempotent or fenced."""
        deadline = time.monotonic() + self.settings.db_retry_seconds
        delay = 0.2
        while True:
            try:
                return write()
            except Unavailable as exc:
                if time.monotonic() + delay > deadline:
                    raise ServiceUnavailable(f"database unavailable: {exc}") from exc
                log.warning("database unavailable, retrying in %.1fs: %s", delay, exc,
                            extra={"action": "db.retry"})
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

