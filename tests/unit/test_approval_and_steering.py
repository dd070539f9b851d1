"""Approval before the answer goes out, and steering a running meeting, with the coordinator and
the phase runner in one process (SQLite): a draft waits for approval (not final, nothing held);
approve completes the plan with it; one send-back rewrites it with the note; a cancel and an
approval exclude each other; a tallied plan whose chair failed still waits for approval; a note
reaches the phases that start after it, never one already running, and costs a plan that is
never steered no statement."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.core.errors import (
    AlreadyRevised,
    InvalidRequest,
    NotAwaitingApproval,
    PlanNotFound,
    PlanNotRunning,
    TooManyNotes,
)
from orchestrator.gateway.types import ChatRequest
from orchestrator.plan import human
from orchestrator.plan.schema import dump_plan
from storage.identity import Principal
from storage.status import Outcome, PhaseStatus, PlanStatus
from tasks.lease import Lease
from tests.sqlcount import StatementCounter
from tests.unit.planes import Planes
from tests.unit.stored import example
from tests.unit.test_deliberation_flow import offline, team

ADA = Principal("ada0000000000001", "Ada", "default", ("plans:read", "plans:write"))
MALLORY = Principal("mal0000000000001", "Mallory", "other", ("plans:read", "plans:write"))
TWO = [{"name": "Dana", "role": "Chief Financial Officer"}, {"name": "Ravi", "role": "Chief Technology Officer"}]


def approved_board(rounds: int = 1, **changes: Any) -> dict[str, Any]:
    return dump_plan(example("board", rounds=rounds, experts=TWO, final={"approve": True}, **changes))


def types(planes: Planes, plan_id: str) -> list[str]:
    return [e.type for e in planes.events(plan_id)]


def record_prompts(planes: Planes) -> dict[str, list[str]]:
    """Every prompt the runner builds, by phase key (what the model is sent)."""
    seen: dict[str, list[str]] = {}
    prepare = planes.runner.prepare

    def recording(work: Any, model: str | None = None) -> tuple[Any, ChatRequest]:
        spec, request = prepare(work, model)
        seen.setdefault(work.key, []).append(request.prompt)
        return spec, request

    planes.runner.prepare = recording  # type: ignore[method-assign]
    return seen


def test_a_draft_waits_for_approval_and_approving_it_completes_the_plan(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(approved_board()).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.AWAITING_APPROVAL and state.plan.finished_at is None
    assert not state.plan.final and all(p.final for p in state.phases)  # nothing runs, nothing is held
    [waiting] = [e for e in planes.events(plan_id) if e.type == "awaiting_approval"]
    draft = planes.text(plan_id, "final") or ""
    assert waiting.data == {"phase": "final", "revision": 0, "chars": len(draft),
                            "summary": state.by_key()["final"].summary, "revision_failed": None}
    assert planes.coordinator.reads.result_text(plan_id) == draft  # readable as a draft, with its status
    view = planes.coordinator.reads.view(plan_id)
    assert view.approval == {"state": "awaiting", "phase": "final", "revision": 0,
                             "since": state.plan.updated_at.isoformat(), "sent_back": None,
                             "revision_failed": None}
    assert planes.coordinator.advance(plan_id) == [] and planes.coordinator.resume(plan_id).reason.startswith(
        "waiting for approval of its draft (final)")  # type: ignore[union-attr]

    with pytest.raises(PlanNotFound):
        planes.coordinator.approve(plan_id, principal=MALLORY)
    res = planes.coordinator.approve(plan_id, principal=ADA)
    assert (res.status, res.phase, res.revision) == (PlanStatus.COMPLETED, "final", 0)
    plan = planes.state(plan_id).plan
    assert plan.status == PlanStatus.COMPLETED and plan.finished_at is not None
    approved, finished = [e for e in planes.events(plan_id) if e.type in ("approved", "plan_finished")]
    assert approved.data == {"phase": "final", "revision": 0, "actor": {"id": ADA.id, "name": "Ada"}}
    assert finished.data["status"] == "completed"
    with pytest.raises(NotAwaitingApproval, match="completed: its draft was approved already"):
        planes.coordinator.approve(plan_id)
    assert types(planes, plan_id).count("approved") == 1


def test_a_draft_is_sent_back_once_with_a_note_then_the_revision_is_approved(planes: Planes) -> None:
    prompts = record_prompts(planes)
    plan_id = planes.coordinator.submit(approved_board()).plan_id
    planes.run_all()
    first_draft = planes.text(plan_id, "final")
    with pytest.raises(InvalidRequest):
        planes.coordinator.send_back(plan_id, "   ")
    sent = planes.coordinator.send_back(plan_id, "Lead with the risk to cash flow.", principal=ADA)
    assert (sent.status, sent.phase, sent.revision) == (PlanStatus.RUNNING, "final", "final.revised")
    assert sent.enqueued == ["final.revised"]
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.AWAITING_APPROVAL
    revised = state.by_key()["final.revised"]
    assert revised.status == PhaseStatus.COMPLETED and revised.meta["terminal"]
    assert not state.by_key()["final"].meta["terminal"]  # the first draft is kept, no longer the answer
    assert planes.text(plan_id, "final") == first_draft
    [prompt] = prompts["final.revised"]
    assert "Your draft, [final] above, was sent back by Ada with this note:\n\nLead with the risk to cash flow." \
        in prompt
    assert [e.data["revision"] for e in planes.events(plan_id) if e.type == "awaiting_approval"] == [0, 1]
    [note] = [e for e in planes.events(plan_id) if e.type == "sent_back"]
    assert note.data == {"phase": "final", "revision": "final.revised", "note": "Lead with the risk to cash flow.",
                         "actor": {"id": ADA.id, "name": "Ada"}}

    with pytest.raises(AlreadyRevised) as twice:
        planes.coordinator.send_back(plan_id, "Again, please.")
    assert twice.value.code == "plan.already_revised" and twice.value.http_status == 409
    assert planes.state(plan_id).plan.status == PlanStatus.AWAITING_APPROVAL  # nothing changed

    res = planes.coordinator.approve(plan_id, principal=ADA)
    assert (res.phase, res.revision) == ("final.revised", 1)
    assert planes.coordinator.reads.result_text(plan_id) == planes.text(plan_id, "final.revised")
    view = planes.coordinator.reads.view(plan_id)
    assert view.approval is not None and view.approval["state"] == "approved"
    assert view.approval["sent_back"] == {"phase": "final", "note": "Lead with the risk to cash flow.",
                                          "by": {"id": ADA.id, "name": "Ada"}}


def test_a_cancel_and_an_approval_exclude_each_other(planes: Planes) -> None:
    cancelled = planes.coordinator.submit(approved_board(task_id="cancel-first")).plan_id
    approved = planes.coordinator.submit(approved_board(task_id="approve-first")).plan_id
    planes.run_all()
    res = planes.coordinator.cancel(cancelled, principal=ADA)
    assert res.status == PlanStatus.CANCELLED and res.cancelled == []
    with pytest.raises(NotAwaitingApproval, match="was cancelled") as late:
        planes.coordinator.approve(cancelled, principal=ADA)
    assert late.value.details == [{"field": "plan_id", "message": "plan is cancelled", "status": "cancelled"}]
    with pytest.raises(NotAwaitingApproval):
        planes.coordinator.send_back(cancelled, "Too late.")
    assert "approved" not in types(planes, cancelled) and types(planes, cancelled)[-1] == "plan_finished"

    planes.coordinator.approve(approved, principal=ADA)
    after = planes.coordinator.cancel(approved, principal=ADA)
    assert after.status == PlanStatus.COMPLETED and after.cancelled == []  # a completed plan stays completed
    assert "cancel_requested" not in types(planes, approved)


def test_a_team_s_synthesis_waits_too_and_a_plan_without_approval_is_refused(planes: Planes) -> None:
    team = dump_plan(example("team", divergence="off"))
    team["synthesis"]["approve"] = True
    plan_id = planes.coordinator.submit(team).plan_id
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.AWAITING_APPROVAL
    assert planes.coordinator.send_back(plan_id, "Shorter.").revision == "synthesis.revised"
    planes.run_all()
    assert planes.coordinator.approve(plan_id).phase == "synthesis.revised"

    plain = planes.coordinator.submit(dump_plan(example("board", rounds=1, experts=TWO))).plan_id
    planes.run_all()
    with pytest.raises(NotAwaitingApproval, match="does not ask for approval"):
        planes.coordinator.approve(plain)


def test_a_tallied_team_whose_chair_fails_still_waits_for_approval(testing_planes: Planes) -> None:
    planes = testing_planes
    doc = team(lead_model="broken", models={"default": offline(), "broken": offline(fail=True)})
    doc["synthesis"]["approve"] = True
    plan_id = planes.coordinator.submit(doc).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    synthesis = state.by_key()["synthesis"]
    assert synthesis.verdict is not None and synthesis.verdict["chair_failed"]["code"] == "llm.unavailable"
    assert state.plan.status == PlanStatus.AWAITING_APPROVAL  # the decision record, read aloud, is the draft
    assert planes.coordinator.approve(plan_id).status == PlanStatus.COMPLETED


def test_a_note_reaches_the_phases_that_start_after_it_and_no_phase_already_running(planes: Planes) -> None:
    prompts = record_prompts(planes)
    plan_id = planes.coordinator.submit(dump_plan(example("board", rounds=2, experts=TWO))).plan_id
    [canvas] = planes.dispatcher.take()
    # round one runs; r2.dana is claimed (it started) before the note, r2.ravi after it
    for key in ("opening", "r1.dana", "r1.ravi", "r1.summary"):
        planes.deliver(planes.state(plan_id).by_key()[key].id, key, plan_id=plan_id)
    dana = planes.runner.claim(planes.state(plan_id).by_key()["r2.dana"].id, owner="unit:early", plan_id=plan_id)
    assert dana is not None and dana.notes == []  # claimed: it started before the note
    res = planes.coordinator.steer(plan_id, "Weigh the churn risk above everything.", principal=ADA)
    assert (res.n, res.status) == (1, PlanStatus.RUNNING)
    [steered] = [e for e in planes.events(plan_id) if e.type == "steered"]
    assert steered.data == {"n": 1, "note": "Weigh the churn risk above everything.",
                            "actor": {"id": ADA.id, "name": "Ada"}}
    assert planes.runner.execute(dana, Lease(dana.phase.id, dana.attempt)) == Outcome.COMPLETED  # it runs on
    for key in ("r2.ravi", "r2.summary", "final"):
        planes.deliver(planes.state(plan_id).by_key()[key].id, key, plan_id=plan_id)
    note = "- Ada (note 1): Weigh the churn risk above everything."
    for key in ("opening", "r1.dana", "r1.ravi", "r1.summary", "r2.dana"):
        assert all(note not in p for p in prompts[key]), key
    for key in ("r2.ravi", "r2.summary", "final"):
        assert all(note in p for p in prompts[key]), key
    assert planes.state(plan_id).plan.notes[0]["by"] == {"id": ADA.id, "name": "Ada"}
    planes.coordinator.advance(plan_id)  # the canvas's end
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    assert [r.key for r in canvas.runs][:2] == ["opening", "r1.dana"]


def test_steering_is_refused_once_nothing_is_left_to_start_and_past_its_limit(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(dump_plan(example("board", rounds=1, experts=TWO))).plan_id
    for n in range(human.MAX_NOTES):
        planes.coordinator.steer(plan_id, f"note {n}")
    with pytest.raises(TooManyNotes):
        planes.coordinator.steer(plan_id, "one more")
    with pytest.raises(InvalidRequest):
        planes.coordinator.steer(plan_id, "x" * (human.MAX_NOTE_CHARS + 1))
    with pytest.raises(PlanNotFound):
        planes.coordinator.steer(plan_id, "mine", principal=MALLORY)
    planes.run_all()
    with pytest.raises(PlanNotRunning, match="is completed"):
        planes.coordinator.steer(plan_id, "too late")
    waiting = planes.coordinator.submit(approved_board(task_id="steer-approval")).plan_id
    planes.run_all()
    with pytest.raises(PlanNotRunning, match="send the draft back with your note instead"):
        planes.coordinator.steer(waiting, "too late")


def test_a_steered_plan_s_claim_costs_the_statements_of_any_claim(planes: Planes) -> None:
    costs = []
    for steer in (False, True):
        plan_id = planes.coordinator.submit(dump_plan(example("board", rounds=1, experts=TWO,
                                                              task_id=f"cost-{steer}"))).plan_id
        if steer:
            planes.coordinator.steer(plan_id, "Keep it short.")
        phase = planes.state(plan_id).by_key()["opening"]
        counter = StatementCounter().attach(planes.db.engine)
        try:
            planes.deliver(phase.id, "opening", plan_id=plan_id)
            costs.append(counter.snapshot()["statements"])
        finally:
            counter.detach()
    never, steered = costs
    assert never == steered and never["storage.phases.claim_phase"] == 5  # the opening reads no inputs
    assert set(never) == {"storage.phases.claim_phase", "storage.usage.record_usage", "storage.phases.complete_phase",
                          "storage.plans.get_spec"}
    assert isinstance(never, Counter)


def test_a_revision_that_fails_falls_back_to_the_first_draft_which_waits_again(testing_planes: Planes) -> None:
    planes = testing_planes
    failing = {"default": {"provider": "offline", "max_retries": 0, "options": {"words": 30, "fail_revision": True}}}
    plan_id = planes.coordinator.submit(approved_board(models=failing)).plan_id
    planes.run_all()
    first_draft = planes.text(plan_id, "final")
    planes.coordinator.send_back(plan_id, "Lead with the risk to cash flow.", principal=ADA)
    planes.run_all()
    state = planes.state(plan_id)
    revised, draft = state.by_key()["final.revised"], state.by_key()["final"]
    assert (revised.status, revised.error_code) == (PhaseStatus.FAILED, "llm.unavailable")
    # the plan is not lost: the first draft is its answer again, the failure recorded on it
    assert (state.plan.status, state.plan.error_code) == (PlanStatus.AWAITING_APPROVAL, None)
    assert draft.meta["terminal"] and not revised.meta["terminal"] and revised.meta["fell_back"]
    failure = {"phase": "final.revised", "error_code": "llm.unavailable", "error": revised.error_message}
    assert draft.meta["revision_failed"] == failure
    waits = [e.data for e in planes.events(plan_id) if e.type == "awaiting_approval"]
    assert [w["phase"] for w in waits] == ["final", "final"] and waits[1]["revision_failed"] == failure
    assert "plan_finished" not in types(planes, plan_id)
    view = planes.coordinator.reads.view(plan_id)
    assert view.approval is not None
    assert (view.approval["state"], view.approval["phase"], view.approval["revision"]) == ("awaiting", "final", 0)
    assert view.approval["revision_failed"] == failure
    from orchestrator.cli.plan_commands import people_lines
    assert (f"the revision final.revised failed (llm.unavailable: {revised.error_message}): the first draft final "
            "is the answer again") in people_lines(view)
    assert planes.coordinator.reads.result_text(plan_id) == first_draft
    with pytest.raises(AlreadyRevised):  # the one send-back was spent
        planes.coordinator.send_back(plan_id, "Try again.")
    res = planes.coordinator.approve(plan_id, principal=ADA)
    assert (res.status, res.phase, res.revision) == (PlanStatus.COMPLETED, "final", 0)
    assert planes.coordinator.reads.result_text(plan_id) == first_draft
