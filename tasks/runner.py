"""The phase runner: the data plane's one way to run a phase.

claim → decide without a model, or prepare the request → call the model through the
gateway (hooks: cancellation, the budgets reserved before each call, a usage row per call) → complete or
fail, fenced by the attempt → publish the stored events. Text chunks go to the bus
as they stream. The lease heartbeat (:mod:`tasks.lease`) calls :meth:`PhaseRunner.renew`.

It decides nothing about what runs next — that is the coordinator's ``advance``,
which every canvas ends with. It uses the storage repositories, the model gateway
(:mod:`orchestrator.gateway`) and the control plane's pure modules (prompts, debates, dag,
schema); every write it makes is idempotent or fenced, so a redelivered task or a
retried write can never count twice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

from orchestrator import tracing
from orchestrator.core.bus import Bus, Chunks, publish_events
from orchestrator.core.errors import ServiceUnavailable, storage_boundary
from orchestrator.core.settings import Settings
from orchestrator.gateway.failures import BudgetExhausted, LLMError, Unpriced
from orchestrator.gateway.model_gateway import Gateway
from orchestrator.gateway.tokens import request_tokens
from orchestrator.gateway.types import ChatRequest, Completion, ModelSpec, Provider, Usage
from orchestrator.metrics import MeasureCalls, recorder
from orchestrator.plan import stand_in, tally
from orchestrator.plan.dag import BUDGET_EXHAUSTED
from orchestrator.plan.debates import MalformedVerdict, debate_insertion, parse_verdict
from orchestrator.plan.divergence import lexical_verdict
from orchestrator.plan.fingerprint import decision_seed, fingerprint, models_for
from orchestrator.plan.prompts import build_request, divergence_retry, verdict_repair
from orchestrator.plan.registry import ModelResolver
from orchestrator.plan.schema import BoardPlan, TeamPlan, parse_plan
from orchestrator.plan.spending import refusal_message
from storage import Database, Unavailable, event_shapes, fairshare, phases, plans, spend, usage
from storage.read_models import PhaseRecord
from storage.status import Outcome, PhaseStatus
from tasks.briefer import Briefer
from tasks.claimed import PhaseWork
from tasks.hooks import Spend, StopWhenCancelled
from tasks.lease import Lease
from tasks.plan_cache import SpecCache

log = logging.getLogger(__name__)
T = TypeVar("T")


def as_text(result: object) -> str:
    """A result as stored text. Results that are not strings (a provider returning
    structured content, None) are serialised — never sliced or measured as strings."""
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    return json.dumps(result, ensure_ascii=False, default=str, indent=2)


@dataclass(frozen=True)
class Answered:
    """A phase's answer, before it is stored: the completion, whether its verdict came from a
    repair, and a verdict already known (a tally's record, a failed chair's stand-in) with
    whether to record it as the decision."""

    completion: Completion
    repaired: bool = False
    decided: dict[str, Any] | None = None
    record_decision: bool = True


class PhaseRunner:
    def __init__(self, db: Database, settings: Settings, bus: Bus, providers: Mapping[str, Provider]) -> None:
        self.db = db
        self.settings = settings
        self.bus = bus
        self.providers = dict(providers)
        self.models = ModelResolver.from_settings(settings)
        self.specs = SpecCache(self._load_plan)
        self.briefer = Briefer(db, settings)  # its reranker is loaded once per process, at first use
        self._tenants: dict[str, str] = {}  # plan id -> tenant (immutable), read under budgets or fair share
        self.share = fairshare.policy_of(settings)  # None: fair share is off and costs nothing
        # fair share: called with the plans whose held phase a finish released (their advance is due)
        self.on_release: Callable[[Sequence[str]], None] | None = None

    def _load_plan(self, plan_id: str) -> BoardPlan | TeamPlan:
        return parse_plan(plans.get_spec(self.db, plan_id))

    def claim(self, phase_id: str, owner: str, plan_id: str | None = None) -> PhaseWork | None:
        """Claim a phase for this worker, or None when there is nothing to do (the phase
        or its plan is final or cancelled, it is leased by someone alive, or its inputs are
        not all complete — then its enqueue mark is released for the next advance to send it).

        The happy path is one statement on Postgres (claim + ``phase_started`` + the inputs'
        full texts); the plan's spec comes from the per-process cache (read once per plan)."""
        with storage_boundary():
            plan = self.specs.get(plan_id) if plan_id is not None else None
            lease = timedelta(seconds=self.settings.lease_seconds)
            if self.share is not None and plan_id is not None:
                claimed = fairshare.claim(self.db, phase_id, tenant=self.tenant_of(plan_id), policy=self.share,
                                          owner=owner, lease=lease)
                if claimed == fairshare.HELD:  # past its tenant's share: it waits in Postgres
                    log.info("phase held: its tenant has its share in flight", extra={"action": "phase.held"})
                    return None
            else:
                claimed = phases.claim_phase(self.db, phase_id, owner=owner, lease=lease)
            if not isinstance(claimed, phases.Claimed):
                phases.release_waiting(self.db, phase_id)  # arrived early: the next advance sends it
                return None
            if plan is None or plan_id != claimed.phase.plan_id:
                plan = self.specs.get(claimed.phase.plan_id)
        publish_events(self.bus, claimed.phase.plan_id, [claimed.event])
        return PhaseWork(plan, claimed.phase.plan_id, claimed.phase, claimed.phase.attempt, claimed.inputs,
                         claimed.texts, claimed.notes)

    def execute(self, work: PhaseWork, lease: Lease) -> Outcome:
        """Run a claimed phase to its stored end. A model error or a bug fails the phase
        (never strands the plan); a database outage propagates — the lease then expires
        and the reconciler hands the phase to another attempt. Timed, by kind and outcome."""
        with recorder().phase(work.phase.kind) as timed:
            timed.outcome = outcome = self._run(work, lease)
        return outcome

    def _run(self, work: PhaseWork, lease: Lease) -> Outcome:
        gateway = Gateway(self.providers, hooks=[StopWhenCancelled(lease), Spend(self, work),
                                                 *tracing.call_hooks(), MeasureCalls(recorder())])
        chunks = self.bus.chunks(work.plan_id, work.key, work.phase.expert)

        def on_text(text: str) -> None:
            self.publish_text(chunks, text)

        try:
            answered = self.answered(work, gateway, on_text, lease)
        except LLMError as exc:
            if lease.shutting_down:
                return self.release(work, exc)
            decision = None if lease.should_stop() else tally.chair_fallback(work.plan, work.phase, work.inputs)
            if decision is not None:
                answered = self.without_chair(work, decision, exc)  # the tally already paid for stands
            elif not lease.should_stop() and stand_in.applies(work.phase, exc.code, work.inputs):
                answered = self.without_chair(work, None, exc)  # the experts' words, gathered by code
            else:
                # the message is public by construction (orchestrator.gateway.failures): no upstream text in it
                return self.fail(work, exc.code, exc.message)
        except ServiceUnavailable:
            raise
        except Exception as exc:  # a bug must fail the phase, not strand the plan
            # its text may carry data (a prompt, a key, a row): logged here, never stored or shown
            log.exception("phase crashed", extra={"action": "phase.crashed"})
            return self.fail(work, "conclave.internal",
                             f"internal error ({type(exc).__name__}); the worker's log has the details")
        # storing is outside the net above: a write that fails leaves the phase leased, so the
        # lease expires and another attempt takes it over — never failed for a storage error
        return self.complete(work, answered.completion, repaired=answered.repaired, decided=answered.decided,
                             record_decision=answered.record_decision)

    def answered(self, work: PhaseWork, gateway: Gateway, on_text: Callable[[str], None], lease: Lease) -> Answered:
        """What the phase answers, before anything is stored: the tally of a ``decision`` phase,
        a decision that needs no model (a lexical divergence check), or the model's answer."""
        if work.phase.kind == "decision":
            return self.tallied(work)
        decided = self.decide_without_model(work)
        answered = Answered(decided) if decided is not None else self.answer(work, gateway, on_text, lease)
        # its verdict is read here, inside the net: a verdict that trips a bug fails the phase once
        verdict = tally.phase_verdict(work.plan, work.phase, as_text(answered.completion.text), work.inputs,
                                      repaired=answered.repaired)
        return replace(answered, decided=verdict, record_decision=False) if verdict is not None else answered

    def answer(self, work: PhaseWork, gateway: Gateway, on_text: Callable[[str], None], lease: Lease) -> Answered:
        """The phase's model call — on the expert's models in order (``fallback_models``: the
        next one when a model fails after its own retries; never after a cancel or with the
        budget spent) — then the one corrective request a malformed structured answer gets
        (a verdict repair that fails leaves the turn complete, its verdict an abstention)."""
        models = models_for(work.plan, work.phase)  # a fork's phase may keep its source's (meta.models)
        for i, name in enumerate(models):
            spec, request = self.prepare(work, name)
            try:
                completion = gateway.call(spec, request, on_text=on_text, should_stop=lease.should_stop)
                break
            except LLMError as exc:
                if i + 1 == len(models) or lease.should_stop() or exc.code == BUDGET_EXHAUSTED:
                    raise
                log.warning("model %s failed (%s); trying %s", name, exc.code, models[i + 1],
                            extra={"action": "phase.model_fallback"})
        followup = self.followup(work, request, completion)
        if followup is None:
            return Answered(completion)
        try:
            again = gateway.call(spec, followup, should_stop=lease.should_stop)
        except LLMError as exc:
            if followup.purpose != "verdict_repair" or lease.should_stop():
                raise
            # the turn is in hand and paid for: it completes, its verdict an abstention
            log.warning("verdict repair failed (%s): the turn abstains", exc.code,
                        extra={"action": "phase.repair_failed"})
            return Answered(completion, repaired=True)
        if followup.purpose == "verdict_repair":  # the turn keeps its words; the repair adds its line
            said = f"{as_text(completion.text).rstrip()}\n\n{again.text.strip()}"
            return Answered(replace(completion, text=said), repaired=True)
        return Answered(again)

    def without_chair(self, work: PhaseWork, decision: PhaseRecord | None, exc: LLMError) -> Answered:
        """A moderator's phase failed on every model (:mod:`orchestrator.plan.stand_in`): it
        completes with a summary written by code from the experts' stored words — after the
        decision record read aloud, when the panel's decision was tallied — flagged in its
        verdict (``stand_in``, and ``chair_failed`` for the last word), instead of failing the
        plan after every expert was paid."""
        if decision is not None:
            record = (f"{work.texts.get(decision.id, '').rstrip()}\n\n(The chair could not write the synthesis: "
                      f"{exc.code}. This is the panel's decision as tallied.)")
            text = f"{record}\n\n{stand_in.text(work.plan, work.phase, work.inputs, work.texts, exc.code)}"
        else:
            text = stand_in.text(work.plan, work.phase, work.inputs, work.texts, exc.code)
        stated = tally.stated_by_tally(decision) if decision is not None else None
        verdict = stand_in.verdict(work.plan, work.phase, exc.code, exc.message, stated)
        log.warning("%s failed on every model (%s): code wrote a stand-in", work.key, exc.code,
                    extra={"action": "phase.chair_failed" if "chair_failed" in verdict else "phase.stood_in"})
        return Answered(Completion(text=text, usage=Usage(0, 0, "estimated", "tally")), decided=verdict,
                        record_decision=False)

    def release(self, work: PhaseWork, exc: LLMError) -> Outcome:
        """The worker is shutting down mid-call: give the phase back for another worker
        (:func:`storage.phases.release_phase`); the call's usage is already on record. A
        phase of a cancelled plan is not given back: it ends cancelled."""
        released = self._durably(lambda: phases.release_phase(self.db, work.phase.id, work.attempt))
        if not released:
            return self.fail(work, exc.code, exc.message)
        log.warning("phase %s given back: the worker is shutting down", work.key, extra={"action": "phase.released"})
        return Outcome.RELEASED

    def decide_without_model(self, work: PhaseWork) -> Completion | None:
        """The result of a phase that needs no model call, or None: a divergence check of a
        plan with ``divergence: lexical`` reads its experts' stances from their full texts
        (:mod:`orchestrator.plan.divergence`) — deterministic, no tokens, no usage row."""
        plan = work.plan
        if work.phase.kind != "divergence" or not isinstance(plan, TeamPlan) or plan.divergence != "lexical":
            return None
        examined = [p for p in work.inputs if p.key in work.phase.meta.get("examines", []) and p.expert]
        verdict, stances = lexical_verdict(plan.question, [(p.expert or "", work.texts[p.id])
                                                           for p in examined if p.id in work.texts])
        answer = {**verdict.model_dump(), "method": "lexical", "stances": stances}
        return Completion(text=json.dumps(answer), usage=Usage(0, 0, "estimated", "lexical"),
                          finish_reason="lexical")

    def prepare(self, work: PhaseWork, model: str | None = None) -> tuple[ModelSpec, ChatRequest]:
        """The model and the request for a claimed phase, built from the full text of
        its inputs (read from the content store in the claim, never from summaries), with
        the briefing's passages for this call when the plan has a briefing (one read:
        :class:`~tasks.briefer.Briefer`; none without a briefing)."""
        spec = self.model_spec(work.plan, model or models_for(work.plan, work.phase)[0])
        request = build_request(work.plan, work.phase, work.inputs, work.texts, work.notes)
        return spec, self.briefer.brief(work.plan, work.phase, work.texts, spec, request)

    def model_spec(self, plan: BoardPlan | TeamPlan, name: str) -> ModelSpec:
        """Resolved now, from this process's registry and settings (:mod:`orchestrator.plan.registry`):
        the worker never trusts hosts or key variables stored with the plan."""
        return self.models.spec(plan, name)

    def followup(self, work: PhaseWork, request: ChatRequest, completion: Completion) -> ChatRequest | None:
        """A corrective request when a structured answer is malformed (once), else None: a
        divergence verdict is asked again whole; an expert's verdict line is asked for alone."""
        problem = tally.needs_repair(work.plan, work.phase, as_text(completion.text), work.inputs)
        if problem is not None and not completion.truncated:
            return verdict_repair(work.plan, request, problem)
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

    def tenant_of(self, plan_id: str) -> str:
        """The plan's tenant (it never changes), read once per plan by this process."""
        tenant = self._tenants.get(plan_id)
        if tenant is None:
            with storage_boundary():
                tenant = plans.get_plan(self.db, plan_id).tenant
            if len(self._tenants) > 10_000:
                self._tenants.clear()
            self._tenants[plan_id] = tenant
        return tenant

    def limits(self, work: PhaseWork) -> tuple[spend.Limits, str]:
        """The budgets a call of this phase must fit, and its plan's tenant ("" when no tenant
        budget is configured: then the tenant is never read)."""
        budget = work.plan.budget
        tenant = self.tenant_of(work.plan_id) if self.settings.tenant_budgeted else ""
        return spend.Limits(max_tokens=budget.max_tokens if budget else None, usd=budget.usd if budget else None,
                            tenant_usd=self.settings.tenant_budget(tenant) if tenant else None), tenant

    def reserve(self, work: PhaseWork, spec: ModelSpec, request: ChatRequest) -> int | None:
        """Reserve the call's worst case — the request's estimated tokens plus the model's
        ``max_output_tokens``, at its price, with its per-call fee — before it is made
        (:func:`storage.spend.reserve`). None when no budget applies (no statement then);
        raises ``BudgetExhausted`` when it does not fit, ``Unpriced`` for a model without a
        price under a budget in dollars."""
        limits, tenant = self.limits(work)
        if not limits.any:
            return None
        input_tokens = request_tokens(request)
        cost = spec.tokens_cost(input_tokens, spec.max_output_tokens)
        if cost is None and (limits.usd is not None or limits.tenant_usd is not None):
            which = "the plan's budget.usd" if limits.usd is not None else f"tenant {tenant!r}'s monthly budget"
            raise Unpriced(f"model {spec.name!r} has no price in the operator's registry: {which} cannot count "
                           "its calls, and a call is never taken to be free")
        # retried when the database fails: a reservation whose COMMIT was lost stays held, over-counting
        # (safe) until the phase ends and the reconciler releases it
        tenant = tenant or self.tenant_of(work.plan_id)  # stored with it, read once per plan and process
        held = self._durably(lambda: spend.reserve(
            self.db, plan_id=work.plan_id, phase_id=work.phase.id, attempt=work.attempt, tenant=tenant,
            tokens=input_tokens + spec.max_output_tokens, cost_usd=cost, limits=limits))
        if isinstance(held, spend.Refusal):
            raise BudgetExhausted(refusal_message(held, tenant))
        return held

    def release_reservation(self, reservation: int) -> None:
        """Give back what a call reserved when it ended with no usage known."""
        self._durably(lambda: spend.release(self.db, reservation))

    def record_usage(self, work: PhaseWork, *, seq: int, purpose: str, spec: ModelSpec, used: Usage,
                     reservation: int | None = None) -> None:
        """Write one call's usage as soon as it is known — idempotent per (phase, attempt, seq) —
        settling its reservation in the same write."""
        self._durably(lambda: usage.record_usage(
            self.db, plan_id=work.plan_id, phase_id=work.phase.id, attempt=work.attempt, seq=seq,
            purpose=purpose, model=f"{spec.provider}:{spec.model or spec.name}", input_tokens=used.input_tokens,
            output_tokens=used.output_tokens, source=used.source, method=used.method, cost_usd=spec.cost(used),
            reservation=reservation))

    def tallied(self, work: PhaseWork) -> Answered:
        """The ``decision`` phase: the tally of its inputs' stored verdicts
        (:mod:`orchestrator.plan.tally`) — code, no model, no tokens, no usage row. Its text is
        the record read aloud, its verdict the record, stored with a ``decision_recorded`` event."""
        decision = tally.decide(work.plan, decision_seed(work.phase), work.inputs)  # a fork keeps its source's seed
        read_aloud = Completion(text=tally.decision_text(decision), usage=Usage(0, 0, "estimated", "tally"),
                                finish_reason=f"tally:{decision.protocol}")
        return Answered(read_aloud, decided=decision.as_json())

    def complete(self, work: PhaseWork, completion: Completion, *, repaired: bool = False,
                 decided: dict[str, Any] | None = None, record_decision: bool = True) -> Outcome:
        """Store the result with its verdict (``decided``: the verdict already known; see
        :func:`storage.phases.complete_phase` for the order of writes), then publish what was
        stored. Returns completed | cancelled | fenced."""
        text = as_text(completion.text)
        insertion = None
        events = [event_shapes.decision_recorded(work.key, decided)] if decided and record_decision else []
        answer = decided if decided is not None else tally.phase_verdict(work.plan, work.phase, text, work.inputs,
                                                                         repaired=repaired)
        if work.phase.kind == "divergence" and isinstance(work.plan, TeamPlan):
            try:
                verdict = parse_verdict(text)
            except MalformedVerdict:
                verdict = None
                log.warning("divergence verdict malformed after retry; no debate",
                            extra={"action": "debate.no_verdict"})
            if verdict is not None:
                insertion = debate_insertion(work.plan, work.phase, verdict, work.inputs)
        early_stop = self.early_stop(work)
        summary = text if len(text) <= self.settings.summary_chars else text[: self.settings.summary_chars] + "…"
        sent = self.sent_hash(work)
        done = self._durably(lambda: phases.complete_phase(
            self.db, plan_id=work.plan_id, phase_id=work.phase.id, attempt=work.attempt, text=text,
            summary=summary, truncated=completion.truncated, fallback=completion.fallback,
            offloaded=len(text) > self.settings.inline_limit, insertion=insertion, verdict=answer, events=events,
            early_stop=early_stop, sent_hash=sent, share=self.share))
        self.released(done.released)
        if done.status == Outcome.FENCED:
            log.warning("result discarded: another attempt owns the phase", extra={"action": "phase.fenced"})
            return done.status
        publish_events(self.bus, work.plan_id, done.events)
        log.info("phase %s %s (%d chars)", work.key, done.status, len(text), extra={"action": f"phase.{done.status}"})
        return done.status

    def sent_hash(self, work: PhaseWork) -> str | None:
        """The hash of what this phase was sent (:mod:`orchestrator.plan.fingerprint`), stored with
        its result: a what-if fork copies the result only onto a phase whose own hash is this one.
        None (never copied) when it cannot be computed."""
        try:
            return fingerprint(work.plan, work.phase, work.inputs, work.texts, self.models, work.notes)
        except LLMError:  # a model this worker no longer resolves: the phase ran, but is never matched
            return None

    def early_stop(self, work: PhaseWork) -> phases.EarlyStop | None:
        """The rounds a board skips when its panel agreed at this round summary
        (:func:`orchestrator.plan.tally.agreed`), with the tokens that saves, estimated as the
        plan's tokens per model phase so far times the phases skipped. None otherwise."""
        agreed = tally.agreed(work.plan, work.phase, work.inputs)
        if agreed is None:
            return None
        spoke = 1 + sum(1 for p in work.inputs if p.status == PhaseStatus.COMPLETED)  # this summary too
        per_phase = self.spent_tokens(work.plan_id) // spoke
        event = event_shapes.rounds_skipped(after_round=agreed.after_round, rounds=agreed.rounds,
                                            phases=agreed.skip, agreement=agreed.agreement,
                                            threshold=agreed.threshold, tokens_saved=per_phase * len(agreed.skip))
        return phases.EarlyStop(skip=agreed.skip, resume_from=work.key, reason=agreed.reason,
                                tokens_per_phase=per_phase, event=event)

    def fail(self, work: PhaseWork, code: str, message: str) -> Outcome:
        """Fail the phase, fenced by the attempt (cancelled instead when the plan was
        cancelled). Returns failed | cancelled | fenced."""
        done = self._durably(lambda: phases.fail_phase(self.db, plan_id=work.plan_id, phase_id=work.phase.id,
                                                       attempt=work.attempt, code=code, message=message,
                                                       share=self.share))
        self.released(done.released)
        if done.status != Outcome.FENCED:
            publish_events(self.bus, work.plan_id, done.events)
            log.warning("phase %s %s: %s %s", work.key, done.status, code, message[:200],
                        extra={"action": f"phase.{done.status}"})
        return done.status

    def released(self, plan_ids: Sequence[str]) -> None:
        """Hand the plans whose held phase a finish released to ``on_release`` (their advance);
        a failure there is left to the sweep, which finds the released phase as a lost message."""
        if not plan_ids or self.on_release is None:
            return
        try:
            self.on_release(plan_ids)
        except Exception as exc:
            log.warning("advance after a release failed (the sweep sends it): %s", exc,
                        extra={"action": "phase.release_failed"})

    def renew(self, held: Sequence[tuple[str, int]]) -> dict[str, bool]:
        """The lease heartbeat (see :func:`storage.phases.renew_leases`)."""
        with storage_boundary():
            return phases.renew_leases(self.db, held, timedelta(seconds=self.settings.lease_seconds))

    def publish_text(self, chunks: Chunks, text: str) -> None:
        """Streamed text: bus-only, never stored (the full text is, at completion); numbered,
        and perhaps joined to the chunk still waiting to be sent, by the bus (:meth:`Bus.chunks`)."""
        chunks.add(text)

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
