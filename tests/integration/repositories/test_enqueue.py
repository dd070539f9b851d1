"""Enqueue marks: a phase is sent only by the call that marks it, a mark older than the
requeue period may be taken again (``advance`` asks for it only once the phase has also been
READY that long — departure 5), a step that arrived early gives its mark back, a canvas that
could not be sent gives back all of its marks, and phases that can never run are skipped
with the reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from storage import Database, outbox, phases, plans
from storage.read_models import NewPhase
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
    assert all(phase(db, plan_id, k).enqueued_at is not None for k in ("opening", "final"))
    assert plans.get_plan(db, other).updated_at == quiet
    assert phase(db, other, "opening").enqueued_at is None

    taken = claim(db, plan_id, "opening", "w2")
    assert taken is not None and taken.phase.attempt == 2
    assert taken.phase.enqueued_at is None  # a claim consumes the mark
    assert complete(db, plan_id, "opening", 2, "done").status == "completed"
    assert phases.mark_enqueued(db, [opening], stale_before=None) == []  # final: nothing to send
    assert phase(db, plan_id, "opening").enqueued_at is None


def test_a_step_that_arrived_early_gives_its_mark_back(db: Database) -> None:
    """A refused claim (:func:`phases.release_waiting`) gives the mark back only when the phase
    is pending and its inputs are not all done — it arrived before them. A ready phase (a
    duplicate message) and a running one keep theirs."""
    plan_id = new_plan(db)
    opening, final = _ids(db, plan_id, "opening", "final")
    phases.mark_enqueued(db, [opening, final], stale_before=None)
    assert claim(db, plan_id, "final", "w1") is None  # early: its input has not completed
    assert phases.release_waiting(db, final)
    assert phase(db, plan_id, "final").enqueued_at is None
    assert phase(db, plan_id, "opening").enqueued_at is not None  # only that phase's mark
    assert not phases.release_waiting(db, opening)  # ready: not early, its mark stays
    assert phase(db, plan_id, "opening").enqueued_at is not None

    assert claim(db, plan_id, "opening", "w1") is not None
    phases.mark_enqueued(db, [opening], stale_before=None)
    assert not phases.release_waiting(db, opening)  # a running phase keeps its mark (only pending ones release)
    assert phase(db, plan_id, "opening").enqueued_at is not None


def test_a_canvas_that_could_not_be_sent_gives_its_marks_back(db: Database) -> None:
    """:func:`phases.release_enqueued` (the broker refused the canvas, or the marks of phases a
    broken canvas can no longer trigger): the named phases' marks, pending or running, and no
    other — a final phase's mark is history and stays."""
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    opening, final = _ids(db, plan_id, "opening", "final")
    (elsewhere,) = _ids(db, other, "opening")
    assert claim(db, plan_id, "opening", "w1") is not None
    assert phases.mark_enqueued(db, [opening, final, elsewhere], stale_before=None) == [opening, final, elsewhere]
    phases.release_enqueued(db, [opening, final])
    assert phase(db, plan_id, "opening").enqueued_at is None and phase(db, plan_id, "final").enqueued_at is None
    assert phase(db, other, "opening").enqueued_at is not None  # not named: kept

    assert phases.mark_enqueued(db, [opening], stale_before=None) == [opening]
    assert complete(db, plan_id, "opening", 1, "done").status == "completed"
    marked_at = phase(db, plan_id, "opening").enqueued_at
    assert marked_at is not None
    phases.release_enqueued(db, [opening])
    assert phase(db, plan_id, "opening").enqueued_at == marked_at


def test_skipped_phases_record_why_and_only_pending_ones_of_that_plan(db: Database) -> None:
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    (final,) = _ids(db, plan_id, "final")
    phases.mark_enqueued(db, [final], stale_before=None)
    assert claim(db, plan_id, "opening", "w1") is not None

    stored = phases.skip_phases(db, plan_id, {"a phase it depends on did not complete": ["opening", "final"]})
    state = plans.load_state(db, plan_id).by_key()
    assert state["opening"].status == "running"  # not pending: left alone
    skipped = state["final"]
    assert (skipped.status, skipped.error_message) == ("skipped", "a phase it depends on did not complete")
    assert skipped.finished_at is not None and skipped.enqueued_at is None
    assert {p.status for p in plans.load_state(db, other).phases} == {"pending"}  # another plan: untouched
    phases.skip_phases(db, other, {"no input": ["final"]})
    assert {p.key: p.status for p in plans.load_state(db, other).phases} == {"opening": "pending",
                                                                              "final": "skipped"}
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "phases_skipped"]
    # the event names what was skipped: the running opening was given, and left out
    assert event.data == {"phases": ["final"], "reason": "a phase it depends on did not complete"}
    assert [(e.id, e.type, e.data) for e in stored] == [(event.id, event.type, event.data)]  # what is published
    # nothing left to skip: no event at all
    assert phases.skip_phases(db, plan_id, {"a phase it depends on did not complete": ["opening", "final"]}) == ()
    assert [e.type for e in outbox.list_events(db, plan_id)].count("phases_skipped") == 1


def test_skips_are_stored_one_event_per_reason(db: Database) -> None:
    plan_id = plans.create_plan(
        db, title="skips", kind="team", spec={"title": "skips"}, task_id=None, max_active=100,
        phases=[NewPhase("a", "turn", 0, []), NewPhase("b", "turn", 1, []), NewPhase("c", "turn", 2, [])]).plan_id
    stored = phases.skip_phases(db, plan_id, {"the plan's budget is exhausted": ["a", "b"], "nothing": [],
                                              "no input": ["c"]})
    assert [(e.type, e.data) for e in stored] == [
        ("phases_skipped", {"phases": ["a", "b"], "reason": "the plan's budget is exhausted"}),
        ("phases_skipped", {"phases": ["c"], "reason": "no input"})]  # an empty reason stores nothing
    assert [(e.id, e.data) for e in outbox.list_events(db, plan_id) if e.type == "phases_skipped"] == [
        (e.id, e.data) for e in stored]
    by_key = plans.load_state(db, plan_id).by_key()
    budget = ("skipped", "the plan's budget is exhausted")
    assert {k: (p.status, p.error_message) for k, p in by_key.items()} == {
        "a": budget, "b": budget, "c": ("skipped", "no input")}
    assert phases.skip_phases(db, plan_id, {}) == () and phases.skip_phases(db, plan_id, {"x": []}) == ()
