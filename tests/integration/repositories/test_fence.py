"""Claim + fence at the storage boundary, on Postgres and SQLite.

One attempt at a time holds a phase (a live lease is never taken); a stale attempt —
one whose lease expired and was taken over — can neither complete nor fail the
phase, whether the newer attempt is still running (only the attempt condition
stops it: the status is ``running`` either way) or has already completed. Its
usage stays on record as waste and is never counted.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage import Database, contents, phases, plans
from tests.integration.repositories.ledger import (
    claim,
    complete,
    content_rows,
    event_types,
    new_plan,
    phase,
    spend,
    usage_by_attempt,
    view,
    wait_until_lease_expired,
)


def _taken_over(db: Database) -> str:
    """A plan whose ``opening`` was claimed by attempt 1 (w1), whose lease expired, and
    which attempt 2 (w2) claimed; both attempts' model calls reported usage."""
    plan_id = new_plan(db)
    first = claim(db, plan_id, "opening", "w1")
    assert first is not None and first.attempt == 1
    assert claim(db, plan_id, "opening", "w2") is None  # a live lease is never taken
    wait_until_lease_expired(db, plan_id, "opening")
    second = claim(db, plan_id, "opening", "w2")
    assert second is not None and second.attempt == 2
    assert second.phase.lease_owner == "w2" and second.phase.status == "running"
    spend(db, plan_id, "opening", 1, 100, 50)  # attempt 1's call ended: its usage is on record
    spend(db, plan_id, "opening", 2, 30, 20)
    return plan_id


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

    out = phases.fail_phase(db, phase_id=opening.id, attempt=1, code="llm.unavailable", message="late")
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
        out = phases.fail_phase(db, phase_id=first.phase.id, attempt=1, code="llm.fatal", message="no")
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
