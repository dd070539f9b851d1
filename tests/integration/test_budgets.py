"""A budget holds against racing worker processes and against a worker that dies holding a
reservation: real ``celery -A tasks worker`` subprocesses on Postgres, every assertion on
what is stored (usage rows, reservations, statuses).

The race is what the reservation exists for: twenty phases of one plan start together on
twenty worker threads in two processes, against a budget that covers about ten worst-case
calls. A check-then-call budget (read what is spent, then call) lets every one of them see
nothing spent and call; reserving first lets at most the budget through.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from storage import Database
from storage.models import Reservation
from tests.budgets import PER_CALL, WORST, priced_registry, wide_team
from tests.integration.durability import ledger, owner_pid, wait_for


@pytest.fixture()
def settings(private_settings: Any, tmp_path: Path) -> Any:
    """The operator's registry has the priced offline model; each of its calls takes a second
    or two (``latency`` per chunk), so calls started together are in flight together."""
    return private_settings.model_copy(update={"models": priced_registry(tmp_path, latency=0.05)})


def reservations(db: Database, plan_id: str) -> list[tuple[str, int]]:
    with db.transaction() as s:
        return [(r.phase_id, r.attempt) for r in s.scalars(select(Reservation).where(Reservation.plan_id == plan_id))]


def test_twenty_racing_phases_never_spend_past_the_budget(client: Any, workers: Any) -> None:
    workers.many(2, beat=True, concurrency=10)  # twenty threads: every phase can start at once
    budget = 10 * WORST
    plan_id = client.submit(wide_team(20, budget={"usd": budget}, title="Racing budget"))
    wait_for(lambda: client.get(plan_id).final, 120, interval=0.2, what="plan final")

    led = ledger(client.local.db, plan_id)
    spent = sum(u.cost_usd or 0.0 for u in led.usage_rows)  # what was paid, waste included
    assert all(u.cost_usd is not None and u.cost_usd > PER_CALL for u in led.usage_rows)
    assert spent <= budget, f"spent ${spent:.4f} of ${budget:.4f} in {len(led.usage_rows)} calls"
    assert led.plan.status == "budget_exhausted" and led.plan.error_code == "plan.budget_exhausted"
    statuses = led.statuses()
    done = [k for k, s in statuses.items() if s == "completed"]
    assert 1 <= len(done) <= 10 < len(statuses)  # never more calls than ten worst cases pay for
    for p in led.phases:
        if p.status == "failed":
            assert p.error_code == "llm.budget_exhausted" and "budget.usd" in (p.error_message or ""), p
        else:
            assert p.status in ("completed", "skipped"), (p.key, p.status, p.error_code)
    assert statuses["synthesis"] == "skipped"
    assert "spent of" in (led.plan.error_message or "") and "left" in (led.plan.error_message or "")
    assert reservations(client.local.db, plan_id) == []  # every one settled or given back
    view = client.get(plan_id)
    assert view.budget is not None and view.budget.spent_usd == pytest.approx(spent)
    assert view.budget.remaining_usd == pytest.approx(budget - spent)


BUDGET = 1.97 * WORST


def test_a_worker_killed_holding_a_reservation_does_not_leak_it(client: Any, workers: Any, settings: Any,
                                                                tmp_path: Path) -> None:
    """A budget just under two worst cases: the phase's retried call fits only once the dead
    attempt's reservation is released (two reservations would not fit), and the synthesis
    after it (what the phase spent, a little under a worst case, and one more)."""
    fleet_settings = settings.model_copy(update={"models": priced_registry(tmp_path, latency=0.15)})
    victim = workers(settings=fleet_settings, concurrency=1)
    plan = wide_team(1, budget={"usd": BUDGET}, title="Killed holding")
    plan_id = client.submit(plan)

    def held_by_victim() -> tuple[str, int] | None:
        phase = client.local.reads.state(plan_id).by_key()["p00"]
        held = reservations(client.local.db, plan_id)
        if phase.status == "running" and owner_pid(phase) == victim.pid and (phase.id, phase.attempt) in held:
            return phase.id, phase.attempt
        return None

    phase_id, attempt = wait_for(held_by_victim, 60, interval=0.05, what="the victim's call, reserved")
    victim.kill()  # SIGKILL mid-call: the reservation stays behind with the dead attempt
    assert reservations(client.local.db, plan_id) == [(phase_id, attempt)]

    workers(settings=fleet_settings, beat=True)  # the reconciler takes the phase over
    wait_for(lambda: client.get(plan_id).final, 120, interval=0.2, what="plan final")
    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed", (led.statuses(), [(p.key, p.error_message) for p in led.phases])
    assert led.phase("p00").attempt > attempt
    assert sum(u.cost_usd or 0.0 for u in led.usage_rows) <= BUDGET
    assert reservations(client.local.db, plan_id) == []
