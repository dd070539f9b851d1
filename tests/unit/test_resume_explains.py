"""A resume that sends nothing says why, from stored status — a live lease and until when,
a finished or cancelled plan, a failure only ``retry_failed`` reruns — and gives its guard
back at once, so the next resume is never told that one is "already in progress"."""

from __future__ import annotations

from orchestrator.core.errors import ResumeInProgress
from storage import plans
from storage.status import PlanStatus
from tests.unit.planes import Planes
from tests.unit.stored import example

SMALL_BOARD = example("board", rounds=1, experts=[{"name": "Dana", "role": "Chief Financial Officer"},
                                                  {"name": "Ravi", "role": "Chief Technology Officer"}])


def test_a_phase_under_a_live_lease_is_named_with_the_lease_s_end(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    [opening] = planes.dispatcher.take()
    claimed = planes.runner.claim(opening.runs[0].phase_id, owner="unit:busy:worker")
    assert claimed is not None
    until = planes.state(plan_id).by_key()["opening"].lease_expires_at
    assert until is not None

    res = planes.coordinator.resume(plan_id)

    assert res.enqueued == [] and res.status == PlanStatus.RUNNING
    assert res.reason is not None and res.reason.startswith("running: opening held by a worker")
    assert f"{until:%Y-%m-%d %H:%M:%S} UTC" in res.reason
    again = planes.coordinator.resume(plan_id)  # at once: the first gave its guard back
    assert again.reason is not None and again.reason.startswith("running: opening held by a worker")


def test_a_cancelled_plan_says_so_every_time(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    planes.coordinator.cancel(plan_id)
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.CANCELLED

    first = planes.coordinator.resume(plan_id)
    second = planes.coordinator.resume(plan_id)  # at once: not "resume already in progress"

    for res in (first, second):
        assert res.enqueued == [] and res.status == PlanStatus.CANCELLED
        assert res.reason == "the plan was cancelled: a cancelled plan stays final (submit it again to rerun it)"


def test_a_completed_plan_says_so_even_while_a_resume_that_sent_something_holds_the_guard(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    planes.dispatcher.take()  # its messages were lost
    assert planes.coordinator.resume(plan_id).enqueued  # holds the guard for resume_guard_seconds
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED

    res = planes.coordinator.resume(plan_id)

    assert res.enqueued == [] and res.reason == "the plan completed: nothing is left to run"


def test_a_running_plan_whose_resume_sent_something_still_holds_the_guard(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    planes.dispatcher.take()
    assert planes.coordinator.resume(plan_id).enqueued
    try:
        planes.coordinator.resume(plan_id)
    except ResumeInProgress as exc:
        assert "resume already in progress" in exc.message
    else:
        raise AssertionError("a second resume while the first one's canvas is in flight went ahead")


def test_a_failed_plan_points_at_retry_failed(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    planes.dispatcher.take()
    plans.finish_plan(planes.db, plan_id, PlanStatus.FAILED, error_code="llm.failed", error_message="boom")

    res = planes.coordinator.resume(plan_id)

    assert res.enqueued == [] and res.status == PlanStatus.FAILED
    assert res.reason == ("the plan ended failed (llm.failed): resume with --retry-failed (retry_failed) to run "
                          "its failed phases again")
