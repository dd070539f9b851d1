"""What users see of a plan: a stable, JSON-ready shape shared by the Python API,
the CLI's ``--json`` and the HTTP API. Derived from stored rows on every read."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from orchestrator.core.errors import WaitTimeout
from orchestrator.plan.dag import awaited, needs_approval
from orchestrator.plan.spending import BudgetView, budget_view
from storage.phases import EARLY_STOP
from storage.plans import PlanState
from storage.read_models import PhaseRecord, UsageRecord
from storage.status import PHASE_FINAL, PhaseStatus, PlanStatus


@dataclass(frozen=True)
class UsageView:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    estimated: bool = False  # some of it is an estimate, not a provider's report
    provider_tokens: int = 0  # of total_tokens, as providers reported them
    estimated_tokens: int = 0  # of total_tokens, estimated where a provider reported nothing
    wasted_tokens: int = 0  # spent by attempts that died or lost the fence
    calls: int = 0  # model calls on record, waste included
    #: US dollars, at the prices of the calls' time; None unless every call counted had a price
    cost_usd: float | None = None


@dataclass(frozen=True)
class PhaseView:
    id: str
    key: str
    kind: str
    expert: str | None
    round: int | None
    status: PhaseStatus
    attempt: int
    depends_on: list[str]
    truncated: bool
    summary: str | None
    error_code: str | None
    error: str | None
    retries_requested: int
    usage: UsageView
    verdict: dict[str, Any] | None = None  # an expert's verdict, the decision's tally, the chair's answer
    human: bool = False  # a person's seat: a person answers it, never a model
    asked_at: str | None = None  # a seat: when it was asked for its answer (awaiting_input since)
    due_at: str | None = None  # a seat waiting for its answer: when it ends by the plan's missing_expert rule
    answered_by: dict[str, Any] | None = None  # a seat answered: who (a principal's id and name)
    asked: str | None = None  # a seat asked: what the person answers (the prompt a model would be given)
    #: in a what-if fork: the plan this phase was copied from (completed there; no attempt, no cost here)
    reused_from: str | None = None
    #: a moderator's phase that failed on every model, written by code instead: {code, message}
    #: (orchestrator.plan.stand_in)
    stand_in: dict[str, Any] | None = None
    #: the model that wrote a completed phase's text (``provider:model``, as its usage rows name
    #: it), and the models its attempt tried first, that failed (``fallback_models``): None and
    #: [] when no model wrote it (a person, a tally, a stand-in)
    model: str | None = None
    fell_back_from: list[str] = field(default_factory=list)
    #: fair share: a pending phase held until its tenant has a free slot (storage.fairshare)
    held: bool = False


@dataclass(frozen=True)
class PlanView:
    id: str
    task_id: str | None
    title: str
    kind: str
    labels: list[str]
    status: PlanStatus
    cancel_requested: bool
    error_code: str | None
    error: str | None
    created_at: str
    finished_at: str | None
    usage: UsageView
    phases: list[PhaseView] = field(default_factory=list)
    decision: dict[str, Any] | None = None  # the panel's decision (decision_of), when the plan declares its answer
    early_stop: dict[str, Any] | None = None  # the rounds a board skipped because its panel agreed (early_stop_of)
    warnings: list[str] = field(default_factory=list)  # what weakens the panel (panel_warnings)
    #: the plan's budget, what every call on record spent against it (waste included) and what is left
    budget: BudgetView | None = None
    #: the people whose answers the plan waits for now: each seat's key, expert, since and due (awaited_of)
    awaiting: list[dict[str, Any]] = field(default_factory=list)
    #: a plan whose answer needs approval: the draft, its revision, whether it waits (approval_of)
    approval: dict[str, Any] | None = None
    #: the notes people sent to steer the meeting, in order (each with who and when)
    notes: list[dict[str, Any]] = field(default_factory=list)
    #: a what-if fork's source: ``{"plan_id", "phase"}`` (the phase it runs anew from); None otherwise
    forked_from: dict[str, Any] | None = None
    #: -2..2, higher first among its tenant's phases held for their share (storage.fairshare)
    priority: int = 0

    @property
    def done(self) -> int:
        return sum(1 for p in self.phases if p.status in PHASE_FINAL)

    @property
    def final(self) -> bool:
        return self.status.final

    def phase(self, key: str) -> PhaseView:
        return next(p for p in self.phases if p.key == key)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _usage(rows: list[UsageRecord]) -> UsageView:
    """Usage is the sum of usage rows — the only place it is added up."""
    cost = [r for r in rows if r.counted]
    tin = sum(r.input_tokens for r in cost)
    tout = sum(r.output_tokens for r in cost)
    reported = sum(r.input_tokens + r.output_tokens for r in cost if r.source == "provider")
    return UsageView(input_tokens=tin, output_tokens=tout, total_tokens=tin + tout,
                     estimated=any(r.source != "provider" for r in cost),
                     provider_tokens=reported, estimated_tokens=tin + tout - reported,
                     wasted_tokens=sum(r.input_tokens + r.output_tokens for r in rows if not r.counted),
                     calls=len(rows), cost_usd=_cost(cost))


def _cost(rows: list[UsageRecord]) -> float | None:
    """The dollars the rows cost, if every one of them was priced (no cost is known of a sum
    that leaves some calls out). No rows: nothing was spent."""
    if any(r.cost_usd is None for r in rows):
        return None
    return sum(r.cost_usd or 0.0 for r in rows)


def answered_by(phase: PhaseRecord, rows: list[UsageRecord]) -> tuple[str | None, list[str]]:
    """The model that answered a completed phase — its completing attempt's last call (a
    model is tried only after the one before it failed, and a repair goes to the model that
    answered) — and the models that attempt tried before it."""
    if phase.status != PhaseStatus.COMPLETED:
        return None, []
    calls = sorted((r for r in rows if r.attempt == phase.attempt), key=lambda r: r.seq)
    tried = list(dict.fromkeys(r.model for r in calls))
    if not calls or (phase.verdict or {}).get("stand_in"):
        return None, tried
    last = calls[-1].model
    return last, [m for m in tried if m != last]


def plan_view(state: PlanState, usage_rows: list[UsageRecord]) -> PlanView:
    # the current attempt of a running phase is live spend, not waste
    live = {(ph.id, ph.attempt) for ph in state.phases if ph.status == PhaseStatus.RUNNING}
    rows = [replace(r, counted=True) if (r.phase_id, r.attempt) in live else r for r in usage_rows]
    by_phase: dict[str, list[UsageRecord]] = {}
    for r in rows:
        by_phase.setdefault(r.phase_id, []).append(r)
    answers = {ph.id: answered_by(ph, by_phase.get(ph.id, [])) for ph in state.phases}
    p = state.plan
    return PlanView(
        id=p.id, task_id=p.task_id, title=p.title, kind=p.kind, labels=list(p.labels), status=p.status,
        cancel_requested=p.cancel_requested, error_code=p.error_code, error=p.error_message,
        created_at=p.created_at.isoformat(), finished_at=p.finished_at.isoformat() if p.finished_at else None,
        usage=_usage(rows),
        phases=[PhaseView(id=ph.id, key=ph.key, kind=ph.kind, expert=ph.expert, round=ph.round, status=ph.status,
                          attempt=ph.attempt, depends_on=list(ph.depends_on), truncated=ph.truncated,
                          summary=ph.summary, error_code=ph.error_code, error=ph.error_message,
                          retries_requested=ph.retries_requested, usage=_usage(by_phase.get(ph.id, [])),
                          verdict=ph.verdict, human=ph.human,
                          asked_at=ph.started_at.isoformat() if ph.human and ph.started_at else None,
                          due_at=ph.due_at.isoformat() if ph.due_at and ph.status == PhaseStatus.AWAITING_INPUT
                          else None, answered_by=(ph.meta.get("answer") or {}).get("by"),
                          asked=(ph.meta.get("ask") or {}).get("prompt"), reused_from=ph.reused_from,
                          stand_in=(ph.verdict or {}).get("stand_in"), model=answers[ph.id][0],
                          fell_back_from=answers[ph.id][1],
                          held=ph.held_at is not None and ph.status == PhaseStatus.PENDING)
                for ph in state.phases],
        decision=decision_of(state), early_stop=early_stop_of(state), warnings=panel_warnings(p.spec),
        budget=budget_view(p.spec.get("budget"), sum(r.input_tokens + r.output_tokens for r in usage_rows),
                           _cost(usage_rows)),
        awaiting=awaited_of(state), approval=approval_of(state), notes=[dict(n) for n in p.notes],
        forked_from={"plan_id": p.forked_from, "phase": p.fork_phase} if p.forked_from else None,
        priority=p.priority,
    )


def awaited_of(state: PlanState) -> list[dict[str, Any]]:
    """Who the plan waits for now: each seat asked and not answered, soonest deadline first —
    its key, the person's seat (expert), since when it waits and when it is due."""
    return [{"phase": ph.key, "expert": ph.expert, "since": ph.started_at.isoformat() if ph.started_at else None,
             "due_at": ph.due_at.isoformat() if ph.due_at else None} for ph in awaited(state.phases)]


def approval_of(state: PlanState) -> dict[str, Any] | None:
    """The approval of a plan that asks for one: its draft (the phase written last), whether it
    is a revision, and ``state`` — ``drafting`` (not written yet), ``awaiting`` (since when),
    ``approved``, ``cancelled`` or ``failed``; ``sent_back``: the draft that was sent back (its
    note and who sent it), once. None for a plan that asks for no approval."""
    if not needs_approval(state.plan.spec):
        return None
    terminal = [ph for ph in state.phases if ph.meta.get("terminal")]
    current = terminal[-1] if terminal else None
    revised = next((ph for ph in state.phases if ph.meta.get("revision_of")), None)
    status = state.plan.status
    what = {PlanStatus.AWAITING_APPROVAL: "awaiting", PlanStatus.COMPLETED: "approved",
            PlanStatus.RUNNING: "drafting"}.get(status, str(status))
    return {"state": what, "phase": current.key if current else None,
            "revision": 1 if current is not None and current.meta.get("revision_of") else 0,
            "revision_failed": current.meta.get("revision_failed") if current is not None else None,
            "since": state.plan.updated_at.isoformat() if status == PlanStatus.AWAITING_APPROVAL else None,
            "sent_back": None if revised is None else {"phase": revised.meta.get("revision_of"),
                                                       "note": revised.meta.get("note"),
                                                       "by": revised.meta.get("sent_back_by")}}


def early_stop_of(state: PlanState) -> dict[str, Any] | None:
    """The rounds skipped because the panel agreed, why, and the tokens that saved (an
    estimate stored with each skipped phase); None for a plan that ran every round."""
    skipped = [ph for ph in state.phases if ph.status == PhaseStatus.SKIPPED and ph.error_code == EARLY_STOP]
    if not skipped:
        return None
    rounds = sorted({ph.round or 0 for ph in skipped})
    return {"after_round": rounds[0] - 1, "rounds": rounds, "phases": [ph.key for ph in skipped],
            "reason": skipped[0].error_message,
            "tokens_saved": sum(int(ph.meta.get("tokens_saved", 0)) for ph in skipped)}


def decision_of(state: PlanState) -> dict[str, Any] | None:
    """The panel's decision as stored: the ``decision`` phase's tally, with the chair's stated
    answer beside it (``chair``: the answer, whether it matches, and ``failed`` — the error —
    when the chair failed on every model and the record is the result); for a plan the chair
    decides (``decide: chair``), the chair's verdict alone. None before there is one, and for
    plans that declare no answer."""
    tallied = next((ph.verdict for ph in state.phases if ph.kind == "decision" and ph.verdict), None)
    chair = next((ph for ph in state.phases if ph.meta.get("terminal") and ph.kind != "decision" and ph.verdict),
                 None)
    said = None if chair is None or chair.verdict is None else {
        "phase": chair.key, "answer": chair.verdict.get("answer"), "matches": chair.verdict.get("matches_decision"),
        "failed": chair.verdict.get("chair_failed")}  # {code, message}: no model wrote it, the record stands in
    if tallied is not None:
        return {**tallied, "chair": said}
    if chair is None or chair.verdict is None or "answer" not in chair.verdict:  # a stand-in for a plan
        return None                                                                # that declares no answer
    return {"protocol": "chair", "answer": chair.verdict.get("answer"), "key": chair.verdict.get("answer"),
            "votes": [], "chair": said}


def panel_warnings(spec: dict[str, Any]) -> list[str]:
    """What weakens a panel's decision, read from its stored spec: every expert on one model
    with the same settings (the research's strongest lever — diverse models — is missing)."""
    experts = [e for e in spec.get("experts") or [] if not e.get("human")]  # people run no model
    if spec.get("answer") is None or len(experts) < 2:
        return []
    models = spec.get("models") or {}
    configs = {repr(sorted((models.get(e.get("model", "default")) or {"name": e.get("model", "default")}).items()))
               for e in experts}
    if len(configs) > 1:
        return []
    return [f"every expert runs the same model ({experts[0].get('model', 'default')}) with the same settings: "
            "their votes are correlated, and a panel of one model rarely beats that model sampled several times"]


def wait_final(get: Callable[[str], PlanView], plan_id: str, timeout: float | None, poll: float) -> PlanView:
    """Read the plan with ``get`` until it is final (the direct and the remote client's
    ``wait``); raises :class:`~orchestrator.core.errors.WaitTimeout` after ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        view = get(plan_id)
        if view.final:
            return view
        if deadline is not None and time.monotonic() > deadline:
            raise WaitTimeout(f"plan {plan_id} still {view.status} after {timeout}s")
        time.sleep(poll)
