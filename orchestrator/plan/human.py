"""People at the table, as pure decisions over a plan and its stored phases: when a
person's seat is due, what they are asked, the revision a draft sent back becomes, and the
operator's ceiling on how long a seat may wait. Storage does the writes
(:mod:`storage.seats`, :mod:`storage.approval`, :mod:`storage.steering`); the coordinator
decides when (:mod:`orchestrator.control.people`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.errors import InvalidPlan
from orchestrator.plan.dag import BUDGET_EXHAUSTED
from orchestrator.plan.durations import format_duration
from orchestrator.plan.prompts import build_request, for_a_person
from orchestrator.plan.schema import RESPOND_WITHIN_DEFAULT, BoardPlan, TeamPlan
from storage import event_shapes
from storage.event_shapes import NewEvent
from storage.read_models import NewPhase, PhaseRecord
from storage.status import PhaseStatus

#: The most a person's answer may hold (characters) and a steering or send-back note.
MAX_ANSWER_CHARS = 100_000
MAX_NOTE_CHARS = 2_000
MAX_NOTES = 20  # steering notes one plan holds: each later phase is given them all
REVISED = "revised"  # a revision's key: ``<draft>.revised`` (a team's ids cannot hold a dot)


def respond_within(phase: PhaseRecord, ceiling: int) -> int:
    """How long the seat waits, in seconds: the plan's ``respond_within`` (a day when it gives
    none), never past the operator's ceiling."""
    given = phase.meta.get("respond_within")
    return min(int(given) if given else RESPOND_WITHIN_DEFAULT, ceiling)


def check_deadlines(plan: BoardPlan | TeamPlan, ceiling: int) -> None:
    """Refuse a plan whose seat would wait longer than the operator allows, naming the field."""
    problems = [{"field": f"{field}.respond_within",
                 "message": f"{format_duration(e.respond_within)} is longer than this deployment lets a seat wait "
                            f"(CONCLAVE_MAX_RESPOND_WITHIN: {format_duration(ceiling)})"}
                for field, e in plan.named_experts() if e.human and e.respond_within and e.respond_within > ceiling]
    if problems:
        raise InvalidPlan(f"invalid plan: {problems[0]['field']}: {problems[0]['message']}", details=problems)


def request(plan: BoardPlan | TeamPlan, phase: PhaseRecord, phases: Sequence[PhaseRecord],
            notes: Sequence[Mapping[str, Any]], *, now: datetime, ceiling: int) -> tuple[datetime, NewEvent]:
    """When seat ``phase`` is due and its ``input_requested`` event: what the person is asked —
    the words a model in the seat would be given, with the steering notes sent so far — and the
    phases they should read first (its completed inputs, in plan order)."""
    by_key = {p.key: p for p in phases}
    inputs = [by_key[k] for k in phase.inputs if k in by_key]
    seconds = respond_within(phase, ceiling)
    due = now + timedelta(seconds=seconds)
    asked = for_a_person(plan, phase, build_request(plan, phase, inputs, {}, notes))
    expert = plan.expert(phase.expert or "")
    event = event_shapes.input_requested(
        phase, attempt=phase.attempt + 1, role=expert.role, due_at=due.isoformat(), respond_within=seconds,
        prompt=asked, inputs=[p.key for p in inputs if p.status == PhaseStatus.COMPLETED and
                                     p.kind != "divergence"], notes=len(notes))
    return due, event


def draft(phases: Sequence[PhaseRecord]) -> PhaseRecord | None:
    """The plan's answer as written so far: its (last) terminal phase."""
    terminal = [p for p in phases if p.meta.get("terminal")]
    return terminal[-1] if terminal else None


def failed_revision(phases: Sequence[PhaseRecord]) -> PhaseRecord | None:
    """The revision of a sent-back draft, if it failed for a reason other than the plan's
    budget (a spent budget ends the plan as such): the plan falls back to the first draft
    (:func:`storage.approval.fall_back`)."""
    return next((p for p in phases if p.meta.get("terminal") and p.meta.get("revision_of")
                 and p.status == PhaseStatus.FAILED and p.error_code != BUDGET_EXHAUSTED), None)


def revision(of: PhaseRecord, note: str, actor: Mapping[str, Any] | None) -> NewPhase:
    """The phase that rewrites draft ``of`` once it was sent back: the same kind and expert,
    reading what the draft read and the draft itself, given the note (and who sent it); it is
    the plan's terminal phase now."""
    meta = {k: v for k, v in of.meta.items() if k not in ("revised_by", "answer", "ask")}
    return NewPhase(key=f"{of.key}.{REVISED}", kind=of.kind, position=0, depends_on=[of.key], expert=of.expert,
                    round=of.round, group_key=of.group_key, inputs=[*of.inputs, of.key],
                    meta={**meta, "terminal": True, "revision_of": of.key, "note": note,
                          "sent_back_by": dict(actor) if actor else None})
