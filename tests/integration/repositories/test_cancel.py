"""Cancellation is a stored flag, checked by the repositories at every safe point:
a claim, a heartbeat, the completing write. A result that arrives after the cancel
ends ``cancelled``; the tokens its call spent stay on record."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage import Database, NotFound, outbox, phases, plans
from tests.integration.repositories.ledger import (
    LEASE,
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


def test_cancel_cancels_the_queued_phases_of_that_plan_and_flags_it(db: Database) -> None:
    plan_id = new_plan(db)
    other = new_plan(db, "another plan")
    assert claim(db, plan_id, "opening", "w1") is not None
    final = phase(db, plan_id, "final")
    assert phases.mark_enqueued(db, [final.id], stale_before=None) == [final.id]

    done = plans.request_cancel(db, plan_id)
    assert done.keys == ["final"]  # the running one ends at its next safe point
    state = plans.load_state(db, plan_id)
    assert state.plan.cancel_requested
    assert {p.key: p.status for p in state.phases} == {"opening": "running", "final": "cancelled"}
    cancelled = state.by_key()["final"]
    assert cancelled.finished_at is not None and cancelled.enqueued_at is None
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "cancel_requested"]
    assert event.data == {"cancelled": ["final"], "actor": None}
    assert [(e.id, e.type, e.data) for e in done.events] == [(event.id, event.type, event.data)]
    again = plans.request_cancel(db, plan_id)  # the plan is still running: flagged again, nothing left to cancel
    assert again.keys == []
    assert {p.key: p.status for p in plans.load_state(db, plan_id).phases} == {"opening": "running",
                                                                              "final": "cancelled"}

    untouched = plans.load_state(db, other)  # another plan: not cancelled, its phases still claimable
    assert not untouched.plan.cancel_requested
    assert {p.key: p.status for p in untouched.phases} == {"opening": "pending", "final": "pending"}
    assert claim(db, other, "opening", "w2") is not None


def test_cancelling_an_unknown_plan_names_it(db: Database) -> None:
    with pytest.raises(NotFound, match="no plan 'nope'"):
        plans.request_cancel(db, "nope")


def test_a_result_that_arrives_after_the_cancel_ends_cancelled(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1", lease=timedelta(seconds=60)) is not None
    spend(db, plan_id, "opening", 1, 40, 60)
    plans.request_cancel(db, plan_id)

    done = complete(db, plan_id, "opening", 1, "too late")
    assert (done.status, done.k, done.n) == ("cancelled", 2, 2)
    again = complete(db, plan_id, "opening", 1, "too late")  # retried after its commit: the stored outcome
    assert (again.status, again.k, again.n) == ("cancelled", 2, 2)
    opening = phase(db, plan_id, "opening")
    assert opening.status == "cancelled" and opening.lease_owner is None
    assert content_rows(db, plan_id) == {}
    assert not usage_by_attempt(db, plan_id, "opening")[1].counted
    assert view(db, plan_id).usage.wasted_tokens == 100  # the call's tokens, kept as spend
    assert "phase_completed" not in event_types(db, plan_id)
    assert event_types(db, plan_id, "opening") == ["phase_started", "phase_cancelled"]
    (event,) = [e for e in outbox.list_events(db, plan_id) if e.type == "phase_cancelled"]
    assert event.data == {"attempt": 1, "expert": None, "kind": "opening", "round": None,
                          "reason": "plan cancelled while the model ran", "error_code": None, "error": None,
                          "k": 2, "n": 2}
    assert [(e.id, e.type, e.data) for e in done.events] == [(event.id, event.type, event.data)]
    assert again.events == ()  # the retry stored nothing


def test_an_error_that_arrives_after_the_cancel_ends_cancelled(db: Database) -> None:
    plan_id = new_plan(db)
    got = claim(db, plan_id, "opening", "w1", lease=timedelta(seconds=60))
    assert got is not None
    plans.request_cancel(db, plan_id)
    out = phases.fail_phase(db, plan_id=plan_id, phase_id=got.phase.id, attempt=1, code="llm.cancelled",
                            message="stopped")
    assert out.status == "cancelled"
    opening = phase(db, plan_id, "opening")
    assert (opening.status, opening.error_code, opening.lease_owner) == ("cancelled", "llm.cancelled", None)
    assert "phase_cancelled" in event_types(db, plan_id, "opening")
    assert "phase_failed" not in event_types(db, plan_id)


def test_a_heartbeat_after_the_cancel_stops_the_call(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1", lease=timedelta(seconds=60)) is not None
    pid = phase(db, plan_id, "opening").id
    assert phases.renew_leases(db, [(pid, 1)], timedelta(seconds=60)) == {pid: True}
    plans.request_cancel(db, plan_id)
    assert phases.renew_leases(db, [(pid, 1)], timedelta(seconds=60)) == {pid: False}


def test_a_phase_of_a_cancelled_plan_is_not_taken_over(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1", lease=LEASE) is not None
    plans.request_cancel(db, plan_id)
    wait_until_lease_expired(db, plan_id, "opening")
    assert claim(db, plan_id, "opening", "w2") is None
    assert phase(db, plan_id, "opening").attempt == 1
