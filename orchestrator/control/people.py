"""The commands of people at the table: answer a seat, approve or send back a draft, steer a
meeting — and the two things the coordinator does for them unasked: ask a seat whose turn has
come (from :meth:`~orchestrator.control.coordinator.Coordinator.advance`) and end the seats
whose deadline passed (every worker's sweep).

Who moves a seat to ``awaiting_input`` is the coordinator's advance, never a worker: a seat is
never in a canvas (the canvas's lanes that lead to one end in ``advance``, which asks it), and
a worker's claim refuses one. So nothing holds a worker thread, a lease or a broker message
while a person thinks, and a plan without people runs exactly the statements it always did.

Every command finds the plan as the read side does (another tenant's plan is "not found"),
records who acted (a principal, never a token), publishes what it stored, and — when it let
the plan move — advances it from stored status (the reconciler is the backstop when that send
fails).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from orchestrator.control.reads import PlanReads
from orchestrator.core.bus import Bus, publish_events
from orchestrator.core.errors import (
    AlreadyRevised,
    InvalidRequest,
    NotAwaitingApproval,
    NotReady,
    PhaseNotFound,
    PlanNotRunning,
    SeatNotWaiting,
    ServiceUnavailable,
    TooManyNotes,
    translate_storage,
)
from orchestrator.core.settings import Settings
from orchestrator.logs import bind
from orchestrator.plan import dag, human, tally
from orchestrator.plan.schema import parse_plan
from storage import Database, approval, contents, event_shapes, plans, seats, steering
from storage.identity import Principal
from storage.models import utcnow
from storage.plans import PlanState
from storage.status import PhaseStatus, PlanStatus

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY_MAX = 200


@dataclass(frozen=True)
class AnswerResult:
    """A seat's answer as stored. ``replayed``: stored by an earlier call with the same
    idempotency key (nothing was written now); ``enqueued``: what the plan sent next."""

    plan_id: str
    phase: str
    status: PhaseStatus
    answered_by: dict[str, Any] | None
    answered_at: str | None
    replayed: bool = False
    enqueued: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ApprovalResult:
    """An approval: the plan is ``completed`` with the draft ``phase`` (``revision`` 0 or 1) as its result."""

    plan_id: str
    status: PlanStatus
    phase: str
    revision: int


@dataclass(frozen=True)
class SendBackResult:
    """A send-back: ``revision`` is the phase that rewrites the draft ``phase``; the plan runs again."""

    plan_id: str
    status: PlanStatus
    phase: str
    revision: str
    enqueued: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SteerResult:
    """A steering note, the plan's ``n``-th: every phase that starts from now on is given it."""

    plan_id: str
    status: PlanStatus
    n: int


def _actor(principal: Principal | None) -> dict[str, Any] | None:
    return principal.audit() if principal else None


def _note(note: object, field_name: str = "note") -> str:
    """A note as a person wrote it: text, not blank, within :data:`human.MAX_NOTE_CHARS`."""
    if not isinstance(note, str) or not note.strip():
        raise InvalidRequest(f"{field_name}: write a note (it is given to the experts)",
                             details=[{"field": field_name, "message": "empty"}])
    if len(note) > human.MAX_NOTE_CHARS:
        raise InvalidRequest(f"{field_name}: at most {human.MAX_NOTE_CHARS} characters",
                             details=[{"field": field_name, "message": f"{len(note)} characters"}])
    return note.strip()


def check_answer(text: object, idempotency_key: object) -> tuple[str, str | None]:
    """A seat's answer and its client key, checked (:class:`InvalidRequest` naming the field)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest("text: the answer is empty", details=[{"field": "text", "message": "empty"}])
    if len(text) > human.MAX_ANSWER_CHARS:
        raise InvalidRequest(f"text: at most {human.MAX_ANSWER_CHARS} characters",
                             details=[{"field": "text", "message": f"{len(text)} characters"}])
    if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= IDEMPOTENCY_KEY_MAX
            or not idempotency_key.isascii() or not idempotency_key.isprintable()):
        raise InvalidRequest(f"idempotency_key: 1 to {IDEMPOTENCY_KEY_MAX} printable ASCII characters",
                             details=[{"field": "idempotency_key", "message": "malformed"}])
    return text.strip(), idempotency_key


def _moment(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else "its deadline"


def refusal(plan_id: str, key: str, found: seats.Answer, now: datetime) -> SeatNotWaiting:
    """Why a seat took no answer, in words, with the seat's status in ``details``."""
    status = found.status
    if found.cancel_requested:
        why = f"plan {plan_id} was cancelled: its seats take no answers"
    elif status == PhaseStatus.AWAITING_INPUT or found.error_code == seats.TIMED_OUT:
        status = PhaseStatus.FAILED if status == PhaseStatus.AWAITING_INPUT else status
        why = f"the answer came after {key}'s deadline ({_moment(found.due_at)}): the seat ended unanswered"
    elif status == PhaseStatus.COMPLETED:
        by = (found.answered_by or {}).get("name") or "the operator"
        why = (f"{key} was already answered (by {by} at {found.answered_at}): a seat takes one answer "
               "(resend with the same idempotency key to be told it again)")
    elif status == PhaseStatus.PENDING:
        why = f"{key} is not asked yet: it waits for its inputs"
    else:
        why = f"{key} is {status}: it takes no answer"
    return SeatNotWaiting(why, details=[{"field": "key", "message": f"phase is {status}", "status": str(status)}])


class Advancing(Protocol):
    """What people's commands use of the coordinator: its parts, and ``advance``."""

    db: Database
    settings: Settings
    bus: Bus
    reads: PlanReads

    def advance(self, plan_id: str, *, force: bool = False) -> list[str]: ...


class People:
    """People's commands over a coordinator (its database, settings, bus and ``advance``)."""

    def __init__(self, coordinator: Advancing) -> None:
        self.coordinator = coordinator
        self.db = coordinator.db
        self.settings = coordinator.settings
        self.bus = coordinator.bus

    def _advance(self, plan_id: str) -> list[str]:
        """Move the plan on from what was just stored; a broker outage leaves it to the reconciler."""
        try:
            return self.coordinator.advance(plan_id)
        except ServiceUnavailable as exc:
            log.warning("stored, but the next phases were not sent: %s", exc, extra={"action": "plan.enqueue_failed"})
            return []

    # ------------------------------------------------------------------ what advance and the sweep do

    def ask(self, state: PlanState) -> None:
        """Ask every seat whose turn has come (``awaiting_input``, with its deadline and an
        ``input_requested`` event); the seats are never sent to a worker. Nothing for a plan
        without people: no read, no write."""
        ready = dag.to_ask(state.phases)
        if not ready or state.plan.cancel_requested:
            return
        plan = parse_plan(state.plan.spec)
        now = utcnow()
        asks = []
        for seat in ready:
            due, event = human.request(plan, seat, state.phases, state.plan.notes, now=now,
                                        ceiling=self.settings.max_respond_within)
            asks.append(seats.Ask(seat.id, due, event))
        stored = seats.ask(self.db, state.plan.id, asks, now=now)
        publish_events(self.bus, state.plan.id, stored)
        for e in stored:
            log.info("asked %s (%s) to answer %s by %s", e.data.get("expert"), e.phase_key, e.phase_key,
                     e.data.get("due_at"), extra={"action": "seat.asked"})

    def hold(self, state: PlanState) -> None:
        """The plan's draft is written and needs approval: ``awaiting_approval``, once."""
        written = human.draft(state.phases)
        if written is None:
            return
        text = contents.read_text(self.db, state.plan.id, written.key) or ""
        event = event_shapes.awaiting_approval(phase=written.key, revision=1 if written.meta.get("revision_of") else 0,
                                               chars=len(text), summary=written.summary or "",
                                               revision_failed=written.meta.get("revision_failed"))
        stored = approval.hold(self.db, state.plan.id, event)
        if stored is not None:
            log.info("the draft %s awaits approval", written.key, extra={"action": "plan.awaiting_approval"})
            publish_events(self.bus, state.plan.id, [stored])

    def fall_back(self, state: PlanState) -> PlanState:
        """A sent-back draft's revision failed: the first draft is the answer again (the failure
        recorded on it), so the plan waits for its approval instead of failing. ``state``
        unchanged when there is nothing to fall back from; else the state as stored now."""
        failed = human.failed_revision(state.phases)
        if failed is None or state.plan.cancel_requested:
            return state
        if not approval.fall_back(self.db, state.plan.id, revision=failed.key):
            return state
        log.warning("the revision %s failed (%s): the first draft %s waits for approval again", failed.key,
                    failed.error_code, failed.meta.get("revision_of"), extra={"action": "plan.revision_failed"})
        return plans.load_state(self.db, state.plan.id)

    @translate_storage
    def expire(self, *, now: datetime | None = None) -> dict[str, list[str]]:
        """End the seats whose deadline passed (by the plan's ``missing_expert`` rule: the seat
        ends failed, ``input.timed_out``), then advance their plans. Any process may run it at
        any moment, as often as it likes: each deadline fires once (:func:`storage.seats.expire`).
        Returns the seats this call ended, by plan."""
        now = now or utcnow()
        ended: dict[str, list[str]] = {}
        for plan_id in seats.due_plans(self.db, now=now):
            with bind(plan_id=plan_id):
                done = seats.expire(self.db, plan_id, now=now)
                if not done.keys:
                    continue
                ended[plan_id] = done.keys
                publish_events(self.bus, plan_id, done.events)
                log.info("no answer in time: %s", ", ".join(done.keys), extra={"action": "seat.timed_out"})
                self._advance(plan_id)
        return ended

    # ------------------------------------------------------------------ what people do

    @translate_storage
    def answer(self, ref: str, key: str, text: object, *, idempotency_key: object = None,
               principal: Principal | None = None) -> AnswerResult:
        """Store a person's answer to seat ``key`` (see :func:`storage.seats.answer`) and move the
        plan on. Refused with :class:`SeatNotWaiting` (409, the seat's status in ``details``)
        when the seat is not waiting for it; the same ``idempotency_key`` again is told the
        stored answer (``replayed``)."""
        answer_text, client_key = check_answer(text, idempotency_key)
        plan_id = self.coordinator.reads.resolve(ref, principal)
        with bind(plan_id=plan_id, phase=key):
            state = plans.load_state(self.db, plan_id)
            by_key = state.by_key()
            seat = by_key.get(key)
            if seat is None:
                raise PhaseNotFound(f"plan {plan_id} has no phase {key!r}",
                                    details=[{"field": "key", "message": "no such phase"}])
            if not seat.human:
                raise SeatNotWaiting(f"{key} is not a person's seat: a model answers it",
                                     details=[{"field": "key", "message": "not a person's seat",
                                               "status": str(seat.status)}])
            plan = parse_plan(state.plan.spec)
            inputs = [by_key[k] for k in seat.inputs if k in by_key]
            # a person's verdict line is read like a model's; one that cannot be read is an
            # abstention — a person is never sent a repair request
            verdict = tally.phase_verdict(plan, seat, answer_text, inputs)
            limit = self.settings.summary_chars
            summary = answer_text if len(answer_text) <= limit else answer_text[:limit] + "…"
            now = utcnow()
            found = seats.answer(self.db, plan_id=plan_id, key=key, text=answer_text, summary=summary,
                                 offloaded=len(answer_text) > self.settings.inline_limit, verdict=verdict,
                                 actor=_actor(principal), idempotency_key=client_key, now=now)
            if not found.stored:
                raise refusal(plan_id, key, found, now)
            publish_events(self.bus, plan_id, found.events)
            if found.replayed:
                return AnswerResult(plan_id, key, PhaseStatus.COMPLETED, found.answered_by, found.answered_at,
                                    replayed=True)
            log.info("%s answered by %s", key, (found.answered_by or {}).get("name", "the operator"),
                     extra={"action": "seat.answered"})
            return AnswerResult(plan_id, key, PhaseStatus.COMPLETED, found.answered_by, found.answered_at,
                                enqueued=self._advance(plan_id))

    def _draft(self, plan_id: str) -> tuple[PlanState, Any]:
        state = plans.load_state(self.db, plan_id)
        written = human.draft(state.phases)
        if written is None or not dag.needs_approval(state.plan.spec):
            raise NotAwaitingApproval(f"plan {plan_id} does not ask for approval (synthesis: {{approve: true}} or "
                                      "final: {approve: true})",
                                      details=[{"field": "plan_id", "message": "no approval in this plan",
                                                "status": str(state.plan.status)}])
        return state, written

    @translate_storage
    def approve(self, ref: str, *, principal: Principal | None = None) -> ApprovalResult:
        """Approve the plan's draft: the plan completes with it as its result. Refused with
        :class:`NotAwaitingApproval` unless the plan waits for approval (a cancel that got there
        first wins)."""
        plan_id = self.coordinator.reads.resolve(ref, principal)
        with bind(plan_id=plan_id):
            _, written = self._draft(plan_id)
            revision = 1 if written.meta.get("revision_of") else 0
            done = approval.approve(self.db, plan_id, draft=written.key, revision=revision, actor=_actor(principal))
            if not done.done:
                raise self._not_waiting(plan_id, done)
            publish_events(self.bus, plan_id, done.events)
            log.info("approved %s", written.key, extra={"action": "plan.approved"})
            return ApprovalResult(plan_id, PlanStatus.COMPLETED, written.key, revision)

    @translate_storage
    def send_back(self, ref: str, note: object, *, principal: Principal | None = None) -> SendBackResult:
        """Send the draft back once with ``note``: a revision is written, then the plan waits for
        approval again. :class:`AlreadyRevised` for a second send-back."""
        text = _note(note)
        plan_id = self.coordinator.reads.resolve(ref, principal)
        with bind(plan_id=plan_id):
            state, written = self._draft(plan_id)
            if written.status != PhaseStatus.COMPLETED:
                raise NotReady(f"plan {plan_id}'s draft ({written.key}) is not written yet",
                               details=[{"field": "plan_id", "message": f"{written.key} is {written.status}",
                                         "status": str(state.plan.status)}])
            rewrite = human.revision(written, text, _actor(principal))
            done = approval.send_back(self.db, plan_id, draft=written.key, revision=rewrite, note=text,
                                      actor=_actor(principal))
            if not done.done:
                raise self._not_waiting(plan_id, done)
            publish_events(self.bus, plan_id, done.events)
            log.info("%s sent back: %s rewrites it", written.key, rewrite.key, extra={"action": "plan.sent_back"})
            return SendBackResult(plan_id, PlanStatus.RUNNING, written.key, rewrite.key,
                                  enqueued=self._advance(plan_id))

    @staticmethod
    def _not_waiting(plan_id: str, found: approval.Decided) -> Exception:
        details = [{"field": "plan_id", "message": f"plan is {found.status}", "status": str(found.status)}]
        if found.revised is not None and found.status == PlanStatus.AWAITING_APPROVAL and not found.cancel_requested:
            return AlreadyRevised(f"plan {plan_id}'s draft was sent back once already ({found.revised} is its "
                                  "revision): approve it, or cancel the plan", details=details)
        if found.cancel_requested or found.status == PlanStatus.CANCELLED:
            return NotAwaitingApproval(f"plan {plan_id} was cancelled: there is nothing to approve", details=details)
        if found.status == PlanStatus.COMPLETED:
            return NotAwaitingApproval(f"plan {plan_id} is completed: its draft was approved already",
                                       details=details)
        return NotAwaitingApproval(f"plan {plan_id} is {found.status}, not awaiting approval", details=details)

    @translate_storage
    def steer(self, ref: str, note: object, *, principal: Principal | None = None) -> SteerResult:
        """Give the running meeting a note: every phase that starts from now on is given it
        (a phase already running is not changed). :class:`PlanNotRunning` once the plan ended
        or waits for approval (send it back instead), :class:`TooManyNotes` past the limit."""
        text = _note(note)
        plan_id = self.coordinator.reads.resolve(ref, principal)
        with bind(plan_id=plan_id):
            done = steering.steer(self.db, plan_id, text, actor=_actor(principal), max_notes=human.MAX_NOTES)
            details = [{"field": "plan_id", "message": f"plan is {done.status}", "status": str(done.status)}]
            if done.full:
                raise TooManyNotes(f"plan {plan_id} holds {human.MAX_NOTES} notes already, the most a plan takes",
                                   details=[{"field": "note", "message": f"{done.n} notes"}])
            if not done.done:
                if done.status == PlanStatus.AWAITING_APPROVAL:
                    raise PlanNotRunning(f"plan {plan_id} waits for approval: nothing runs that a note could reach "
                                         "— send the draft back with your note instead", details=details)
                what = "is being cancelled" if done.cancel_requested else f"is {done.status}"
                raise PlanNotRunning(f"plan {plan_id} {what}: a note reaches only phases still to start",
                                     details=details)
            publish_events(self.bus, plan_id, done.events)
            log.info("steered (note %d)", done.n, extra={"action": "plan.steered"})
            return SteerResult(plan_id, PlanStatus.RUNNING, done.n)
