"""Cancellation is a stored flag, checked by the repositories at every safe point:
a claim, a heartbeat, the completing write. A result that arrives after the cancel
ends ``cancelled``; the tokens its call spent stay on record."""

from __future__ import annotations

from datetime import timedelta

from storage import Database, phases, plans
from tests.integration.repositories.ledger import (
    LEASE,
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


def test_cancel_cancels_the_queued_phases_and_flags_the_plan(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    assert plans.request_cancel(db, plan_id) == ["final"]  # the running one ends at its next safe point
    state = plans.load_state(db, plan_id)
    assert state.plan.cancel_requested
    assert {p.key: p.status for p in state.phases} == {"opening": "running", "final": "cancelled"}
    assert plans.request_cancel(db, plan_id) == []


def test_a_result_that_arrives_after_the_cancel_ends_cancelled(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1", lease=timedelta(seconds=60)) is not None
    spend(db, plan_id, "opening", 1, 40, 60)
    plans.request_cancel(db, plan_id)

    assert complete(db, plan_id, "opening", 1, "too late").status == "cancelled"
    opening = phase(db, plan_id, "opening")
    assert opening.status == "cancelled" and opening.lease_owner is None
    assert content_rows(db, plan_id) == {}
    assert not usage_by_attempt(db, plan_id, "opening")[1].counted
    assert view(db, plan_id).usage.wasted_tokens == 100  # the call's tokens, kept as spend
    assert "phase_completed" not in event_types(db, plan_id)
    assert event_types(db, plan_id, "opening") == ["phase_started", "phase_cancelled"]


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
