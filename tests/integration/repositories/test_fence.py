"""Claim + fence at the storage boundary, on Postgres and SQLite.

One attempt at a time holds a phase (a live lease is never taken); a stale attempt —
one whose lease expired and was taken over — can neither complete nor fail the
phase, whether the newer attempt is still running (only the attempt condition
stops it: the status is ``running`` either way) or has already completed. Its
usage stays on record as waste and is never counted.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from storage import Database, contents, outbox, phases, plans
from storage.read_models import NewPhase
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import (
    claim,
    complete,
    event_types,
    new_plan,
    phase,
    spend,
    usage_by_attempt,
    view,
    wait_until_lease_expired,
)
from tests.stored_rows import content_rows


def _taken_over(db: Database) -> str:
    """A plan whose ``opening`` was claimed by attempt 1 (w1), whose lease expired, and
    which attempt 2 (w2) claimed; both attempts' model calls reported usage."""
    plan_id = new_plan(db)
    first = claim(db, plan_id, "opening", "w1")
    assert first is not None and first.phase.attempt == 1
    wait_until_lease_expired(db, plan_id, "opening")
    second = claim(db, plan_id, "opening", "w2")
    assert second is not None and second.phase.attempt == 2
    assert second.phase.lease_owner == "w2" and second.phase.status == "running"
    spend(db, plan_id, "opening", 1, 100, 50)  # attempt 1's call ended: its usage is on record
    spend(db, plan_id, "opening", 2, 30, 20)
    return plan_id


def test_a_live_lease_is_never_taken_over(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1", lease=timedelta(seconds=600)) is not None
    assert claim(db, plan_id, "opening", "w2") is None  # the caller acknowledges and does nothing
    held = phase(db, plan_id, "opening")
    assert (held.status, held.attempt, held.lease_owner) == ("running", 1, "w1")
    assert event_types(db, plan_id, "opening") == ["phase_started"]


def test_a_stale_attempt_is_fenced_while_the_new_attempt_runs(db: Database) -> None:
    plan_id = _taken_over(db)

    assert complete(db, plan_id, "opening", 1, "text of attempt 1").status == "fenced"

    now = phase(db, plan_id, "opening")
    assert (now.status, now.attempt, now.lease_owner) == ("running", 2, "w2")  # attempt 2 keeps the phase
    assert now.lease_expires_at is not None and now.summary is None
    assert content_rows(db, plan_id) == {}  # no content row yet: nothing of attempt 1 was written
    assert "phase_completed" not in event_types(db, plan_id)
    spent = usage_by_attempt(db, plan_id, "opening")
    assert sorted(spent) == [1, 2] and not spent[1].counted and not spent[2].counted
    seen = view(db, plan_id).phase("opening")
    assert (seen.status, seen.attempt) == ("running", 2)
    assert seen.usage.total_tokens == 50  # the running attempt's spend is live cost ...
    assert seen.usage.wasted_tokens == 150  # ... the fenced attempt's is waste

    assert complete(db, plan_id, "opening", 2, "text of attempt 2").status == "completed"
    done = phase(db, plan_id, "opening")
    assert (done.status, done.attempt) == ("completed", 2)
    assert done.lease_owner is None and done.lease_expires_at is None  # cleared with the result
    assert content_rows(db, plan_id) == {done.id: 1}
    assert contents.read_text(db, plan_id, "opening") == "text of attempt 2"
    spent = usage_by_attempt(db, plan_id, "opening")
    assert (spent[1].counted, spent[2].counted) == (False, True)
    shown = view(db, plan_id)
    assert (shown.usage.total_tokens, shown.usage.wasted_tokens, shown.usage.calls) == (50, 150, 2)
    assert (shown.usage.input_tokens, shown.usage.output_tokens) == (30, 20)
    opening = shown.phase("opening")
    assert (opening.usage.total_tokens, opening.usage.wasted_tokens) == (50, 150)
    completed = [e for e in plans.load_state(db, plan_id).phases if e.status == "completed"]
    assert [p.key for p in completed] == ["opening"]
    assert event_types(db, plan_id, "opening").count("phase_completed") == 1


def test_a_stale_attempt_is_fenced_after_the_new_attempt_completed(db: Database) -> None:
    plan_id = _taken_over(db)
    assert complete(db, plan_id, "opening", 2, "text of attempt 2").status == "completed"

    assert complete(db, plan_id, "opening", 1, "text of attempt 1").status == "fenced"
    assert contents.read_text(db, plan_id, "opening") == "text of attempt 2"
    assert content_rows(db, plan_id) == {phase(db, plan_id, "opening").id: 1}
    spent = usage_by_attempt(db, plan_id, "opening")
    assert (spent[1].counted, spent[2].counted) == (False, True)
    assert view(db, plan_id).usage.total_tokens == 50
    assert event_types(db, plan_id, "opening").count("phase_completed") == 1


def test_a_stale_attempt_cannot_fail_the_phase_another_attempt_runs(db: Database) -> None:
    plan_id = _taken_over(db)
    opening = phase(db, plan_id, "opening")

    out = phases.fail_phase(db, plan_id=plan_id, phase_id=opening.id, attempt=1, code="llm.unavailable",
                            message="late")
    assert out.status == "fenced"
    now = phase(db, plan_id, "opening")
    assert (now.status, now.attempt, now.error_code) == ("running", 2, None)
    assert "phase_failed" not in event_types(db, plan_id)
    assert complete(db, plan_id, "opening", 2, "text of attempt 2").status == "completed"


def test_a_stale_attempt_loses_its_heartbeat(db: Database) -> None:
    plan_id = _taken_over(db)
    pid = phase(db, plan_id, "opening").id
    before = phase(db, plan_id, "opening").lease_expires_at

    assert phases.renew_leases(db, [(pid, 1)], lease=timedelta(seconds=60)) == {pid: False}  # stop its call
    assert phase(db, plan_id, "opening").lease_expires_at == before  # and attempt 2's lease is untouched
    assert phases.renew_leases(db, [(pid, 2)], lease=timedelta(seconds=60)) == {pid: True}
    after = phase(db, plan_id, "opening").lease_expires_at
    assert after is not None and before is not None and after > before


@pytest.mark.parametrize("final", ["completed", "failed"])
def test_a_final_phase_is_never_claimed_again(db: Database, final: str) -> None:
    plan_id = new_plan(db)
    first = claim(db, plan_id, "opening", "w1")
    assert first is not None
    if final == "completed":
        assert complete(db, plan_id, "opening", 1, "done").status == "completed"
    else:
        out = phases.fail_phase(db, plan_id=plan_id, phase_id=first.phase.id, attempt=1, code="llm.fatal",
                                message="no")
        assert out.status == "failed"
    assert claim(db, plan_id, "opening", "w2") is None
    assert phase(db, plan_id, "opening").attempt == 1


def test_a_completion_retried_after_its_commit_returns_the_stored_outcome(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    spend(db, plan_id, "opening", 1, 10, 5)
    first = complete(db, plan_id, "opening", 1, "the text")
    again = complete(db, plan_id, "opening", 1, "the text")  # the caller never heard back and retries
    assert (first.status, again.status) == ("completed", "completed")
    assert (again.k, again.n) == (first.k, first.n) == (1, 2)
    assert content_rows(db, plan_id) == {phase(db, plan_id, "opening").id: 1}
    assert event_types(db, plan_id, "opening").count("phase_completed") == 1
    assert usage_by_attempt(db, plan_id, "opening")[1].counted


def test_a_claim_starts_the_attempt_and_records_it(db: Database) -> None:
    plan_id = new_plan(db)
    opening = phase(db, plan_id, "opening")
    assert phases.mark_enqueued(db, [opening.id], stale_before=None) == [opening.id]
    before = datetime.now(UTC)
    got = claim(db, plan_id, "opening", "host:42:abc")
    assert got is not None
    now = phase(db, plan_id, "opening")
    assert now.started_at is not None and now.started_at >= before
    assert now.enqueued_at is None  # the message was consumed: the mark is cleared
    assert got.phase == now
    (started,) = [e for e in outbox.list_events(db, plan_id) if e.type == "phase_started"]
    assert (started.phase_key, started.data) == ("opening", {"attempt": 1, "expert": None, "kind": "opening",
                                                             "round": None, "worker": "host:42:abc",
                                                             "k": 0, "n": 2})
    assert (got.event.id, got.event.type, got.event.data) == (started.id, started.type, started.data)


def test_a_heartbeat_renews_only_the_phase_and_attempt_it_names(db: Database) -> None:
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    for pid in (plan_id, other):  # two running phases, both at attempt 1
        assert claim(db, pid, "opening", "w1", lease=timedelta(seconds=60)) is not None
    mine, theirs = phase(db, plan_id, "opening"), phase(db, other, "opening")

    assert phases.renew_leases(db, [(mine.id, 1)], lease=timedelta(seconds=600)) == {mine.id: True}
    assert phase(db, other, "opening").lease_expires_at == theirs.lease_expires_at  # not renewed
    renewed = phase(db, plan_id, "opening").lease_expires_at
    assert renewed is not None and mine.lease_expires_at is not None and renewed > mine.lease_expires_at

    assert complete(db, plan_id, "opening", 1, "done").status == "completed"
    assert phases.renew_leases(db, [(mine.id, 1)], lease=timedelta(seconds=600)) == {mine.id: False}
    assert phase(db, plan_id, "opening").lease_expires_at is None  # a finished phase holds no lease


def _two_lanes(db: Database) -> str:
    """``opening`` and ``side`` side by side, then ``final``."""
    created = plans.create_plan(
        db, title="two lanes", kind="board", spec={"title": "two lanes"}, task_id=None, max_active=100,
        phases=[NewPhase("opening", "opening", 0, []), NewPhase("side", "turn", 1, []),
                NewPhase("final", "final", 2, ["opening", "side"], meta={"terminal": True})])
    return created.plan_id


def test_completing_writes_the_result_and_only_this_phases(db: Database) -> None:
    plan_id = _two_lanes(db)
    other = new_plan(db, "another plan")
    for pid in (plan_id, other):  # the same attempt number, running in two plans
        assert claim(db, pid, "opening", "w1", lease=timedelta(seconds=60)) is not None
        spend(db, pid, "opening", 1, 10, 20)
    assert claim(db, plan_id, "side", "w1", lease=timedelta(seconds=60)) is not None  # and beside it
    before = datetime.now(UTC)

    done = phases.complete_phase(db, plan_id=plan_id, phase_id=phase(db, plan_id, "opening").id, attempt=1,
                                 text="full text", summary="short", truncated=True, fallback=True, offloaded=False)
    assert (done.status, done.k, done.n) == ("completed", 1, 3)
    beside = phase(db, plan_id, "side")  # untouched: still running
    assert (beside.status, beside.summary, beside.lease_owner) == ("running", None, "w1")
    mine = phase(db, plan_id, "opening")
    assert (mine.status, mine.summary, mine.truncated) == ("completed", "short", True)
    assert mine.finished_at is not None and mine.finished_at >= before
    assert usage_by_attempt(db, plan_id, "opening")[1].counted
    (completed,) = [e for e in outbox.list_events(db, plan_id) if e.type == "phase_completed"]
    assert (completed.phase_key, completed.data) == ("opening", {
        "attempt": 1, "expert": None, "kind": "opening", "round": None, "chars": 9, "truncated": True,
        "fallback": True, "offloaded": False, "summary": "short", "k": 1, "n": 3})
    assert [(e.id, e.type, e.data) for e in done.events] == [(completed.id, completed.type, completed.data)]
    assert content_rows(db, plan_id) == {phase(db, plan_id, "opening").id: 1}

    theirs = phase(db, other, "opening")  # untouched: still running, its usage not counted
    assert (theirs.status, theirs.summary, theirs.lease_owner) == ("running", None, "w1")
    assert not usage_by_attempt(db, other, "opening")[1].counted
    assert content_rows(db, other) == {} and "phase_completed" not in event_types(db, other)
    assert complete(db, other, "opening", 1, "theirs").status == "completed"
    assert contents.read_text(db, other, "opening") == "theirs"
    assert contents.read_text(db, plan_id, "opening") == "full text"


def test_a_write_for_an_unknown_phase_is_fenced(db: Database) -> None:
    plan_id = new_plan(db)
    gone = "00000000-0000-0000-0000-000000000000"

    def completing() -> str:
        return phases.complete_phase(db, plan_id=plan_id, phase_id=gone, attempt=1, text="t", summary="t",
                                     truncated=False, fallback=False, offloaded=False).status

    assert completing() == "fenced"  # both databases: the fenced UPDATE first, the content only after it
    assert phases.fail_phase(db, plan_id=plan_id, phase_id=gone, attempt=1, code="x", message="y").status == "fenced"
    assert event_types(db, plan_id) == ["plan_submitted"] and content_rows(db, plan_id) == {}


def test_a_write_naming_another_plans_phase_is_fenced(db: Database) -> None:
    """The finishing writes lock the plan they are told and touch only that plan's phases:
    a phase id of another plan (a forged or crossed message) completes and fails nothing."""
    plan_id, other = new_plan(db), new_plan(db, "another plan")
    assert claim(db, other, "opening", "w1", lease=timedelta(seconds=60)) is not None
    theirs = phase(db, other, "opening").id
    done = phases.complete_phase(db, plan_id=plan_id, phase_id=theirs, attempt=1, text="forged", summary="f",
                                 truncated=False, fallback=False, offloaded=False)
    assert done.status == "fenced"
    assert phases.fail_phase(db, plan_id=plan_id, phase_id=theirs, attempt=1, code="x", message="y").status == "fenced"
    untouched = phase(db, other, "opening")
    assert (untouched.status, untouched.lease_owner, untouched.summary) == ("running", "w1", None)
    assert content_rows(db, other) == {} and content_rows(db, plan_id) == {}
    assert event_types(db, plan_id) == ["plan_submitted"]
    assert "phase_completed" not in event_types(db, other) and "phase_failed" not in event_types(db, other)


def test_failing_records_the_error_bounded_and_reports_progress(db: Database) -> None:
    plan_id = new_plan(db)
    got = claim(db, plan_id, "opening", "w1")
    assert got is not None
    long = "refused: " + "x" * 3000
    out = phases.fail_phase(db, plan_id=plan_id, phase_id=got.phase.id, attempt=1, code="llm.auth", message=long)
    assert (out.status, out.k, out.n) == ("failed", 1, 2)
    failed = phase(db, plan_id, "opening")
    assert (failed.status, failed.error_code, failed.error_message) == ("failed", "llm.auth", long[:2000])
    assert failed.lease_owner is None and failed.lease_expires_at is None and failed.finished_at is not None
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "phase_failed"]
    assert event.phase_key == "opening"
    assert event.data == {"attempt": 1, "expert": None, "kind": "opening", "round": None, "error_code": "llm.auth",
                          "error": long[:500], "k": 1, "n": 2}
    assert [(e.id, e.type, e.data) for e in out.events] == [(event.id, event.type, event.data)]


def test_the_writes_that_finish_a_phase_take_its_plans_row_first(pg: Database) -> None:
    """One lock order per plan (plan row, then phase row) serialises completions, failures
    and debate insertions of a plan: a completion starts by locking the plan row
    (``UPDATE plans SET updated_at … RETURNING``), so it waits while another transaction holds
    that row ``FOR SHARE`` — which blocks only updates of the plan row (the foreign-key checks of
    the content and event inserts take ``KEY SHARE``) — and it has touched no phase row while it waits."""
    db = pg
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1", lease=timedelta(seconds=60)) is not None
    opening = phase(db, plan_id, "opening")
    outcome: list[str] = []
    with db.engine.connect() as holder:
        tx = holder.begin()
        holder.execute(text("SELECT id FROM plans WHERE id = :id FOR SHARE"), {"id": plan_id})
        writer = threading.Thread(target=lambda: outcome.append(complete(db, plan_id, "opening", 1, "t").status))
        writer.start()

        def waiting_or_done() -> bool:
            if outcome:
                return True
            with db.engine.connect() as c:
                return bool(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                           "AND datname = current_database() AND query ILIKE 'UPDATE plans%'"))
                            .scalar())

        try:
            wait_for(waiting_or_done, 30, interval=0.02, what="the completion to wait or finish")
            assert outcome == [], "the completion did not wait for the plan row"
            with db.engine.connect() as other:  # the phase row is not locked yet: the plan row came first
                with other.begin():
                    got = other.execute(text("SELECT id FROM phases WHERE id = :id FOR UPDATE NOWAIT"),
                                        {"id": opening.id}).scalar()
                assert got == opening.id
            assert phase(db, plan_id, "opening") == opening  # nothing of the completion is visible yet
        finally:
            tx.rollback()
        writer.join(30)
    assert outcome == ["completed"]
    assert phase(db, plan_id, "opening").status == "completed"
