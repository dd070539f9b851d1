"""A person's seat, with the coordinator and the phase runner in one process (SQLite): the
seat is asked by ``advance``, never sent; it holds nothing while it waits; a person's answer is
stored like a model's turn (content, fenced status, events — no usage row), idempotent by the
client's key; its deadline ends it once, by the plan's ``missing_expert`` rule; a cancel, a
resume, another tenant, two seats at once, verdicts and debates."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from orchestrator.core.errors import InvalidRequest, PhaseNotFound, PlanNotFound, SeatNotWaiting
from orchestrator.plan import human
from orchestrator.plan.canvas import Run, walk
from orchestrator.plan.schema import dump_plan
from storage import seats
from storage.identity import Principal
from storage.models import utcnow
from storage.status import PhaseStatus, PlanStatus
from tests.unit.planes import Planes
from tests.unit.stored import example

ADA = Principal("ada0000000000001", "Ada", "default", ("plans:read", "plans:write"))
MALLORY = Principal("mal0000000000001", "Mallory", "other", ("plans:read", "plans:write"))
YOU = {"name": "You", "role": "Founder", "human": True, "respond_within": "2h"}


def board(*people: dict[str, Any], rounds: int = 1, **changes: Any) -> dict[str, Any]:
    experts = [{"name": "Dana", "role": "Chief Financial Officer"}, *people]
    return dump_plan(example("board", rounds=rounds, experts=experts, **changes))


def sent_keys(planes: Planes) -> list[str]:
    return [s.key for c in planes.dispatcher.sent for s in walk(c.root) if isinstance(s, Run)]


def events(planes: Planes, plan_id: str, kind: str) -> list[Any]:
    return [e for e in planes.events(plan_id) if e.type == kind]


def test_a_seat_is_asked_by_advance_holding_nothing_and_never_sent(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    seat = state.by_key()["r1.you"]
    assert seat.status == PhaseStatus.AWAITING_INPUT and seat.attempt == 1
    assert (seat.lease_owner, seat.lease_expires_at, seat.enqueued_at) == (None, None, None)  # nothing held
    assert seat.started_at is not None and seat.due_at == seat.started_at + timedelta(hours=2)
    assert "r1.you" not in sent_keys(planes)  # no canvas ever carried it
    assert planes.statuses(plan_id)["r1.summary"] == PhaseStatus.PENDING  # the round waits for its answer
    [asked] = events(planes, plan_id, "input_requested")
    assert asked.phase_key == "r1.you" and asked.data["expert"] == "You" and asked.data["role"] == "Founder"
    assert asked.data["due_at"] == seat.due_at.isoformat() and asked.data["respond_within"] == 7200
    assert asked.data["inputs"] == ["opening"] and asked.data["attempt"] == 1
    assert asked.data["prompt"].startswith("Round 1 of 1. The question: Ledgerly sells accounting software")
    assert seat.meta["ask"]["prompt"] == asked.data["prompt"]  # the page and the terminal show it
    # a run_phase for the seat (a stray message) is refused by the claim: a worker never runs a seat
    assert planes.deliver(seat.id, "r1.you", plan_id=plan_id) is None
    assert planes.statuses(plan_id)["r1.you"] == PhaseStatus.AWAITING_INPUT
    # advance again (the reconciler, a resume): the seat is asked once
    planes.coordinator.advance(plan_id)
    assert len(events(planes, plan_id, "input_requested")) == 1
    assert planes.usage(plan_id) and all(u.phase_id != seat.id for u in planes.usage(plan_id))


def test_a_stray_message_for_a_seat_is_refused_by_the_claim(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    [canvas] = planes.dispatcher.take()
    planes.deliver(canvas.runs[0].phase_id, "opening", plan_id=plan_id)  # no advance yet: the seat is ready
    seat = planes.state(plan_id).by_key()["r1.you"]
    assert seat.status == PhaseStatus.PENDING
    assert planes.deliver(seat.id, "r1.you", plan_id=plan_id) is None  # a worker never runs a seat
    after = planes.state(plan_id).by_key()["r1.you"]
    assert (after.status, after.attempt, after.lease_owner) == (PhaseStatus.PENDING, 0, None)
    assert all(u.phase_id != seat.id for u in planes.usage(plan_id))
    planes.coordinator.advance(plan_id)
    assert planes.statuses(plan_id)["r1.you"] == PhaseStatus.AWAITING_INPUT  # advance asks it


def test_two_advances_racing_ask_a_seat_once(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    [canvas] = planes.dispatcher.take()
    planes.deliver(canvas.runs[0].phase_id, "opening", plan_id=plan_id)
    state = planes.state(plan_id)
    seat = state.by_key()["r1.you"]
    due, event = human.request(example("board", rounds=1, experts=[{"name": "Dana", "role": "CFO"}, YOU]), seat,
                               state.phases, [], now=utcnow(), ceiling=planes.settings.max_respond_within)
    ask = seats.Ask(seat.id, due, event)
    # both read the seat pending and ready; the conditional UPDATE lets one of them ask it
    first, second = seats.ask(planes.db, plan_id, [ask]), seats.ask(planes.db, plan_id, [ask])
    assert [e.type for e in first] == ["input_requested"] and second == ()
    assert planes.state(plan_id).by_key()["r1.you"].attempt == 1


def test_an_answer_is_stored_like_a_model_s_turn_and_the_plan_moves_on(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    planes.run_all()
    res = planes.coordinator.answer(plan_id, "r1.you", "  We should pilot it with two segments first.\n",
                                    idempotency_key="k1", principal=ADA)
    assert (res.status, res.replayed, res.enqueued) == (PhaseStatus.COMPLETED, False, ["r1.summary", "final"])
    assert res.answered_by == {"id": ADA.id, "name": "Ada"}
    seat = planes.state(plan_id).by_key()["r1.you"]
    assert seat.status == PhaseStatus.COMPLETED and seat.finished_at is not None
    assert planes.text(plan_id, "r1.you") == "We should pilot it with two segments first."
    assert planes.contents(plan_id)[seat.id] == 1
    assert all(u.phase_id != seat.id for u in planes.usage(plan_id))  # a person costs no tokens
    received, completed = [e for e in planes.events(plan_id) if e.phase_key == "r1.you"
                           and e.type in ("input_received", "phase_completed")]
    assert received.data["actor"] == {"id": ADA.id, "name": "Ada"} and received.data["chars"] == 43
    assert completed.data["k"] == 3 and completed.data["n"] == 5  # opening, Dana, You of 5
    assert "token" not in str(received.data).lower()
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    assert "You" in (planes.text(plan_id, "r1.summary") or "")  # the chair summarises the person's words too


def test_the_same_key_is_told_the_stored_answer_and_another_key_is_refused(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    planes.run_all()
    first = planes.coordinator.answer(plan_id, "r1.you", "Yes.", idempotency_key="k1", principal=ADA)
    again = planes.coordinator.answer(plan_id, "r1.you", "Something else.", idempotency_key="k1", principal=ADA)
    assert again.replayed and (again.answered_by, again.answered_at) == (first.answered_by, first.answered_at)
    assert planes.text(plan_id, "r1.you") == "Yes."  # the first answer stands
    with pytest.raises(SeatNotWaiting) as refused:
        planes.coordinator.answer(plan_id, "r1.you", "No.", idempotency_key="k2", principal=ADA)
    assert refused.value.code == "phase.not_waiting" and refused.value.http_status == 409
    assert refused.value.details == [{"field": "key", "message": "phase is completed", "status": "completed"}]
    assert "already answered (by Ada" in refused.value.message
    with pytest.raises(SeatNotWaiting):  # no key: a second answer is refused too
        planes.coordinator.answer(plan_id, "r1.you", "No.")
    assert len(events(planes, plan_id, "input_received")) == 1


def test_answers_that_cannot_be_taken_are_refused_naming_why(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU, rounds=2)).plan_id
    planes.run_all()
    with pytest.raises(SeatNotWaiting, match=r"r2\.you is not asked yet"):
        planes.coordinator.answer(plan_id, "r2.you", "Too early.")
    with pytest.raises(SeatNotWaiting, match=r"r1\.dana is not a person's seat"):
        planes.coordinator.answer(plan_id, "r1.dana", "Not mine.")
    with pytest.raises(PhaseNotFound):
        planes.coordinator.answer(plan_id, "r9.nobody", "Hello?")
    with pytest.raises(PlanNotFound):  # another tenant's plan is a missing one
        planes.coordinator.answer(plan_id, "r1.you", "Mine now.", principal=MALLORY)
    for text, key in (("", None), ("   ", None), ("x" * 100_001, None), ("ok", ""), ("ok", "k" * 201),
                      ("ok", "bad\nkey")):
        with pytest.raises(InvalidRequest):
            planes.coordinator.answer(plan_id, "r1.you", text, idempotency_key=key)
    assert planes.statuses(plan_id)["r1.you"] == PhaseStatus.AWAITING_INPUT and not events(planes, plan_id,
                                                                                             "input_received")


def test_two_seats_in_one_round_wait_and_are_answered_on_their_own_in_either_order(planes: Planes) -> None:
    them = {"name": "Theo", "role": "Investor", "human": True, "respond_within": "1d"}
    plan_id = planes.coordinator.submit(board(YOU, them)).plan_id
    planes.run_all()
    assert {k: v for k, v in planes.statuses(plan_id).items() if v == PhaseStatus.AWAITING_INPUT} == {
        "r1.you": PhaseStatus.AWAITING_INPUT, "r1.theo": PhaseStatus.AWAITING_INPUT}
    due = {p.key: p.due_at - p.started_at for p in planes.state(plan_id).phases if p.due_at and p.started_at}
    assert due == {"r1.you": timedelta(hours=2), "r1.theo": timedelta(days=1)}  # each its own deadline
    late = planes.coordinator.answer(plan_id, "r1.theo", "Theo's view.", principal=ADA)
    assert late.enqueued == []  # the round still waits for You
    assert planes.statuses(plan_id)["r1.you"] == PhaseStatus.AWAITING_INPUT
    assert planes.coordinator.answer(plan_id, "r1.you", "My view.").enqueued == ["r1.summary", "final"]
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED


def test_at_the_deadline_a_tolerant_meeting_notes_the_absence_once(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    planes.run_all()
    seat = planes.state(plan_id).by_key()["r1.you"]
    assert seat.due_at is not None
    assert planes.coordinator.expire_deadlines(now=seat.due_at - timedelta(seconds=1)) == {}  # not yet
    assert planes.coordinator.expire_deadlines(now=seat.due_at) == {plan_id: ["r1.you"]}
    assert planes.coordinator.expire_deadlines(now=seat.due_at + timedelta(hours=1)) == {}  # once
    assert seats.expire(planes.db, plan_id, now=seat.due_at + timedelta(hours=1)).keys == []  # even if asked again
    ended = planes.state(plan_id).by_key()["r1.you"]
    assert (ended.status, ended.error_code) == (PhaseStatus.FAILED, seats.TIMED_OUT)
    assert ended.error_message == f"You did not answer by {seat.due_at:%Y-%m-%d %H:%M:%S} UTC"
    [failed] = [e for e in events(planes, plan_id, "phase_failed") if e.phase_key == "r1.you"]
    assert failed.data["error_code"] == "input.timed_out"
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED  # missing_expert: tolerate
    summary = planes.text(plan_id, "r1.summary") or ""
    assert "You" in summary
    with pytest.raises(SeatNotWaiting, match=r"after r1\.you's deadline") as late:
        planes.coordinator.answer(plan_id, "r1.you", "Sorry, late.")
    assert late.value.details[0]["status"] == "failed"


def test_an_answer_past_the_deadline_is_refused_before_any_sweep_ended_the_seat(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    planes.run_all()
    seat = planes.state(plan_id).by_key()["r1.you"]
    assert seat.due_at is not None
    found = seats.answer(planes.db, plan_id=plan_id, key="r1.you", text="late", summary="late", offloaded=False,
                         verdict=None, actor=None, idempotency_key=None, now=seat.due_at)
    assert not found.stored and found.status == PhaseStatus.AWAITING_INPUT and not planes.contents(plan_id).get(seat.id)


def test_at_the_deadline_a_fatal_rule_fails_the_plan_naming_the_seat(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU, missing_expert="fatal")).plan_id
    planes.run_all()
    due = planes.state(plan_id).by_key()["r1.you"].due_at
    assert due is not None
    planes.coordinator.expire_deadlines(now=due + timedelta(seconds=1))
    planes.run_all()
    plan = planes.state(plan_id).plan
    assert (plan.status, plan.error_code) == (PlanStatus.FAILED, "input.timed_out")
    assert plan.error_message == (f"phase r1.you failed: You did not answer by {due:%Y-%m-%d %H:%M:%S} UTC "
                                  "(missing_expert: fatal — the plan ends when a person does not answer in time)")
    assert planes.statuses(plan_id)["final"] == PhaseStatus.SKIPPED
    # a retry asks the person again, with a new deadline
    res = planes.coordinator.resume(plan_id, retry_failed=True)
    assert "r1.you" in res.retried
    again = planes.state(plan_id).by_key()["r1.you"]
    assert again.status == PhaseStatus.AWAITING_INPUT and again.attempt == 2 and again.due_at and again.due_at > due
    assert len(events(planes, plan_id, "input_requested")) == 2


def test_a_cancel_ends_a_waiting_seat_and_a_resume_says_who_it_waits_for(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(YOU)).plan_id
    planes.run_all()
    res = planes.coordinator.resume(plan_id)
    assert res.enqueued == [] and res.reason is not None
    assert res.reason.startswith("waiting for input from You (r1.you) until ")
    assert len(events(planes, plan_id, "input_requested")) == 1
    cancelled = planes.coordinator.cancel(plan_id, principal=ADA)
    assert "r1.you" in cancelled.cancelled and cancelled.status == PlanStatus.CANCELLED
    assert planes.statuses(plan_id)["r1.you"] == PhaseStatus.CANCELLED
    with pytest.raises(SeatNotWaiting, match="was cancelled"):
        planes.coordinator.answer(plan_id, "r1.you", "Still here.")


def test_a_person_s_verdict_is_read_like_a_model_s_and_a_missing_one_is_an_abstention(planes: Planes) -> None:
    plan = dump_plan(example("board-vote", rounds=1, stop_when=None, experts=[
        {"name": "Dana", "role": "CFO"}, {"name": "Ravi", "role": "CTO"}, YOU,
        {"name": "Theo", "role": "Investor", "human": True}]))
    plan_id = planes.coordinator.submit(plan).plan_id
    planes.run_all()
    asked = planes.state(plan_id).by_key()["r1.you"].meta["ask"]["prompt"]
    assert 'Verdict: {"answer":' in asked  # the person is asked for the verdict line too
    options = plan["answer"]["options"]
    calls = len(planes.usage(plan_id))
    planes.coordinator.answer(plan_id, "r1.you", f'I agree.\nVerdict: {{"answer": "{options[0]}", "confidence": 0.9, '
                                                 '"reason": "cash first"}')
    planes.coordinator.answer(plan_id, "r1.theo", "I would rather not say.")
    by_key = planes.state(plan_id).by_key()
    assert by_key["r1.you"].verdict == {"answer": options[0], "confidence": 0.9, "reason": "cash first"}
    theo = by_key["r1.theo"].verdict
    assert theo is not None and theo["answer"] is None and theo["abstained"]
    assert len(planes.usage(plan_id)) == calls  # no repair request: a person is never asked to repair
    planes.run_all()
    votes = {v["expert"]: v for v in planes.state(plan_id).by_key()["decision"].verdict["votes"]}  # type: ignore[index]
    assert votes["You"]["answer"] == options[0] and votes["Theo"].get("abstained")


def test_a_team_s_seat_and_the_debate_a_disagreement_gives_it(planes: Planes) -> None:
    team = dump_plan(example("team", divergence="lexical"))  # Marcus opposes (examples/models.yaml)
    first = team["phases"][0]["expert"]
    team["experts"] = [{"name": e["name"], "role": e["role"], "human": True} if e["name"] == first else e
                       for e in team["experts"]]
    plan_id = planes.coordinator.submit(team).plan_id
    planes.run_all()
    key = team["phases"][0]["id"]
    assert planes.statuses(plan_id)[key] == PhaseStatus.AWAITING_INPUT
    seat = planes.state(plan_id).by_key()[key]
    assert seat.due_at and seat.started_at and seat.due_at - seat.started_at == timedelta(days=1)  # the default
    planes.coordinator.answer(plan_id, key, "Position: SUPPORT. Growth pays for the transition.")
    planes.run_all()
    # the check finds the person and Marcus at odds: the person is asked to debate, like any expert
    by_key = planes.state(plan_id).by_key()
    mine, theirs = by_key[f"debate-check-1.{first.lower()}"], by_key["debate-check-1.marcus"]
    assert mine.human and mine.status == PhaseStatus.AWAITING_INPUT and mine.meta["opponents"] == ["Marcus"]
    assert theirs.status == PhaseStatus.COMPLETED and not theirs.human
    assert "You disagree with Marcus" in mine.meta["ask"]["prompt"]
    assert planes.statuses(plan_id)["rollout"] == PhaseStatus.PENDING  # it waits for the debate
    planes.coordinator.answer(plan_id, mine.key, "Revised position: I hold firm. Position: SUPPORT")
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED


def team_with_priya_a_person(**changes: Any) -> dict[str, Any]:
    team = dump_plan(example("team", **changes))
    team["experts"] = [{"name": e["name"], "role": e["role"], "human": True, "respond_within": "1h"}
                       if e["name"] == "Priya" else e for e in team["experts"]]
    return team


def test_a_team_tolerates_a_person_who_did_not_answer_and_tells_what_follows(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(team_with_priya_a_person(divergence="lexical")).plan_id
    planes.run_all()
    seat = planes.state(plan_id).by_key()["growth"]
    assert seat.status == PhaseStatus.AWAITING_INPUT and seat.meta["missing_expert"] == "tolerate"
    assert seat.due_at is not None
    assert planes.statuses(plan_id)["check-1"] == PhaseStatus.PENDING  # the check waits for the person
    assert planes.coordinator.expire_deadlines(now=seat.due_at) == {plan_id: ["growth"]}
    planes.run_all()
    state = planes.state(plan_id)
    statuses = planes.statuses(plan_id)
    assert (state.plan.status, state.plan.error_code) == (PlanStatus.COMPLETED, None)  # missing_expert: tolerate
    assert statuses["growth"] == PhaseStatus.FAILED and state.by_key()["growth"].error_code == seats.TIMED_OUT
    assert {statuses[k] for k in ("finance", "check-1", "rollout", "synthesis")} == {PhaseStatus.COMPLETED}
    assert not any(k.startswith("debate-") for k in statuses)  # one voice left: nothing to debate
    # what followed was told who was absent: the synthesis says so
    synthesis = planes.text(plan_id, "synthesis") or ""
    assert "**Absent.** Priya did not answer in time" in synthesis
    with pytest.raises(SeatNotWaiting, match="after growth's deadline"):
        planes.coordinator.answer(plan_id, "growth", "Sorry, late.")


def test_the_absence_is_in_the_request_a_later_phase_is_given(planes: Planes) -> None:
    from orchestrator.plan.prompts import build_request
    from orchestrator.plan.schema import parse_plan

    plan_id = planes.coordinator.submit(team_with_priya_a_person(divergence="off")).plan_id
    planes.run_all()
    due = planes.state(plan_id).by_key()["growth"].due_at
    assert due is not None
    planes.coordinator.expire_deadlines(now=due)
    planes.run_all()
    state = planes.state(plan_id)
    by_key = state.by_key()
    rollout = by_key["rollout"]
    request = build_request(parse_plan(state.plan.spec), rollout, [by_key[k] for k in rollout.inputs], {})
    assert "Absent: Priya did not answer in time" in request.prompt and request.hints["absent"] == ["Priya"]


def test_a_team_whose_rule_is_fatal_fails_naming_the_seat_and_the_rule(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(team_with_priya_a_person(divergence="off", missing_expert="fatal")).plan_id
    planes.run_all()
    due = planes.state(plan_id).by_key()["growth"].due_at
    assert due is not None
    planes.coordinator.expire_deadlines(now=due)
    planes.run_all()
    plan = planes.state(plan_id).plan
    statuses = planes.statuses(plan_id)
    assert (plan.status, plan.error_code) == (PlanStatus.FAILED, "input.timed_out")
    assert plan.error_message == (f"phase growth failed: Priya did not answer by {due:%Y-%m-%d %H:%M:%S} UTC "
                                  "(missing_expert: fatal — the plan ends when a person does not answer in time)")
    assert statuses["finance"] == PhaseStatus.COMPLETED  # what did not need the person still ran
    assert (statuses["rollout"], statuses["synthesis"]) == (PhaseStatus.SKIPPED, PhaseStatus.SKIPPED)
