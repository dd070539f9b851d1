"""The phase runner, driven by hand against SQLite: claims hand out one attempt at a
time, a stale attempt's result is fenced out, a model failure fails the phase with its
usage on record, and what the runner publishes is exactly what it stored."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from orchestrator.core.errors import InvalidPlan
from orchestrator.gateway.providers.offline.options import MAX_LATENCY, MAX_WORDS
from orchestrator.gateway.types import Completion, ModelSpec, Usage
from orchestrator.plan.views import plan_view
from storage import phases
from storage.models import Plan, utcnow
from storage.status import Outcome, PhaseStatus, PlanStatus
from tasks.lease import SHUTDOWN, Lease
from tests.sqlcount import StatementCounter
from tests.unit.planes import Planes, published
from tests.unit.shapes import shape
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


def test_a_failed_model_call_fails_the_phase_and_the_meeting_goes_on_without_it(testing_planes: Planes) -> None:
    planes = testing_planes  # the offline model's `fail` switch
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


def test_a_failed_phases_successors_in_the_canvas_do_nothing_and_the_plan_fails(testing_planes: Planes) -> None:
    planes = testing_planes  # the offline model's `fail` switch
    plan_id = planes.coordinator.submit(example(
        "board", rounds=1, experts=PANEL, missing_expert="fatal",
        models={"default": {"provider": "offline", "max_retries": 0, "options": {"fail": ["Ravi"]}}})).plan_id
    [canvas] = planes.dispatcher.take()
    assert shape(canvas) == ["opening", ("r1.dana", "r1.ravi"), "r1.summary", "final", "advance"]
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


def test_submit_refuses_fault_switches_and_options_out_of_bounds_naming_the_option(planes: Planes) -> None:
    with pytest.raises(InvalidPlan) as info:
        planes.coordinator.submit(small_board(fail=["Ravi"], words=3_000_000, latency=1e300))
    fields = {d["field"]: d["message"] for d in info.value.details}
    assert set(fields) == {"models.default.options.fail", "models.default.options.words",
                           "models.default.options.latency"}
    assert "CONCLAVE_TESTING" in fields["models.default.options.fail"]
    assert "50000" in fields["models.default.options.words"] and "2" in fields["models.default.options.latency"]
    assert planes.dispatcher.take() == []  # nothing stored, nothing sent
    with planes.db.transaction() as s:
        assert s.scalar(select(func.count()).select_from(Plan)) == 0


def test_a_fault_switch_that_reached_the_database_is_refused_when_the_phase_runs(planes: Planes,
                                                                                 monkeypatch: Any) -> None:
    """A plan stored past submit's checks (by an API in testing mode, or written into the
    database): this runner is not in testing mode, so the switch never runs."""
    monkeypatch.setattr(planes.coordinator.models, "check_plan", lambda plan: None)
    plan_id = planes.coordinator.submit(small_board(hang=True)).plan_id  # would hang for an hour
    planes.run_all()
    opening = planes.state(plan_id).by_key()["opening"]
    assert (opening.status, opening.error_code) == (PhaseStatus.FAILED, "llm.fault_not_allowed")
    assert "options.hang" in (opening.error_message or "") and "CONCLAVE_TESTING" in (opening.error_message or "")
    assert planes.state(plan_id).plan.status == PlanStatus.FAILED


def test_a_bug_in_a_phase_stores_a_generic_message_and_logs_the_details(planes: Planes, monkeypatch: Any,
                                                                        caplog: Any) -> None:
    secret = "the prompt quoted card 4111-1111-1111-1111"

    def broken(*_: Any) -> Any:  # prepare(work, model)
        raise RuntimeError(secret)

    monkeypatch.setattr(planes.runner, "prepare", broken)
    plan_id = planes.coordinator.submit(small_board()).plan_id
    sub = planes.bus.subscribe(plan_id)
    planes.run_all()
    opening = planes.state(plan_id).by_key()["opening"]
    assert (opening.status, opening.error_code) == (PhaseStatus.FAILED, "conclave.internal")
    assert opening.error_message == "internal error (RuntimeError); the worker's log has the details"
    seen = [repr(planes.state(plan_id)), repr(planes.events(plan_id)), repr(published(sub)),
            repr(plan_view(planes.state(plan_id), planes.usage(plan_id)).to_dict())]
    assert not any(secret in text for text in seen)
    assert secret in caplog.text  # with its traceback, for whoever runs the worker


def test_a_worker_shutting_down_gives_its_phase_back(planes: Planes) -> None:
    # the first chunk at once (where the stop comes), then MAX_LATENCY before each of hours' worth more
    plan_id = planes.coordinator.submit(small_board(latency=MAX_LATENCY, first_chunk_delay=0.0,
                                                    words=MAX_WORDS)).plan_id
    [canvas] = planes.dispatcher.take()
    phase_id = canvas.runs[0].phase_id
    work = planes.runner.claim(phase_id, owner="unit:leaving")
    assert work is not None
    lease = Lease(phase_id, work.attempt)
    planes.runner.publish_text = lambda *_: lease.stop(SHUTDOWN)  # type: ignore[method-assign]  # SIGTERM mid-call
    assert planes.runner.execute(work, lease) == Outcome.RELEASED  # at its next chunk, not hours later

    opening = planes.state(plan_id).by_key()["opening"]
    assert opening.status == PhaseStatus.RUNNING and opening.error_code is None  # not failed: unfinished
    assert opening.enqueued_at is None and opening.lease_expires_at is not None
    assert opening.lease_expires_at <= utcnow()  # free for the reconciler to send at once
    assert [(r.attempt, r.counted) for r in planes.usage(plan_id) if r.phase_id == phase_id] == [(1, False)]
    assert planes.coordinator.reconcile() == [plan_id]  # resent, and another worker finishes it
    planes.runner.publish_text = lambda *_: None  # type: ignore[method-assign]
    [resent] = planes.dispatcher.take()
    assert resent.runs[0].key == "opening"


def test_a_shutdown_does_not_give_back_a_phase_of_a_cancelled_plan(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(small_board()).plan_id
    [canvas] = planes.dispatcher.take()
    phase_id = canvas.runs[0].phase_id
    work = planes.runner.claim(phase_id, owner="unit:leaving")
    assert work is not None
    planes.coordinator.cancel(plan_id)
    lease = Lease(phase_id, work.attempt)
    lease.stop(SHUTDOWN)
    assert planes.runner.execute(work, lease) == Outcome.CANCELLED
    assert planes.statuses(plan_id)["opening"] == PhaseStatus.CANCELLED
