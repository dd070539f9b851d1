"""The phase runner, driven by hand against SQLite: claims hand out one attempt at a
time, a stale attempt's result is fenced out, a model failure fails the phase with its
usage on record, and what the runner publishes is exactly what it stored."""

from __future__ import annotations

from storage import phases
from storage.sqlcount import StatementCounter
from storage.status import Outcome, PhaseStatus, PlanStatus
from tasks.lease import Lease
from tasks.llm.types import Completion, ModelSpec, Usage
from tests.unit.planes import Planes, published
from tests.unit.stored import example

PANEL = [{"name": "Dana", "role": "Chief Financial Officer"}, {"name": "Ravi", "role": "Chief Technology Officer"}]


def small_board(**options: object) -> object:
    """opening → r1.dana, r1.ravi → r1.summary → final, on the offline model with ``options``."""
    return example("board", rounds=1, experts=PANEL,
                   models={"default": {"provider": "offline", "max_retries": 0, "options": options}})


def test_a_result_from_an_attempt_that_lost_its_lease_is_fenced_out(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(small_board()).plan_id
    [canvas] = planes.dispatcher.take()
    phase_id = canvas.runs[0].phase_id
    sub = planes.bus.subscribe(plan_id)
    stale = planes.runner.claim(phase_id, owner="unit:a")
    assert stale is not None and stale.attempt == 1
    assert planes.runner.claim(phase_id, owner="unit:b") is None  # leased by someone alive
    spec = ModelSpec(name="default", provider="offline")
    used = Usage(input_tokens=30, output_tokens=7, source="estimated", method="test")
    planes.runner.record_usage(stale, seq=1, purpose="chat", spec=spec, used=used)

    planes.expire_lease(phase_id)  # a takes too long: its lease runs out and b takes over
    fresh = planes.runner.claim(phase_id, owner="unit:b")
    assert fresh is not None and fresh.attempt == 2

    assert planes.runner.complete(stale, Completion(text="stale words", usage=used)) == Outcome.FENCED
    assert planes.runner.fail(stale, "llm.unavailable", "too late") == Outcome.FENCED
    assert planes.contents(plan_id) == {} and planes.statuses(plan_id)["opening"] == PhaseStatus.RUNNING
    assert planes.runner.execute(fresh, Lease(phase_id, fresh.attempt)) == Outcome.COMPLETED

    assert planes.contents(plan_id) == {phase_id: 1}
    assert "stale words" not in (planes.text(plan_id, "opening") or "stale words")
    rows = [(r.attempt, r.seq, r.counted) for r in planes.usage(plan_id) if r.phase_id == phase_id]
    assert rows == [(1, 1, False), (2, 1, True)]  # the stale call is on record as waste, not cost
    stored = [e for e in planes.events(plan_id) if e.phase_key == "opening"]
    assert [(e.type, e.data["attempt"], e.data.get("worker")) for e in stored] == [
        ("phase_started", 1, "unit:a"), ("phase_started", 2, "unit:b"), ("phase_completed", 2, None)]
    assert [m for m in published(sub) if m["type"] != "chunk"] == [e.message() for e in stored]


def test_a_failed_model_call_fails_the_phase_and_the_meeting_goes_on_without_it(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(small_board(fail=["Ravi"])).plan_id
    sub = planes.bus.subscribe(plan_id)
    planes.run_all()

    statuses = planes.statuses(plan_id)
    assert statuses["r1.ravi"] == PhaseStatus.FAILED and planes.outcomes["r1.ravi"] == [Outcome.FAILED]
    assert all(s == PhaseStatus.COMPLETED for k, s in statuses.items() if k != "r1.ravi")
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED  # a board tolerates a missing expert
    assert "Ravi" in (planes.text(plan_id, "r1.summary") or "")
    ravi = planes.state(plan_id).by_key()["r1.ravi"]
    assert ravi.error_code == "llm.unavailable" and planes.text(plan_id, "r1.ravi") is None
    [failed] = [e for e in planes.events(plan_id) if e.type == "phase_failed"]
    assert failed.phase_key == "r1.ravi" and failed.data["error_code"] == "llm.unavailable"
    assert set(failed.data) == {"attempt", "expert", "kind", "round", "error_code", "error", "k", "n"}
    [usage] = [r for r in planes.usage(plan_id) if r.phase_id == ravi.id]
    assert (usage.output_tokens, usage.counted) == (0, False)  # the prompt was paid for, nothing came back
    assert failed.message() in published(sub)


def test_a_phase_delivered_before_its_inputs_are_done_waits_for_the_next_advance(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(small_board()).plan_id
    summary = planes.state(plan_id).by_key()["r1.summary"]
    assert phases.mark_enqueued(planes.db, [summary.id], stale_before=None) == [summary.id]  # sent early
    assert planes.runner.claim(summary.id, owner="unit:early") is None
    after = planes.state(plan_id).by_key()["r1.summary"]
    assert after.status == PhaseStatus.PENDING and after.attempt == 0 and after.enqueued_at is None
    assert [e.type for e in planes.events(plan_id)] == ["plan_submitted"]  # nothing was claimed


def test_a_failed_phases_successors_in_the_canvas_do_nothing_and_the_plan_fails(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example(
        "board", rounds=1, experts=PANEL, missing_expert="fatal",
        models={"default": {"provider": "offline", "max_retries": 0, "options": {"fail": ["Ravi"]}}})).plan_id
    [canvas] = planes.dispatcher.take()
    assert canvas.shape() == ["opening", ("r1.dana", "r1.ravi"), "r1.summary", "final", "advance"]
    counter = StatementCounter().attach(planes.db.engine)
    try:
        planes.run_canvas(canvas)
        refused = counter.snapshot()["statements"]
    finally:
        counter.detach()

    assert planes.outcomes["r1.ravi"] == [Outcome.FAILED]
    assert planes.outcomes["r1.summary"] == [None] and planes.outcomes["final"] == [None]  # not ready: no-ops
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.FAILED and state.plan.error_code == "llm.unavailable"
    assert {k: s for k, s in planes.statuses(plan_id).items() if k in ("r1.summary", "final")} == {
        "r1.summary": PhaseStatus.SKIPPED, "final": PhaseStatus.SKIPPED}  # by the advance at the canvas's end
    assert planes.dispatcher.take() == []  # nothing to send again
    # each no-op cost a refused claim and the release of its enqueue mark: a transaction each
    assert refused["storage.phases.release_waiting"] == 2 * 3  # BEGIN IMMEDIATE, UPDATE, COMMIT (SQLite)
    assert [e.type for e in planes.events(plan_id)].count("phase_started") == 3
