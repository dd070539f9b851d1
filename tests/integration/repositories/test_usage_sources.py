"""Provider-reported and estimated usage side by side, cost and waste alike, on Postgres
and SQLite: the plan view splits what was spent by who measured it and by whether it
was the phase's cost, and the parts always add up — provider + estimated == total,
nothing counted twice, nothing negative, waste never part of the total."""

from __future__ import annotations

import pytest

from orchestrator.plan.views import UsageView
from storage import Database
from tests.integration.repositories.ledger import (
    claim,
    complete,
    new_plan,
    spend,
    view,
    wait_until_lease_expired,
)


def _consistent(u: UsageView) -> None:
    values = (u.input_tokens, u.output_tokens, u.total_tokens, u.provider_tokens, u.estimated_tokens,
              u.wasted_tokens, u.calls)
    assert all(v >= 0 for v in values), u
    assert u.total_tokens == u.input_tokens + u.output_tokens == u.provider_tokens + u.estimated_tokens, u
    assert u.estimated == (u.estimated_tokens > 0), u


@pytest.mark.parametrize(("wasted_by", "cost_by"), [
    ("provider", "estimated"), ("estimated", "provider"), ("provider", "provider"), ("estimated", "estimated"),
])
def test_a_wasted_attempts_usage_is_waste_whoever_measured_it(db: Database, wasted_by: str, cost_by: str) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    wait_until_lease_expired(db, plan_id, "opening")
    assert claim(db, plan_id, "opening", "w2") is not None
    spend(db, plan_id, "opening", 1, 120, 80, source=wasted_by)  # attempt 1: 200 tokens, then fenced
    spend(db, plan_id, "opening", 2, 30, 20, source=cost_by)  # attempt 2: 50 tokens, the phase's cost
    spend(db, plan_id, "opening", 2, 4, 1, seq=2, source="estimated")  # a second call of attempt 2, no report
    assert complete(db, plan_id, "opening", 2, "text of attempt 2").status == "completed"
    assert complete(db, plan_id, "opening", 1, "text of attempt 1").status == "fenced"
    assert claim(db, plan_id, "final", "w3") is not None
    spend(db, plan_id, "final", 1, 7, 3, source="provider")  # the final phase's one call, reported
    assert complete(db, plan_id, "final", 1, "final text").status == "completed"

    shown = view(db, plan_id)
    opening = shown.phase("opening").usage
    cost_provider = 50 if cost_by == "provider" else 0
    assert (opening.total_tokens, opening.wasted_tokens, opening.calls) == (55, 200, 3)
    assert (opening.provider_tokens, opening.estimated_tokens) == (cost_provider, 55 - cost_provider)
    assert (opening.input_tokens, opening.output_tokens) == (34, 21)
    assert opening.estimated  # the second call was estimated, whoever reported the first
    final = shown.phase("final").usage
    assert (final.total_tokens, final.provider_tokens, final.estimated_tokens, final.wasted_tokens) == (10, 10, 0, 0)
    assert not final.estimated

    plan = shown.usage
    assert (plan.total_tokens, plan.wasted_tokens, plan.calls) == (65, 200, 4)
    assert (plan.provider_tokens, plan.estimated_tokens) == (cost_provider + 10, 55 - cost_provider)
    for u in (opening, final, plan):
        _consistent(u)


def test_a_running_attempts_reported_usage_is_live_cost_and_a_dead_ones_is_waste(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    spend(db, plan_id, "opening", 1, 60, 40, source="provider")
    running = view(db, plan_id).usage  # attempt 1 is running: its spend is live cost
    assert (running.total_tokens, running.provider_tokens, running.estimated_tokens, running.wasted_tokens) == (
        100, 100, 0, 0)
    _consistent(running)
    wait_until_lease_expired(db, plan_id, "opening")
    assert claim(db, plan_id, "opening", "w2") is not None  # attempt 1 died: its reported tokens are waste
    taken_over = view(db, plan_id).usage
    assert (taken_over.total_tokens, taken_over.provider_tokens, taken_over.wasted_tokens) == (0, 0, 100)
    assert not taken_over.estimated
    _consistent(taken_over)


def test_an_estimate_spent_as_waste_does_not_make_the_cost_an_estimate(db: Database) -> None:
    plan_id = new_plan(db)
    assert claim(db, plan_id, "opening", "w1") is not None
    spend(db, plan_id, "opening", 1, 60, 40)  # attempt 1's call, estimated, then it died
    wait_until_lease_expired(db, plan_id, "opening")
    assert claim(db, plan_id, "opening", "w2") is not None
    spend(db, plan_id, "opening", 2, 30, 20, source="provider")
    assert complete(db, plan_id, "opening", 2, "text of attempt 2").status == "completed"
    shown = view(db, plan_id).usage
    assert (shown.total_tokens, shown.provider_tokens, shown.estimated_tokens, shown.wasted_tokens) == (50, 50, 0, 100)
    assert not shown.estimated  # every counted token was reported by the provider
    _consistent(shown)
