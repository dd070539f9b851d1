"""The plan aggregate at the storage boundary, on Postgres and SQLite: idempotent
submission, the active-plan cap (also under racing submissions), the resume guard,
what a resume may reopen, which plans the reconciler sees as stalled, finishing once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from storage import Conflict, Database, phases, plans
from storage.errors import Busy, CapacityExceeded
from storage.records import NewPhase
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, complete, event_types, new_plan, phase

SPEC = {"title": "same"}


def _submit(db: Database, task_id: str | None, spec: dict[str, str] = SPEC, *, max_active: int = 100) -> tuple[
        str, bool]:
    return plans.create_plan(db, title="t", kind="board", spec=spec, task_id=task_id, max_active=max_active,
                             phases=[NewPhase("opening", "opening", 0, [])])


def test_resubmitting_a_task_id_returns_the_plan_and_a_different_plan_conflicts(db: Database) -> None:
    plan_id, created = _submit(db, "crm-1")
    assert created
    assert _submit(db, "crm-1") == (plan_id, False)
    with pytest.raises(Conflict, match="crm-1"):
        _submit(db, "crm-1", {"title": "another plan"})
    assert [p.key for p in plans.load_state(db, plan_id).phases] == ["opening"]
    assert event_types(db, plan_id).count("plan_submitted") == 1


def test_the_active_plan_cap_refuses_the_plan_past_it(db: Database) -> None:
    for i in range(2):
        _submit(db, f"cap-{i}", max_active=2)
    with pytest.raises(CapacityExceeded, match="2 plans are active, the limit is 2"):
        _submit(db, "cap-2", max_active=2)
    plans.finish_plan(db, plans.resolve(db, "cap-0"), "completed")  # a finished plan frees its slot
    assert _submit(db, "cap-2", max_active=2)[1]


def test_the_cap_holds_when_submissions_race(pg: Database) -> None:
    """Deterministic race: the test blocks every INSERT into plans (a SHARE table lock,
    which reads pass) until all racers are waiting, so a racer that counted before
    taking the capacity lock would count too few and get in."""
    db = pg  # SQLite serialises writers at BEGIN IMMEDIATE; the advisory lock is Postgres's
    for i in range(2):
        _submit(db, f"held-{i}", max_active=3)
    racers = 4
    outcomes: list[str] = []
    with db.engine.connect() as blocker:
        tx = blocker.begin()
        blocker.execute(text("LOCK TABLE plans IN SHARE MODE"))

        def submit(i: int) -> None:
            try:
                _submit(db, f"race-{i}", max_active=3)
                outcomes.append("created")
            except CapacityExceeded:
                outcomes.append("refused")

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(racers)]
        for t in threads:
            t.start()

        def waiting() -> bool:
            with db.engine.connect() as c:
                n = c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND wait_event_type = 'Lock'")).scalar()
            return n == racers

        try:
            wait_for(waiting, 30, interval=0.02, what="every racer waiting")
        finally:
            tx.rollback()
        for t in threads:
            t.join(30)
    assert sorted(outcomes) == ["created"] + ["refused"] * (racers - 1)
    assert len(plans.running_plan_ids(db)) == 3


def test_one_resume_guard_at_a_time_until_it_lapses(db: Database) -> None:
    plan_id = new_plan(db)
    hold = timedelta(seconds=0.3)
    plans.acquire_resume_guard(db, plan_id, "first", hold)
    taken_at = datetime.now(UTC)
    with pytest.raises(Busy, match="resume already in progress"):
        plans.acquire_resume_guard(db, plan_id, "second", hold)
    wait_for(lambda: datetime.now(UTC) > taken_at + hold, 10, interval=0.02, what="the guard to lapse")
    plans.acquire_resume_guard(db, plan_id, "third", hold)  # a later resume gets it


def _failed_opening(db: Database) -> str:
    """``opening`` failed, ``final`` skipped because of it, the plan failed."""
    plan_id = new_plan(db)
    first = claim(db, plan_id, "opening", "w1")
    assert first is not None
    phases.fail_phase(db, phase_id=first.phase.id, attempt=1, code="llm.fatal", message="refused")
    phases.skip_phases(db, plan_id, ["final"], "a phase it depends on did not complete")
    assert plans.finish_plan(db, plan_id, "failed", error_code="llm.fatal", error_message="refused")
    return plan_id


def test_resume_without_retry_failed_leaves_failed_phases_failed(db: Database) -> None:
    plan_id = _failed_opening(db)
    assert plans.reopen(db, plan_id, retry_failed=False) == []
    state = plans.load_state(db, plan_id)
    assert state.plan.status == "failed"
    assert {p.key: p.status for p in state.phases} == {"opening": "failed", "final": "skipped"}


def test_retry_failed_reopens_failed_and_skipped_phases_and_records_it(db: Database) -> None:
    plan_id = _failed_opening(db)
    assert sorted(plans.reopen(db, plan_id, retry_failed=True)) == ["final", "opening"]
    state = plans.load_state(db, plan_id)
    assert state.plan.status == "running" and state.plan.error_code is None
    by_key = state.by_key()
    assert {k: p.status for k, p in by_key.items()} == {"opening": "pending", "final": "pending"}
    assert by_key["opening"].retries_requested == 1 and by_key["final"].retries_requested == 0
    assert event_types(db, plan_id).count("retry_requested") == 1


def test_retry_failed_never_reopens_a_completed_phase_or_a_completed_plan(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    assert complete(db, plan_id, "opening", 1, "done").status == "completed"
    second = claim(db, plan_id, "final", "w1")
    assert second is not None
    phases.fail_phase(db, phase_id=second.phase.id, attempt=1, code="llm.fatal", message="refused")

    assert plans.reopen(db, plan_id, retry_failed=True) == ["final"]  # a running plan: only the failed one
    assert phase(db, plan_id, "opening").status == "completed"

    done = new_plan(db, "completed plan")
    assert claim(db, done, "opening", "w1") is not None
    assert complete(db, done, "opening", 1, "done").status == "completed"
    last = claim(db, done, "final", "w1")
    assert last is not None
    phases.fail_phase(db, phase_id=last.phase.id, attempt=1, code="llm.fatal", message="refused")
    assert plans.finish_plan(db, done, "completed")
    assert plans.reopen(db, done, retry_failed=True) == []  # a completed plan is final for good
    state = plans.load_state(db, done)
    assert state.plan.status == "completed"
    assert {p.key: p.status for p in state.phases} == {"opening": "completed", "final": "failed"}


def test_a_plan_is_finished_once(db: Database) -> None:
    plan_id = new_plan(db)
    assert plans.finish_plan(db, plan_id, "completed")
    assert not plans.finish_plan(db, plan_id, "failed", error_code="x", error_message="late")
    assert plans.get_plan(db, plan_id).status == "completed"
    assert event_types(db, plan_id).count("plan_finished") == 1


def test_the_reconciler_sees_exactly_the_plans_that_stopped_moving(db: Database) -> None:
    requeue = timedelta(seconds=60)
    moving = new_plan(db, "moving")  # a phase running under a live lease
    assert claim(db, moving, "opening", "w1", lease=timedelta(seconds=600)) is not None
    expired = new_plan(db, "expired")  # a phase whose lease has passed
    assert claim(db, expired, "opening", "w1", lease=timedelta(seconds=0.2)) is not None
    finished = new_plan(db, "finished")
    assert plans.finish_plan(db, finished, "completed")
    lease_end = phase(db, expired, "opening").lease_expires_at
    assert lease_end is not None
    wait_for(lambda: datetime.now(UTC) > lease_end, 10, interval=0.02, what="the lease to pass")

    later = datetime.now(UTC)
    assert set(plans.stalled_plan_ids(db, now=later, requeue_after=requeue)) == {expired}
    # no stored progress for requeue_after (a lost chord body): every running plan
    quiet = later + requeue + timedelta(seconds=1)
    assert set(plans.stalled_plan_ids(db, now=quiet, requeue_after=requeue)) >= {moving, expired}
    assert finished not in plans.stalled_plan_ids(db, now=quiet + timedelta(days=1), requeue_after=requeue)


def test_a_phase_enqueued_long_ago_and_never_claimed_makes_its_plan_stalled(db: Database) -> None:
    requeue = timedelta(seconds=60)
    lost = new_plan(db, "lost message")
    opening = phase(db, lost, "opening")
    assert phases.mark_enqueued(db, [opening.id], stale_before=None) == [opening.id]
    sent_at = phase(db, lost, "opening").enqueued_at
    assert sent_at is not None
    wait_for(lambda: datetime.now(UTC) > sent_at, 10, interval=0.01, what="the clock to move")
    final = phase(db, lost, "final")
    phases.mark_enqueued(db, [final.id], stale_before=None)  # the plan moved on; opening's message is lost
    moved = plans.get_plan(db, lost).updated_at
    assert moved > sent_at
    now = sent_at + (moved - sent_at) / 2 + requeue  # the cutoff falls between the two writes
    assert plans.stalled_plan_ids(db, now=now, requeue_after=requeue) == [lost]
