"""The pure decisions people change, over stored phases: a person's seat is never sent (only
asked), the canvas's lanes that lead to a seat end in ``advance``, a plan whose answer needs
approval waits for it instead of completing, and a resume that sends nothing says who it
waits for. A plan without people decides exactly as before."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from orchestrator.control.idle import why_idle
from orchestrator.plan import dag
from orchestrator.plan.canvas import compile_canvas
from orchestrator.plan.schema import dump_plan
from storage.models import utcnow
from storage.plans import PlanState
from storage.read_models import PhaseRecord, PlanRecord
from storage.status import PhaseStatus, PlanStatus
from tests.unit.shapes import shape
from tests.unit.stored import example, stored

PEOPLE = [{"name": "Dana", "role": "CFO"}, {"name": "You", "role": "Founder", "human": True, "respond_within": "2h"},
          {"name": "Ravi", "role": "CTO"}]
WITH_A_SEAT = example("board", rounds=2, experts=PEOPLE)
WITHOUT = example("board", rounds=2, experts=[PEOPLE[0], PEOPLE[2]])


def plan_record(spec: dict[str, object], status: PlanStatus = PlanStatus.RUNNING, *,
                cancel: bool = False) -> PlanRecord:
    now = utcnow()
    return PlanRecord(id="plan-1", tenant="default", task_id=None, title="t", kind=str(spec["kind"]), spec=spec,
                      status=status, cancel_requested=cancel, max_debates=1, error_code=None, error_message=None,
                      created_at=now, updated_at=now, finished_at=None)


def with_status(phases: list[PhaseRecord], **status: str) -> list[PhaseRecord]:
    return [dataclasses.replace(p, status=PhaseStatus(status[p.key.replace(".", "_")]))
            if p.key.replace(".", "_") in status else p for p in phases]


def test_a_seat_is_asked_never_sent_even_by_a_resume() -> None:
    phases = stored(WITH_A_SEAT, pending=[p.key for p in stored(WITH_A_SEAT) if p.key != "opening"])
    now = utcnow()
    for force in (False, True):
        sent = dag.sendable(phases, now=now, cutoff=now - timedelta(seconds=30), force=force)
        assert [p.key for p in sent] == ["r1.dana", "r1.ravi"]
    assert [p.key for p in dag.to_ask(phases)] == ["r1.you"]
    asked = with_status(phases, r1_you="awaiting_input")
    assert dag.to_ask(asked) == [] and [p.key for p in dag.awaited(asked)] == ["r1.you"]
    assert dag.ready(asked)[0].key == "r1.dana" and "r1.summary" not in [p.key for p in dag.ready(asked)]


def test_the_lanes_that_lead_to_a_seat_end_in_advance_and_a_plan_without_people_is_one_canvas() -> None:
    fresh = stored(WITH_A_SEAT, pending=[p.key for p in stored(WITH_A_SEAT)])
    opening = [p for p in fresh if p.key == "opening"]
    assert shape(compile_canvas("plan-1", fresh, opening)) == ["opening", "advance"]  # advance asks You
    # after the opening: the model turns are sent, the seat is asked; its round's summary waits for it
    after = with_status(fresh, opening="completed", r1_you="awaiting_input")
    turns = [p for p in after if p.key in ("r1.dana", "r1.ravi")]
    assert shape(compile_canvas("plan-1", after, turns)) == [("r1.dana", "r1.ravi"), "advance"]
    # once You answered, the summary runs — and ends its lane, where round 2's seat is asked
    answered = with_status(after, r1_dana="completed", r1_ravi="completed", r1_you="completed")
    summary = [p for p in answered if p.key == "r1.summary"]
    assert shape(compile_canvas("plan-1", answered, summary)) == ["r1.summary", "advance"]

    plain = stored(WITHOUT, pending=[p.key for p in stored(WITHOUT)])
    assert shape(compile_canvas("plan-1", plain, [p for p in plain if p.key == "opening"])) == [
        "opening", ("r1.dana", "r1.ravi"), "r1.summary", ("r2.dana", "r2.ravi"), "r2.summary", "final", "advance"]


def test_a_plan_whose_answer_needs_approval_waits_for_it_once_its_draft_is_written() -> None:
    spec = dump_plan(example("board", rounds=1, final={"approve": True}))
    phases = stored(example("board", rounds=1))
    assert dag.needs_approval(spec) and not dag.needs_approval(dump_plan(example("board", rounds=1)))
    assert dag.outcome(plan_record(spec), phases) == (PlanStatus.AWAITING_APPROVAL, None, None)
    assert dag.outcome(plan_record(dump_plan(example("board", rounds=1))), phases) == (PlanStatus.COMPLETED, None,
                                                                                        None)
    # a cancel outranks it, and so does a failed draft: there is nothing to approve
    assert dag.outcome(plan_record(spec, cancel=True), phases)[0] == PlanStatus.CANCELLED  # type: ignore[index]
    failed = with_status(phases, final="failed")
    assert dag.outcome(plan_record(spec), failed)[0] == PlanStatus.FAILED  # type: ignore[index]
    team = dump_plan(example("team"))
    team["synthesis"]["approve"] = True
    assert dag.needs_approval(team) and not dag.needs_approval({**team, "kind": "board"})
    assert not PlanStatus.AWAITING_APPROVAL.final and not PhaseStatus.AWAITING_INPUT.final


def test_a_spent_budget_gives_up_a_waiting_seat_too() -> None:
    phases = with_status(stored(WITH_A_SEAT, pending=[p.key for p in stored(WITH_A_SEAT) if p.key != "opening"]),
                         r1_you="awaiting_input")
    broke = [dataclasses.replace(p, status=PhaseStatus.FAILED, error_code=dag.BUDGET_EXHAUSTED)
             if p.key == "r1.dana" else p for p in phases]
    reasons, _ = dag.skips(broke)
    assert reasons == {"the plan's budget is exhausted": [
        "r1.you", "r1.ravi", "r1.summary", "r2.dana", "r2.you", "r2.ravi", "r2.summary", "final"]}


def test_a_resume_that_sends_nothing_names_who_it_waits_for_and_until_when() -> None:
    spec = dump_plan(WITH_A_SEAT)
    due = utcnow() + timedelta(hours=2)
    phases = [dataclasses.replace(p, due_at=due, started_at=utcnow()) if p.key == "r1.you" else p
              for p in with_status(stored(WITH_A_SEAT, pending=[p.key for p in stored(WITH_A_SEAT)
                                                                if p.key not in ("opening", "r1.dana", "r1.ravi")]),
                                   r1_you="awaiting_input")]
    reason = why_idle(PlanState(plan_record(spec), phases), now=utcnow(), retry_failed=False)
    assert reason.startswith(f"waiting for input from You (r1.you) until {due:%Y-%m-%d %H:%M:%S} UTC")
    assert "conclave answer plan-1 KEY" in reason

    draft = PlanState(plan_record(dump_plan(example("board", rounds=1, final={"approve": True})),
                                  PlanStatus.AWAITING_APPROVAL), stored(example("board", rounds=1)))
    reason = why_idle(draft, now=utcnow(), retry_failed=False)
    assert reason.startswith("waiting for approval of its draft (final) since ")
    assert "conclave approve plan-1" in reason and "conclave send-back plan-1 NOTE" in reason
