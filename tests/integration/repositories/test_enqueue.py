"""Enqueue marks: a phase is sent only by the call that marks it, a mark older than the
requeue period may be taken again (the message was lost), a step that arrived early
gives its mark back, and phases that can never run are skipped with the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from storage import Database, events, phases, plans
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import LEASE, claim, complete, new_plan, phase, wait_until_lease_expired


def _ids(db: Database, plan_id: str, *keys: str) -> list[str]:
    return [phase(db, plan_id, k).id for k in keys]


def test_a_phase_is_marked_once_until_its_mark_is_stale(db: Database) -> None:
    plan_id = new_plan(db)
    (opening,) = _ids(db, plan_id, "opening")
    stale = datetime.now(UTC) - timedelta(seconds=60)
    assert phases.mark_enqueued(db, [opening], stale_before=stale) == [opening]
    assert phases.mark_enqueued(db, [opening], stale_before=stale) == []  # a concurrent advance sends nothing
    marked_at = phase(db, plan_id, "opening").enqueued_at
    assert marked_at is not None
    wait_for(lambda: datetime.now(UTC) > marked_at, 10, interval=0.01, what="the clock to move")
    later = datetime.now(UTC)
    assert phases.mark_enqueued(db, [opening], stale_before=later) == [opening]  # lost: sent again
    assert phases.mark_enqueued(db, [opening], stale_before=None) == [opening]  # resume: regardless


def test_marks_go_to_phases_that_can_still_run_and_bump_their_plan(db: Database) -> None:
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    quiet = plans.get_plan(db, other).updated_at
    opening, final = _ids(db, plan_id, "opening", "final")
    assert claim(db, plan_id, "opening", "w1", lease=LEASE) is not None
    wait_until_lease_expired(db, plan_id, "opening")
    before = plans.get_plan(db, plan_id).updated_at

    # a running phase whose worker died is sent again: the reconciler's takeover
    assert phases.mark_enqueued(db, [opening, final], stale_before=None) == [opening, final]
    assert plans.get_plan(db, plan_id).updated_at > before  # stored progress: not a stalled plan
    assert plans.get_plan(db, other).updated_at == quiet
    assert phase(db, other, "opening").enqueued_at is None

    assert claim(db, plan_id, "opening", "w2") is not None
    assert complete(db, plan_id, "opening", 2, "done").status == "completed"
    assert phases.mark_enqueued(db, [opening], stale_before=None) == []  # final: nothing to send


def test_a_step_that_arrived_early_gives_its_mark_back(db: Database) -> None:
    plan_id = new_plan(db)
    opening, final = _ids(db, plan_id, "opening", "final")
    phases.mark_enqueued(db, [opening, final], stale_before=None)
    phases.release_enqueued(db, final)
    assert phase(db, plan_id, "final").enqueued_at is None
    assert phase(db, plan_id, "opening").enqueued_at is not None  # only that phase's mark

    assert claim(db, plan_id, "opening", "w1") is not None
    phases.mark_enqueued(db, [opening], stale_before=None)
    phases.release_enqueued(db, opening)  # a running phase keeps its mark (only pending ones release)
    assert phase(db, plan_id, "opening").enqueued_at is not None


def test_skipped_phases_record_why_and_only_pending_ones_of_that_plan(db: Database) -> None:
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    (final,) = _ids(db, plan_id, "final")
    phases.mark_enqueued(db, [final], stale_before=None)
    assert claim(db, plan_id, "opening", "w1") is not None

    phases.skip_phases(db, plan_id, ["opening", "final"], "a phase it depends on did not complete")
    state = plans.load_state(db, plan_id).by_key()
    assert state["opening"].status == "running"  # not pending: left alone
    skipped = state["final"]
    assert (skipped.status, skipped.error_message) == ("skipped", "a phase it depends on did not complete")
    assert skipped.finished_at is not None and skipped.enqueued_at is None
    assert {p.status for p in plans.load_state(db, other).phases} == {"pending"}  # another plan: untouched
    phases.skip_phases(db, other, ["final"], "no input")
    assert {p.key: p.status for p in plans.load_state(db, other).phases} == {"opening": "pending",
                                                                              "final": "skipped"}
    (event,) = [e for e in events.list_events(db, plan_id) if e.type == "phases_skipped"]
    assert event.data == {"phases": ["opening", "final"], "reason": "a phase it depends on did not complete"}
