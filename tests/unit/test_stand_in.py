"""A moderator that fails on every model does not lose the meeting (issue 19's llm-council
failure): a round summary, a final summary or a synthesis completes with a summary written by
code from the experts' stored words, flagged as such in what is stored and in what every reader
sees; a tallied plan's record stands, with the chair's answer stated by the tally."""

from __future__ import annotations

from typing import Any

from orchestrator.api.ui.answer import decision_record
from orchestrator.api.ui.plan_page import verdict_line
from orchestrator.plan.schema import dump_plan
from storage.status import PhaseStatus, PlanStatus
from tests.unit.planes import Planes
from tests.unit.stored import example
from tests.unit.test_deliberation_flow import board, offline

TWO = [{"name": "Dana", "role": "Chief Financial Officer"}, {"name": "Ravi", "role": "Chief Technology Officer"}]
FLAG = "> Written by Conclave's code, not by a model"


def failing(*kinds: str) -> dict[str, Any]:
    return {"default": offline(fail_kinds=list(kinds))}


def test_a_failed_round_summary_is_written_by_code_and_the_meeting_goes_on(testing_planes: Planes) -> None:
    planes = testing_planes
    doc = dump_plan(example("board", rounds=2, experts=TWO, models=failing("round_summary")))
    plan_id = planes.coordinator.submit(doc).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    assert (state.plan.status, state.plan.error_code) == (PlanStatus.COMPLETED, None)
    statuses = planes.statuses(plan_id)
    assert {statuses[k] for k in ("r1.summary", "r2.dana", "r2.ravi", "r2.summary", "final")} == {
        PhaseStatus.COMPLETED}
    summary = state.by_key()["r1.summary"]
    assert summary.verdict is not None and summary.verdict["stand_in"]["code"] == "llm.unavailable"
    assert set(summary.verdict) == {"stand_in"}  # a flag, not a verdict: a summary states no answer
    text = planes.text(plan_id, "r1.summary") or ""
    assert text.startswith(f"{FLAG}: the call for round 1's summary failed on every model (llm.unavailable).")
    assert "- Dana (Chief Financial Officer): " in text and "[r1.dana]" in text and "[r1.ravi]" in text
    assert "[opening]" not in text  # the experts' words only
    # what a reader sees: the view and the page's card say code wrote it
    seen = planes.coordinator.reads.view(plan_id)
    card = next(p for p in seen.phases if p.key == "r1.summary")
    assert card.stand_in is not None and card.stand_in["code"] == "llm.unavailable"
    assert "Written by code, not by a model" in str(verdict_line(card))
    assert seen.decision is None  # a plan that declares no answer has no decision, stand-in or not
    from click.testing import CliRunner

    from orchestrator.cli import cli

    shown = CliRunner(env={"CONCLAVE_DATABASE_URL": planes.settings.database_url, "COLUMNS": "200"}).invoke(
        cli, ["status", plan_id])
    [line] = [ln for ln in shown.output.splitlines() if " r1.summary " in ln]
    assert line.endswith("written by code: offline:default failed (llm.unavailable)") and "verdict" not in line


def test_a_failed_last_word_without_a_tally_completes_with_the_experts_words(testing_planes: Planes) -> None:
    planes = testing_planes
    doc = dump_plan(example("board", rounds=1, experts=TWO, models=failing("final_summary")))
    plan_id = planes.coordinator.submit(doc).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    final = state.by_key()["final"]
    assert final.verdict is not None and final.verdict["chair_failed"]["code"] == "llm.unavailable"
    assert final.verdict["stand_in"] == final.verdict["chair_failed"]
    result = planes.coordinator.reads.result_text(plan_id) or ""
    assert result.startswith(f"{FLAG}: the call for the final summary failed on every model (llm.unavailable).")
    assert "The experts' last words:" in result and "[r1.dana]" in result and "[r1.ravi]" in result


def test_a_tallied_board_whose_chair_fails_keeps_its_decision_and_the_experts_words(testing_planes: Planes) -> None:
    planes = testing_planes
    plan_id = planes.coordinator.submit(board(rounds=2, models=failing("round_summary", "final_summary"))).plan_id
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    decision, final = state.by_key()["decision"], state.by_key()["final"]
    assert decision.verdict is not None and final.verdict is not None
    assert final.verdict["answer"] == decision.verdict["answer"] and final.verdict["matches_decision"] is True
    assert final.verdict["chair_failed"]["code"] == "llm.unavailable"
    result = planes.coordinator.reads.result_text(plan_id) or ""
    assert result.startswith(planes.text(plan_id, "decision") or "?")  # the record, read aloud, first
    assert "could not write the synthesis: llm.unavailable" in result and FLAG in result
    assert state.by_key()["r2.summary"].verdict == {"stand_in": {"code": "llm.unavailable",
                                                                 "message": final.verdict["chair_failed"]["message"]}}
    seen = planes.coordinator.reads.view(plan_id)
    assert seen.decision is not None and seen.decision["chair"]["failed"]["code"] == "llm.unavailable"
    assert "The chair failed on every model" in str(decision_record(seen))


def test_nothing_is_stood_in_for_a_refusal_or_when_nobody_spoke() -> None:
    from orchestrator.plan import stand_in
    from tests.unit.stored import stored

    phases = stored(example("board", rounds=1))
    summary = next(p for p in phases if p.kind == "round_summary")
    assert stand_in.applies(summary, "llm.unavailable", phases)
    for refused in ("llm.budget_exhausted", "llm.fault_not_allowed", "llm.model_not_allowed"):
        assert not stand_in.applies(summary, refused, phases)  # the plan ends as such: nothing to gather over
    silent = stored(example("board", rounds=1), failed=[p.key for p in phases if p.kind == "turn"])
    assert not stand_in.applies(summary, "llm.unavailable", silent)  # no expert's words to gather
