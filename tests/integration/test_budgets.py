"""A budget holds against racing worker processes and against a worker that dies holding a
reservation: real ``celery -A tasks worker`` subprocesses on Postgres, every assertion on
what is stored (usage rows, reservations, statuses).

The race is what the reservation exists for: twenty phases of one plan start together on
twenty worker threads in two processes, against a budget that covers about ten worst-case
calls. A check-then-call budget (read what is spent, then call) lets every one of them see
nothing spent and call; reserving first lets at most the budget through.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text

from storage import Database, spend
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


def test_twenty_racing_phases_never_spend_past_a_token_budget(client: Any, workers: Any) -> None:
    """The token budget reserves the same way: a call's worst case is its request's estimated
    tokens plus ``max_output_tokens`` (about 1,140 here, of which it spends about 350)."""
    workers.many(2, beat=True, concurrency=10)
    budget = 4_500  # about four calls' worst case, a dozen calls' spend: twenty at once would spend 7,000
    plan_id = client.submit(wide_team(20, budget={"max_tokens": budget}, title="Racing tokens"))
    wait_for(lambda: client.get(plan_id).final, 120, interval=0.2, what="plan final")

    led = ledger(client.local.db, plan_id)
    spent = sum(u.input_tokens + u.output_tokens for u in led.usage_rows)
    assert spent <= budget, f"spent {spent} tokens of {budget} in {len(led.usage_rows)} calls"
    assert led.plan.status == "budget_exhausted"
    refused = [p for p in led.phases if p.error_code == "llm.budget_exhausted"]
    assert refused and all("budget.max_tokens" in (p.error_message or "") for p in refused)
    assert f"{spent} tokens spent of {budget}, {budget - spent} left" in (led.plan.error_message or "")
    assert reservations(client.local.db, plan_id) == []


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


def test_a_tenants_month_holds_across_its_racing_plans(client: Any, workers: Any, settings: Any,
                                                       tmp_path: Path) -> None:
    """No plan budget, a tenant budget of about ten worst cases, two plans of the tenant with
    ten phases each started together: the month is never overspent, summed over both plans.
    (A reservation is a few milliseconds, so racing processes seldom overlap on it here; that
    they serialise on the tenant's lock is shown deterministically by the next test.)"""
    month = 10 * WORST
    budgeted = settings.model_copy(update={"tenant_monthly_usd": month})
    workers.many(2, beat=True, concurrency=10, settings=budgeted)
    local = type(client)(budgeted, worker=False)
    try:
        plan_ids = [local.submit(wide_team(10, budget=None, title=f"Tenant month {i}")) for i in range(2)]
        wait_for(lambda: all(local.get(p).final for p in plan_ids), 120, interval=0.2, what="plans final")
        spent = 0.0
        for plan_id in plan_ids:
            led = ledger(local.local.db, plan_id)
            spent += sum(u.cost_usd or 0.0 for u in led.usage_rows)
            assert led.plan.status in ("budget_exhausted", "completed"), led.statuses()
            assert reservations(local.local.db, plan_id) == []
        assert spent <= month, f"the tenant spent ${spent:.4f} of its ${month:.4f}"
        refused = [p for pid in plan_ids for p in ledger(local.local.db, pid).phases
                   if p.error_code == "llm.budget_exhausted"]
        assert refused and all("tenant 'default'" in (p.error_message or "") for p in refused)
    finally:
        local.close()


@pytest.mark.parametrize("budget", ["plan", "tenant"])
def test_a_reservation_waits_for_one_in_flight_and_then_counts_it(client: Any, settings: Any, budget: str) -> None:
    """The serialisation the race above relies on, made visible: a transaction holds the plan
    row's lock (a plan budget) or the tenant's spend lock (a tenant budget) and has inserted a
    reservation of the whole budget, not yet committed. A reservation asked for meanwhile waits
    for that lock (seen in ``pg_locks``), then counts the committed one and is refused."""
    plan_id = client.submit(wide_team(1, budget={"usd": WORST} if budget == "plan" else None))
    phase = client.local.reads.state(plan_id).by_key()["p00"]
    db = client.local.db
    limits = spend.Limits(usd=WORST) if budget == "plan" else spend.Limits(tenant_usd=WORST)
    engine = create_engine(settings.database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    outcome: list[int | spend.Refusal] = []
    with engine.connect() as holder:
        holder.begin()
        if budget == "plan":
            holder.execute(text("SELECT id FROM plans WHERE id = :p FOR NO KEY UPDATE"), {"p": plan_id})
        else:
            holder.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": spend.tenant_lock_key("default")})
        holder.execute(text("INSERT INTO reservations (plan_id, phase_id, attempt, tenant, tokens, cost_usd, "
                            "created_at) VALUES (:p, :ph, 1, 'default', 10, :usd, now())"),
                       {"p": plan_id, "ph": phase.id, "usd": WORST})
        asker = threading.Thread(target=lambda: outcome.append(spend.reserve(
            db, plan_id=plan_id, phase_id=phase.id, attempt=1, tenant="default", tokens=10, cost_usd=WORST,
            limits=limits)))
        asker.start()
        wait_for(lambda: outcome or _waiting(holder), 30, interval=0.05, what="the second reservation waiting")
        holder.commit()
    asker.join(30)
    engine.dispose()
    (got,) = outcome
    assert isinstance(got, spend.Refusal) and got.reserved == pytest.approx(WORST), got
    assert reservations(db, plan_id) == [(phase.id, 1)]  # the one in flight, and no second


def _waiting(conn: Any) -> bool:
    """Some session of this test's database waits for a lock (only this test's can)."""
    return bool(conn.execute(text(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE NOT l.granted AND a.datname = current_database()")).scalar())
