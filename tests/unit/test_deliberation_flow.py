"""Deliberation end to end on the planes (coordinator + runner over SQLite, the offline model):
every expert turn stores its verdict, the decision phase stores the tally that code recomputes
from those stored verdicts (one ``decision_recorded`` event, the record itself), the chair is
held to it; a malformed verdict costs one repair call, then an abstention, never the plan; a
board whose panel agrees skips its remaining rounds durably and says what that saved; an
expert's fallback models answer when its model fails or hangs, and a tallied plan survives its
chair. Redelivered, resumed and taken-over phases change none of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.api.ui.answer import decision_record
from orchestrator.client.console import decision_lines, early_stop_line
from orchestrator.core.errors import InvalidPlan
from orchestrator.deliberation.verdicts import read_verdict
from orchestrator.gateway.failures import ProviderUnavailable
from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.gateway.types import Completion, Usage
from orchestrator.plan import tally
from orchestrator.plan.schema import parse_plan
from orchestrator.plan.views import PlanView, plan_view
from storage.read_models import EventRecord, PhaseRecord
from storage.status import Outcome, PhaseStatus, PlanStatus
from tasks.lease import Lease
from tasks.runner import PhaseRunner
from tests.unit.planes import Planes, published

QUESTION = "Should Ledgerly move to usage-based pricing next quarter?"
OPTIONS = ["Adopt usage pricing", "Keep the flat plan"]
CHOICE = {"type": "choice", "options": OPTIONS}
PANEL = [("Dana", "Chief Financial Officer"), ("Ravi", "Chief Technology Officer"), ("Sofia", "Head of Sales")]
AGREE = {"Dana": "support", "Ravi": "support", "Sofia": "support"}
SPLIT = {"Dana": "support", "Ravi": "oppose", "Sofia": "oppose"}  # two of three: short of 0.8


def offline(**options: Any) -> dict[str, Any]:
    return {"provider": "offline", "max_retries": 0, "options": {"words": 30, **options}}


def board(rounds: int = 1, *, experts: int = 3, models: dict[str, Any] | None = None, **plan: Any) -> dict[str, Any]:
    """A board deciding by vote between two options, on the offline model (``models.default``)."""
    return {
        "kind": "board", "title": "Pricing, by vote", "question": QUESTION, "rounds": rounds,
        "moderator": {"name": "Morgan", "role": "Chair of the board"},
        "experts": [{"name": n, "role": r} for n, r in PANEL[:experts]],
        "answer": CHOICE, "decide": "vote", "models": models or {"default": offline()}, **plan,
    }


def team(*, synthesis: bool = True, lead_model: str = "default", models: dict[str, Any] | None = None,
         **plan: Any) -> dict[str, Any]:
    """Two analysts in parallel, then (optionally) Lead's synthesis; no divergence check."""
    doc: dict[str, Any] = {
        "kind": "team", "title": "Pricing, by a team", "question": QUESTION, "divergence": "off",
        "experts": [{"name": "Ada", "role": "Analyst"}, {"name": "Bo", "role": "Analyst"},
                    {"name": "Lead", "role": "Lead expert", "model": lead_model}],
        "phases": [{"id": "ada", "expert": "Ada", "prompt": "Weigh the revenue case."},
                   {"id": "bo", "expert": "Bo", "prompt": "Weigh the churn risk."}],
        "answer": CHOICE, "decide": "vote", "models": models or {"default": offline()}, **plan,
    }
    if synthesis:
        doc["synthesis"] = {"expert": "Lead"}
    return doc


def run(planes: Planes, plan: dict[str, Any]) -> str:
    plan_id = planes.coordinator.submit(plan).plan_id
    planes.run_all()
    return plan_id


def view(planes: Planes, plan_id: str) -> PlanView:
    return plan_view(planes.state(plan_id), planes.usage(plan_id))


def phase(planes: Planes, plan_id: str, key: str) -> PhaseRecord:
    return planes.state(plan_id).by_key()[key]


def recomputed(planes: Planes, plan_id: str) -> dict[str, Any]:
    """The decision code computes from the stored verdicts of the decision phase's inputs."""
    state = planes.state(plan_id)
    decision = state.by_key()["decision"]
    inputs = [p for p in state.phases if p.key in decision.inputs]
    return tally.decide(parse_plan(state.plan.spec), plan_id, inputs).as_json()


def recorded(planes: Planes, plan_id: str) -> list[EventRecord]:
    return [e for e in planes.events(plan_id) if e.type == "decision_recorded"]


def same(data: Any) -> Any:
    """As stored and read back (JSON): tuples are lists."""
    return json.loads(json.dumps(data))


def usage_of(planes: Planes, plan_id: str, key: str) -> list[tuple[int, int, str, str, bool]]:
    pid = phase(planes, plan_id, key).id
    return [(u.attempt, u.seq, u.purpose, u.model, u.counted) for u in planes.usage(plan_id) if u.phase_id == pid]


# ---------------------------------------------------------------- a board that votes


def test_a_board_that_votes_stores_every_verdict_and_the_tally_of_them(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board(rounds=2)).plan_id
    sub = planes.bus.subscribe(plan_id)
    planes.run_all()

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    assert {p.key: p.status for p in state.phases} == dict.fromkeys(
        ["opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary", "r2.dana", "r2.ravi", "r2.sofia", "r2.summary",
         "decision", "final"], PhaseStatus.COMPLETED)
    spec = parse_plan(state.plan.spec).answer
    assert spec is not None
    for turn in (p for p in state.phases if p.kind == "turn"):
        assert turn.verdict is not None and turn.verdict["answer"] in OPTIONS, turn.key
        assert turn.verdict == same(read_verdict(planes.text(plan_id, turn.key) or "", spec).as_json())
    assert all(p.verdict is None for p in state.phases if p.kind in ("opening", "round_summary"))

    decision = state.by_key()["decision"]
    assert decision.verdict == same(recomputed(planes, plan_id))  # the stored record is the code's tally
    assert [v["phase"] for v in decision.verdict["votes"]] == ["r2.dana", "r2.ravi", "r2.sofia"]  # latest verdicts
    assert usage_of(planes, plan_id, "decision") == []  # no model, no tokens
    assert planes.text(plan_id, "decision") == tally.decision_text(
        tally.decide(parse_plan(state.plan.spec), plan_id, [p for p in state.phases if p.key in decision.inputs]))
    [event] = recorded(planes, plan_id)
    assert event.phase_key == "decision" and event.data == decision.verdict
    assert [m for m in published(sub) if m["type"] == "decision_recorded"] == [event.message()]

    final = state.by_key()["final"]
    assert final.verdict is not None
    assert final.verdict["matches_decision"] is True and final.verdict["decision"] == decision.verdict["key"]
    assert final.verdict["answer"] == decision.verdict["answer"]
    seen = view(planes, plan_id)
    assert seen.decision == {**decision.verdict, "chair": {"phase": "final", "answer": decision.verdict["answer"],
                                                           "matches": True, "failed": None}}
    assert seen.phase("r1.dana").verdict == state.by_key()["r1.dana"].verdict
    assert seen.early_stop is None
    assert seen.warnings and "same model" in seen.warnings[0]  # every expert on the one offline model


def test_a_malformed_verdict_gets_one_repair_call_per_turn(testing_planes: Planes) -> None:
    planes = testing_planes
    plan_id = run(planes, board(models={"default": offline(malformed_verdict="once")}))

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    for key in ("r1.dana", "r1.ravi", "r1.sofia"):
        verdict = state.by_key()[key].verdict
        assert verdict is not None and verdict["answer"] in OPTIONS and verdict["repaired"] is True
        assert [(seq, purpose, counted) for _, seq, purpose, _, counted in usage_of(planes, plan_id, key)] == [
            (1, "phase", True), (2, "verdict_repair", True)]  # the repair was paid for, once
        text = planes.text(plan_id, key) or ""
        assert "Verdict: {answer: maybe" in text and text.rstrip().splitlines()[-1].startswith('Verdict: {"answer"')
    for key in ("opening", "r1.summary", "final"):
        assert [purpose for _, _, purpose, _, _ in usage_of(planes, plan_id, key)] == ["phase"]
    assert state.by_key()["decision"].verdict == same(recomputed(planes, plan_id))
    assert state.by_key()["decision"].verdict["abstentions"] == 0
    assert view(planes, plan_id).usage.calls == 6 + 3  # a call per model phase, a repair per turn


def test_a_verdict_still_malformed_after_its_repair_is_an_abstention(testing_planes: Planes) -> None:
    planes = testing_planes
    plan_id = run(planes, board(models={"default": offline(malformed_verdict="always")}))

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED  # never a failed plan
    for key in ("r1.dana", "r1.ravi", "r1.sofia"):
        verdict = state.by_key()[key].verdict
        assert verdict is not None and state.by_key()[key].status == PhaseStatus.COMPLETED
        assert verdict["answer"] is None and verdict["abstained"] and verdict["repaired"] is True
        assert [purpose for _, _, purpose, _, _ in usage_of(planes, plan_id, key)] == ["phase", "verdict_repair"]
    decision = state.by_key()["decision"].verdict
    assert decision is not None and decision == same(recomputed(planes, plan_id))
    assert (decision["answer"], decision["abstentions"], decision["agreement"]) == (None, 3, 0.0)
    assert "no answer (every expert abstained)" in (planes.text(plan_id, "decision") or "")
    final = state.by_key()["final"].verdict
    assert final is not None and final["matches_decision"] is None  # nothing to match: no winner
    assert view(planes, plan_id).decision["chair"]["matches"] is None


def test_a_chair_that_contradicts_the_tally_is_flagged(testing_planes: Planes) -> None:
    planes = testing_planes
    plan_id = run(planes, board(models={"default": offline(contradict_decision=True)}))

    state = planes.state(plan_id)
    decision, final = state.by_key()["decision"].verdict, state.by_key()["final"].verdict
    assert state.plan.status == PlanStatus.COMPLETED and decision is not None and final is not None
    assert final["matches_decision"] is False and final["decision"] == decision["key"]
    assert final["answer"] != decision["answer"] and final["answer"] in OPTIONS
    chair = view(planes, plan_id).decision["chair"]
    assert chair == {"phase": "final", "answer": final["answer"], "matches": False, "failed": None}
    lines = [str(line) for line in decision_lines(view(planes, plan_id))]
    assert f"✗ the chair's synthesis states {final['answer']!r}, not the tally's answer: flagged" in lines


def test_a_verdict_that_cannot_be_read_in_any_way_is_an_abstention_not_a_crash(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board()).plan_id
    planes.dispatcher.take()
    by_key = planes.state(plan_id).by_key()
    assert planes.deliver(by_key["opening"].id, "opening") == Outcome.COMPLETED
    work = planes.runner.claim(by_key["r1.dana"].id, owner="unit:a")
    assert work is not None
    huge = 'Position: SUPPORT — yes.\nVerdict: {"answer": "A", "confidence": 1' + "0" * 5000 + "}"
    assert planes.runner.complete(work, Completion(text=huge, usage=Usage(1, 1, "estimated", "t"))) == "completed"
    stored = phase(planes, plan_id, "r1.dana").verdict
    assert stored is not None and stored["answer"] is None and "too long" in stored["abstained"]


# ---------------------------------------------------------------- early stopping


def test_a_panel_that_agrees_skips_the_remaining_rounds_and_says_what_that_saved(planes: Planes) -> None:
    stopping = board(rounds=3, stop_when={"agreement": 0.8}, models={"default": offline(stances=AGREE)})
    plan_id = planes.coordinator.submit(stopping).plan_id
    sub = planes.bus.subscribe(plan_id)
    planes.run_all()

    state = planes.state(plan_id)
    later = [p for p in state.phases if (p.round or 0) in (2, 3) and p.kind in ("turn", "round_summary")]
    assert state.plan.status == PlanStatus.COMPLETED and len(later) == 8
    for p in later:
        assert (p.status, p.error_code) == (PhaseStatus.SKIPPED, "plan.early_stop"), p.key
        assert "after round 1" in (p.error_message or "") and p.meta["tokens_saved"] > 0
        assert planes.text(plan_id, p.key) is None and usage_of(planes, plan_id, p.key) == []
    by_key = state.by_key()
    assert by_key["decision"].status == by_key["final"].status == PhaseStatus.COMPLETED  # both still run
    assert by_key["decision"].depends_on == ["r1.summary"]  # rewired past the skipped rounds
    [skipped] = [e for e in planes.events(plan_id) if e.type == "rounds_skipped"]
    assert skipped.data["phases"] == [p.key for p in later] and skipped.data["rounds"] == [2, 3]
    assert skipped.data["after_round"] == 1 and skipped.data["agreement"] == 1.0
    assert skipped.message() in published(sub)
    early = view(planes, plan_id).early_stop
    assert early is not None and early["tokens_saved"] == skipped.data["tokens_saved"] > 0
    assert early["rounds"] == [2, 3] and early["after_round"] == 1 and early["phases"] == skipped.data["phases"]
    # the line `conclave run` prints as it happens and `conclave status` prints after
    said = str(early_stop_line(view(planes, plan_id)))
    assert said == f"⏭ round(s) 2, 3 skipped: {early['reason']} (about {early['tokens_saved']:,} tokens saved)"
    decision = by_key["decision"].verdict
    assert decision == same(recomputed(planes, plan_id)) and decision is not None
    assert [v["phase"] for v in decision["votes"]] == ["r1.dana", "r1.ravi", "r1.sofia"]
    assert by_key["final"].verdict["matches_decision"] is True
    assert "Missing:" not in (planes.text(plan_id, "final") or "")  # nobody missed a round that was held
    assert planes.outcomes["r2.dana"] == [None]  # its message came, and did nothing

    full = run(planes, board(rounds=3, models={"default": offline(stances=AGREE)}))  # the same, every round
    assert view(planes, full).early_stop is None and early_stop_line(view(planes, full)) is None
    assert len(planes.usage(plan_id)) == 6 < len(planes.usage(full)) == 14
    assert view(planes, plan_id).usage.total_tokens < view(planes, full).usage.total_tokens


def test_a_panel_that_disagrees_holds_every_round(planes: Planes) -> None:
    plan_id = run(planes, board(rounds=3, stop_when={"agreement": 0.8}, models={"default": offline(stances=SPLIT)}))
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    assert all(p.status == PhaseStatus.COMPLETED for p in state.phases)
    assert not [e for e in planes.events(plan_id) if e.type == "rounds_skipped"]
    assert view(planes, plan_id).early_stop is None
    decision = state.by_key()["decision"].verdict
    assert decision is not None and decision["key"] == "Keep the flat plan" and decision["agreement"] == 2 / 3


def test_a_consensus_stops_the_rounds_once_reached(planes: Planes) -> None:
    plan_id = run(planes, board(rounds=2, decide="consensus", models={"default": offline(stances=AGREE)}))
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    assert {p.key for p in state.phases if p.error_code == "plan.early_stop"} == {
        "r2.dana", "r2.ravi", "r2.sofia", "r2.summary"}
    decision = state.by_key()["decision"].verdict
    assert decision is not None and decision == same(recomputed(planes, plan_id))
    assert decision["protocol"] == "consensus" and decision["consensus"] == {"threshold": 0.8, "reached": True}


def test_an_expert_missing_from_an_early_stopped_board_is_still_named(testing_planes: Planes) -> None:
    planes = testing_planes
    models = {"default": offline(stances=AGREE, fail=["Sofia"])}
    plan_id = run(planes, board(rounds=2, stop_when={"agreement": 0.6}, models=models))  # two of three agree
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED and state.by_key()["r1.sofia"].status == PhaseStatus.FAILED
    assert view(planes, plan_id).early_stop is not None
    missing = next(line for line in (planes.text(plan_id, "final") or "").splitlines() if line.startswith("Missing:"))
    assert "Sofia" in missing and "Dana" not in missing and "Ravi" not in missing
    decision = state.by_key()["decision"].verdict
    assert decision is not None and decision["abstentions"] == 1  # the silent expert counts against agreement


def test_a_resumed_plan_does_not_hold_the_rounds_its_panel_agreed_to_skip(testing_planes: Planes) -> None:
    planes = testing_planes
    models = {"default": offline(stances=AGREE, fail=["Sofia"])}
    plan_id = planes.coordinator.submit(board(rounds=2, stop_when={"agreement": 0.6}, models=models)).plan_id
    planes.dispatcher.take()
    by_key = planes.state(plan_id).by_key()
    for key in ("opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary"):
        planes.deliver(by_key[key].id, key)
    stopped = {p.key for p in planes.state(plan_id).phases if p.error_code == "plan.early_stop"}
    assert stopped == {"r2.dana", "r2.ravi", "r2.sofia", "r2.summary"}

    resumed = planes.coordinator.resume(plan_id, retry_failed=True)  # retry Sofia's failed turn
    assert resumed.retried == ["r1.sofia"]
    planes.run_all()

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    assert {p.key for p in state.phases if p.error_code == "plan.early_stop"} == stopped
    assert all(state.by_key()[k].status == PhaseStatus.SKIPPED for k in stopped)
    assert not any(usage_of(planes, plan_id, k) for k in stopped)
    assert view(planes, plan_id).early_stop is not None
    assert len(recorded(planes, plan_id)) == 1


# ---------------------------------------------------------------- fallback models and the chair


def test_an_expert_whose_model_fails_answers_on_its_fallback(testing_planes: Planes) -> None:
    planes = testing_planes
    doc = board(models={"default": offline(), "flaky": offline(fail=True)})
    doc["experts"][0] |= {"model": "flaky", "fallback_models": ["default"]}
    plan_id = run(planes, doc)

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    dana = state.by_key()["r1.dana"]
    assert dana.status == PhaseStatus.COMPLETED and dana.verdict is not None and dana.verdict["answer"] in OPTIONS
    assert usage_of(planes, plan_id, "r1.dana") == [(1, 1, "phase", "offline:flaky", True),
                                                    (1, 2, "phase", "offline:default", True)]
    assert [v["expert"] for v in state.by_key()["decision"].verdict["votes"]] == ["Dana", "Ravi", "Sofia"]


def test_an_expert_whose_model_hangs_answers_on_its_fallback(testing_planes: Planes) -> None:
    planes = testing_planes
    hung = {**offline(hang=["Dana"], hang_seconds=2.0), "first_chunk_timeout": 0.1, "deadline": 0.4}
    doc = board(models={"default": offline(), "hung": hung})
    doc["experts"][0] |= {"model": "hung", "fallback_models": ["default"]}
    plan_id = planes.coordinator.submit(doc).plan_id
    sub = planes.bus.subscribe(plan_id)
    planes.run_all()

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    dana = state.by_key()["r1.dana"]
    assert dana.status == PhaseStatus.COMPLETED and dana.verdict is not None and not dana.truncated
    # the hung call was given up at its deadline and reported nothing; the fallback's call is the cost
    assert usage_of(planes, plan_id, "r1.dana") == [(1, 1, "phase", "offline:default", True)]
    chunks = "".join(m["text"] for m in published(sub) if m["type"] == "chunk" and m["phase"] == "r1.dana")
    assert chunks == planes.text(plan_id, "r1.dana")  # streamed once, by the model that answered


def test_a_tallied_team_whose_chair_fails_on_every_model_completes_with_the_decision(
        testing_planes: Planes) -> None:
    planes = testing_planes
    models = {"default": offline(), "broken": offline(fail=True), "also_broken": offline(fail=["Lead"])}
    doc = team(lead_model="broken", models=models)
    doc["experts"][2]["fallback_models"] = ["also_broken"]
    plan_id = run(planes, doc)

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    synthesis = state.by_key()["synthesis"]
    decision = state.by_key()["decision"]
    assert synthesis.status == PhaseStatus.COMPLETED and synthesis.verdict is not None
    assert synthesis.verdict["chair_failed"]["code"] == "llm.unavailable"
    assert synthesis.verdict["answer"] == decision.verdict["answer"]
    assert synthesis.verdict["matches_decision"] is True
    result = planes.coordinator.reads.result_text(plan_id) or ""
    assert result.startswith(planes.text(plan_id, "decision") or "?")  # the decision, read aloud
    assert "could not write the synthesis: llm.unavailable" in result
    # every reader is told the chair failed, not that it agreed: the view, the CLI, the page
    seen = view(planes, plan_id)
    assert seen.decision["chair"]["failed"]["code"] == "llm.unavailable"
    lines = [str(line) for line in decision_lines(seen)]
    assert "⚠ the chair failed on every model (llm.unavailable): the decision record is the result" in lines
    assert not any("states the same answer" in line for line in lines)
    shown = str(decision_record(seen))
    assert "The chair failed on every model (<code>llm.unavailable</code>)" in shown and "same answer" not in shown
    # both models were tried, and what they cost is the phase's cost: the attempt completed it
    assert [(model, counted) for *_, model, counted in usage_of(planes, plan_id, "synthesis")] == [
        ("offline:broken", True), ("offline:also_broken", True)]
    assert len(recorded(planes, plan_id)) == 1


@pytest.mark.parametrize("deciding", [{"answer": None, "decide": "chair"}, {"decide": "chair"}],
                         ids=["no answer", "the chair decides"])
def test_an_untallied_plan_whose_chair_fails_completes_with_a_stand_in(testing_planes: Planes,
                                                                       deciding: dict[str, Any]) -> None:
    """No tally to stand on: code gathers the experts' words instead (orchestrator.plan.stand_in),
    flagged, and states no answer."""
    planes = testing_planes
    doc = {**team(lead_model="broken", models={"default": offline(), "broken": offline(fail=True)}), **deciding}
    if doc["answer"] is None:
        del doc["answer"]
    plan_id = run(planes, doc)
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED and state.plan.error_code is None
    synthesis = state.by_key()["synthesis"]
    assert synthesis.status == PhaseStatus.COMPLETED and synthesis.verdict is not None
    assert synthesis.verdict["stand_in"]["code"] == "llm.unavailable"
    assert synthesis.verdict.get("answer") is None and "decision" not in state.by_key()
    result = planes.coordinator.reads.result_text(plan_id) or ""
    assert result.startswith("> Written by Conclave's code, not by a model: the call for the synthesis failed")
    assert "[ada]" in result and "[bo]" in result


def test_a_cancel_while_the_chair_runs_ends_the_plan_cancelled_not_decided(testing_planes: Planes) -> None:
    planes = testing_planes
    plan_id = planes.coordinator.submit(team(lead_model="broken", models={
        "default": offline(), "broken": offline(fail=True)})).plan_id
    planes.dispatcher.take()
    by_key = planes.state(plan_id).by_key()
    for key in ("ada", "bo", "decision"):
        assert planes.deliver(by_key[key].id, key) == Outcome.COMPLETED
    work = planes.runner.claim(by_key["synthesis"].id, owner="unit:chair")
    assert work is not None
    planes.coordinator.cancel(plan_id)
    lease = Lease(work.phase.id, work.attempt)
    lease.stop()  # the heartbeat learns of the cancel
    assert planes.runner.execute(work, lease) == Outcome.CANCELLED
    planes.coordinator.advance(plan_id)
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.CANCELLED and state.by_key()["synthesis"].status == PhaseStatus.CANCELLED
    assert planes.coordinator.reads.result_text(plan_id) is None


def test_a_team_without_a_synthesis_ends_on_its_decision(planes: Planes) -> None:
    plan_id = run(planes, team(synthesis=False))
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    assert [p.key for p in state.phases] == ["ada", "bo", "decision"]
    decision = state.by_key()["decision"]
    assert decision.meta.get("terminal") is True and decision.verdict == same(recomputed(planes, plan_id))
    assert [v["expert"] for v in decision.verdict["votes"]] == ["Ada", "Bo"]  # Lead owns no phase: no ballot
    read_aloud = tally.decision_text(tally.decide(parse_plan(state.plan.spec), plan_id,
                                                  [p for p in state.phases if p.key in decision.inputs]))
    assert planes.coordinator.reads.result_text(plan_id) == read_aloud == planes.text(plan_id, "decision")
    assert len(planes.usage(plan_id)) == 2  # one call per expert, none for the decision
    assert view(planes, plan_id).decision["chair"] is None


# ---------------------------------------------------------------- redelivery, resume, takeover


def test_a_decision_delivered_twice_and_resumed_is_recorded_once(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board()).plan_id
    planes.dispatcher.take()
    by_key = planes.state(plan_id).by_key()
    for key in ("opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary", "decision"):
        assert planes.deliver(by_key[key].id, key) == Outcome.COMPLETED
    first = phase(planes, plan_id, "decision").verdict

    assert planes.deliver(by_key["decision"].id, "decision") is None  # the duplicate message does nothing
    resumed = planes.coordinator.resume(plan_id, retry_failed=True)
    assert resumed.retried == [] and resumed.enqueued == ["final"]  # the decision stands
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    assert planes.deliver(by_key["decision"].id, "decision") is None  # nor does a late one

    decision = phase(planes, plan_id, "decision")
    assert decision.verdict == first and decision.attempt == 1
    assert [e.data for e in recorded(planes, plan_id)] == [first]
    assert phase(planes, plan_id, "final").verdict["decision"] == first["key"]


def test_a_decision_taken_over_after_its_lease_expired_is_recorded_by_the_winner_only(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(board()).plan_id
    planes.dispatcher.take()
    by_key = planes.state(plan_id).by_key()
    for key in ("opening", "r1.dana", "r1.ravi", "r1.sofia", "r1.summary"):
        planes.deliver(by_key[key].id, key)
    stale = planes.runner.claim(by_key["decision"].id, owner="unit:a")
    assert stale is not None
    planes.expire_lease(by_key["decision"].id)
    fresh = planes.runner.claim(by_key["decision"].id, owner="unit:b")
    assert fresh is not None and fresh.attempt == 2

    assert planes.runner.execute(fresh, Lease(fresh.phase.id, fresh.attempt)) == Outcome.COMPLETED
    assert planes.runner.execute(stale, Lease(stale.phase.id, stale.attempt)) == Outcome.FENCED
    [event] = recorded(planes, plan_id)
    assert event.data == phase(planes, plan_id, "decision").verdict == same(recomputed(planes, plan_id))


@pytest.mark.parametrize("stale_first", [False, True], ids=["after the new attempt", "while it runs"])
def test_a_turn_run_again_after_its_lease_expired_keeps_the_fence_winners_verdict(
        planes: Planes, stale_first: bool) -> None:
    plan_id = planes.coordinator.submit(board(models={"default": offline(stances=AGREE)})).plan_id
    planes.dispatcher.take()
    by_key = planes.state(plan_id).by_key()
    planes.deliver(by_key["opening"].id, "opening")
    dana = by_key["r1.dana"].id
    stale = planes.runner.claim(dana, owner="unit:a")
    assert stale is not None
    planes.expire_lease(dana)  # a went silent; b takes the turn over
    fresh = planes.runner.claim(dana, owner="unit:b")
    assert fresh is not None and fresh.attempt == 2
    # a's model had answered the other way: its result must never be the stored one
    said = ('Position: OPPOSE — too risky.\nVerdict: {"answer": "Keep the flat plan", "confidence": 0.99, '
            '"reason": "stale"}')
    late = Completion(text=said, usage=Usage(10, 10, "estimated", "test"))
    if stale_first:
        assert planes.runner.complete(stale, late) == Outcome.FENCED
    assert planes.runner.execute(fresh, Lease(dana, fresh.attempt)) == Outcome.COMPLETED
    if not stale_first:
        assert planes.runner.complete(stale, late) == Outcome.FENCED
    planes.coordinator.resume(plan_id)
    planes.run_all()

    stored = phase(planes, plan_id, "r1.dana")
    assert stored.attempt == 2 and stored.verdict is not None
    assert stored.verdict["answer"] == "Adopt usage pricing" and stored.verdict["reason"] != "stale"
    assert "too risky" not in (planes.text(plan_id, "r1.dana") or "")
    decision = phase(planes, plan_id, "decision").verdict
    assert decision is not None and decision == same(recomputed(planes, plan_id))
    assert decision["votes"][0]["answer"] == "Adopt usage pricing" and decision["agreement"] == 1.0
    assert [(a, counted) for a, _, _, _, counted in usage_of(planes, plan_id, "r1.dana")] == [(2, True)]


# ---------------------------------------------------------------- fault switches fail closed


@pytest.mark.parametrize("switch", [{"malformed_verdict": "once"}, {"contradict_decision": True}])
def test_the_verdict_fault_switches_are_refused_outside_testing_mode(planes: Planes, switch: dict[str, Any]) -> None:
    [name] = switch
    with pytest.raises(InvalidPlan) as info:
        planes.coordinator.submit(board(models={"default": offline(**switch)}))
    assert f"models.default.options.{name}" in [d["field"] for d in info.value.details]


# ---------------------------------------------------------------- a repair that cannot be made


class RepairsFail:
    """The offline model, except that every verdict repair request fails upstream."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def _check(self, request: Any) -> None:
        if request.purpose == "verdict_repair":
            raise ProviderUnavailable("upstream unavailable for the repair", usage=Usage(40, 0, "estimated", "t"))

    def stream(self, spec: Any, request: Any) -> Any:
        self._check(request)
        return self.model.stream(spec, request)

    def complete(self, spec: Any, request: Any) -> Completion:
        self._check(request)
        return self.model.complete(spec, request)


def test_a_turn_whose_repair_request_fails_keeps_its_words_and_abstains(testing_planes: Planes) -> None:
    planes = testing_planes
    planes.runner.providers["offline"] = RepairsFail(planes.runner.providers["offline"])
    plan_id = run(planes, team(synthesis=False, models={"default": offline(malformed_verdict="once")}))

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED  # a turn's verdict never fails the plan
    for key in ("ada", "bo"):
        p = state.by_key()[key]
        assert p.status == PhaseStatus.COMPLETED and p.verdict is not None
        assert p.verdict["answer"] is None and p.verdict["abstained"].startswith("no line beginning 'Verdict:'")
        assert p.verdict["repaired"] is True  # asked for, once
        assert "Position:" in (planes.text(plan_id, key) or "")  # the paid-for turn is kept
        assert [(purpose, counted) for _, _, purpose, _, counted in usage_of(planes, plan_id, key)] == [
            ("phase", True), ("verdict_repair", True)]
    decision = state.by_key()["decision"].verdict
    assert decision is not None and decision["answer"] is None and decision["abstentions"] == 2


def test_a_worker_outside_testing_mode_refuses_a_stored_plans_verdict_fault_switch(testing_planes: Planes) -> None:
    planes = testing_planes  # a testing API stored the plan; production workers run it
    plan_id = planes.coordinator.submit(board(models={"default": offline(malformed_verdict="always")})).plan_id
    production = planes.settings.model_copy(update={"testing": False})
    planes.runner = PhaseRunner(planes.db, production, planes.bus, {"offline": OfflineProvider(testing=False)})
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.FAILED
    assert state.by_key()["opening"].error_code == "llm.fault_not_allowed"
    assert not any(p.verdict for p in state.phases) and not recorded(planes, plan_id)
