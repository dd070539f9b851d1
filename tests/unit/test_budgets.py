"""Budgets in money and tokens, over SQLite with the phase runner in process: a call's worst
case is reserved before it is made and settled by its usage row; a plan that runs out ends
``budget_exhausted`` saying what it spent and has left, never past its budget; a model
without a price is never taken to be free; a tenant whose month is spent cannot submit.
(The same with racing worker processes on Postgres: tests/integration/test_budgets.py.)"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.api.ui.plan_page import budget_text
from orchestrator.core.errors import InvalidPlan, TenantBudgetExhausted
from orchestrator.core.settings import Settings, settings_errors
from orchestrator.gateway.types import ModelSpec, Usage
from orchestrator.plan.schema import load_plan
from orchestrator.plan.spending import dollars
from storage import phases, plans, spend, usage
from storage.identity import Principal
from storage.models import Reservation
from storage.status import PhaseStatus, PlanStatus
from tests.budgets import PER_CALL, WORST, priced_registry, wide_team
from tests.unit.planes import Planes


@pytest.fixture()
def directory(fast_dir: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(dir=fast_dir))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture()
def priced(template_db: Path, directory: Path) -> Iterator[Planes]:
    p = Planes.open(template_db, directory, models=priced_registry(directory))
    yield p
    p.close()


def open_reservations(planes: Planes, plan_id: str | None = None) -> list[Reservation]:
    with planes.db.transaction() as s:
        q = s.query(Reservation)
        return list(q.filter(Reservation.plan_id == plan_id) if plan_id else q)


def submit(planes: Planes, plan: dict[str, object], tenant: str | None = None) -> str:
    who = Principal(id="p1", name="tester", tenant=tenant, scopes=("write",)) if tenant else None
    return planes.coordinator.submit(load_plan(plan), principal=who).plan_id


def test_a_per_call_fee_is_part_of_every_calls_cost() -> None:
    spec = ModelSpec(name="m", provider="offline", price=(1.0, 2.0, 0.5))
    assert spec.cost(Usage(1_000_000, 1_000_000, "provider", None)) == pytest.approx(3.5)
    assert spec.cost(Usage(0, 0, "provider", None)) == pytest.approx(0.5)  # a call that wrote nothing still pays
    assert ModelSpec(name="free", provider="offline").cost(Usage(10, 10, "provider", None)) is None


def test_a_plan_that_runs_out_stops_at_its_budget_and_says_what_it_spent(priced: Planes) -> None:
    budget = 10.5 * WORST  # about ten calls' worst case
    plan_id = submit(priced, wide_team(20, budget={"usd": budget}))
    priced.run_all()

    state = priced.state(plan_id)
    rows = priced.usage(plan_id)
    spent = sum(r.cost_usd or 0.0 for r in rows)
    assert all(r.cost_usd is not None and PER_CALL < r.cost_usd < WORST for r in rows)
    assert spent <= budget < spent + WORST  # it stopped only when the next worst case no longer fitted
    assert state.plan.status == PlanStatus.BUDGET_EXHAUSTED and state.plan.error_code == "plan.budget_exhausted"
    refused = [p for p in state.phases if p.error_code == "llm.budget_exhausted"]
    assert refused and all("budget.usd" in (p.error_message or "") for p in refused)
    statuses = [p.status for p in state.phases]
    assert statuses.count(PhaseStatus.COMPLETED) == len(rows) >= 10
    assert statuses.count(PhaseStatus.FAILED) == len(refused) and state.by_key()["synthesis"].status == "skipped"
    left = budget - spent
    message = state.plan.error_message or ""
    assert f"{dollars(spent)} spent of {dollars(budget)}, {dollars(left)} left" in message, message
    assert open_reservations(priced) == []  # every reservation settled by its usage row

    view = priced.coordinator.reads.view(plan_id)
    assert view.budget is not None and view.budget.usd == budget
    assert view.budget.spent_usd == pytest.approx(spent) and view.budget.remaining_usd == pytest.approx(left)
    assert budget_text(view.budget) == f"{dollars(spent)} of {dollars(budget)}, {dollars(left)} left"  # the page


def test_the_token_budget_reserves_the_same_way(priced: Planes) -> None:
    plan_id = submit(priced, wide_team(6, budget={"max_tokens": 1}, model="free"))
    priced.run_all()
    state = priced.state(plan_id)
    assert state.plan.status == PlanStatus.BUDGET_EXHAUSTED
    assert priced.usage(plan_id) == []  # the first call's worst case already did not fit: nothing was spent
    assert "budget.max_tokens" in (state.plan.error_message or "") and "0 tokens spent of 1" in state.plan.error_message


def test_a_reservation_counts_until_settled_and_a_dead_attempts_is_released(priced: Planes) -> None:
    plan_id = submit(priced, wide_team(2, budget={"usd": 1.5 * WORST}))
    a, b = (priced.state(plan_id).by_key()[k] for k in ("p00", "p01"))
    for phase in (a, b):
        assert priced.runner.claim(phase.id, owner="unit:1:a") is not None
    limits = spend.Limits(usd=1.5 * WORST)

    def take(phase_id: str, attempt: int) -> int | spend.Refusal:
        return spend.reserve(priced.db, plan_id=plan_id, phase_id=phase_id, attempt=attempt, tenant="default",
                             tokens=100, cost_usd=WORST, limits=limits)

    held = take(a.id, 1)
    assert isinstance(held, int)
    refused = take(b.id, 1)  # a's call is in flight: b's worst case does not fit beside it
    assert isinstance(refused, spend.Refusal) and refused.budget == "usd"
    assert refused.reserved == pytest.approx(WORST) and refused.spent == 0.0

    # a's worker dies holding it; the phase is claimed again: the new attempt's reservation releases the old
    priced.expire_lease(a.id)
    again = priced.runner.claim(a.id, owner="unit:2:a")
    assert again is not None and again.attempt == 2
    second = take(a.id, 2)
    assert isinstance(second, int)
    assert [(r.phase_id, r.attempt) for r in open_reservations(priced, plan_id)] == [(a.id, 2)]

    # settled by its usage row: the reservation is gone, the row counts instead — once
    assert usage.record_usage(priced.db, plan_id=plan_id, phase_id=a.id, attempt=2, seq=1, purpose="phase",
                              model="offline:priced", input_tokens=10, output_tokens=10, source="estimated",
                              method="chars/4", cost_usd=0.4 * WORST, reservation=second)
    assert open_reservations(priced, plan_id) == []
    assert isinstance(take(b.id, 1), int)  # 0.4 spent + 1 held ≤ 1.5
    assert isinstance(take(b.id, 1), spend.Refusal)  # 0.4 + 2 held > 1.5


def test_the_reconciler_releases_what_no_running_attempt_holds(priced: Planes) -> None:
    plan_id = submit(priced, wide_team(2, budget={"usd": 10 * WORST}))
    a, b = (priced.state(plan_id).by_key()[k] for k in ("p00", "p01"))
    for phase in (a, b):
        assert priced.runner.claim(phase.id, owner="unit:1:a") is not None
    limits = spend.Limits(usd=10 * WORST)
    for phase in (a, b):
        assert isinstance(spend.reserve(priced.db, plan_id=plan_id, phase_id=phase.id, attempt=1, tenant="default",
                                        tokens=100, cost_usd=WORST, limits=limits), int)
    assert phases.fail_phase(priced.db, plan_id=plan_id, phase_id=b.id, attempt=1, code="x", message="died").status
    priced.expire_lease(a.id)  # a's lease ran out, but nobody took it over: its call may still be running
    priced.coordinator.reconcile()
    assert [(r.phase_id, r.attempt) for r in open_reservations(priced, plan_id)] == [(a.id, 1)]
    assert priced.runner.claim(a.id, owner="unit:2:a") is not None  # taken over: attempt 1 is dead now
    priced.coordinator.reconcile()
    assert open_reservations(priced, plan_id) == []


def test_a_budget_in_dollars_refuses_a_model_without_a_price(priced: Planes) -> None:
    with pytest.raises(InvalidPlan) as caught:
        submit(priced, wide_team(2, budget={"usd": 1.0}, model="free"))
    assert [d["field"] for d in caught.value.details] == ["budget.usd"]
    assert "'free' has no price" in caught.value.message


@pytest.mark.parametrize(("budget", "field"), [
    ({}, "budget"), ({"usd": "5"}, "budget.usd"), ({"usd": 0}, "budget.usd"), ({"usd": True}, "budget.usd"),
    ({"max_tokens": 0}, "budget.max_tokens"), ({"usd": 1, "dollars": 2}, "budget.dollars"),
])
def test_a_wrong_budget_is_refused_naming_the_field(budget: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidPlan) as caught:
        load_plan(wide_team(2, budget=budget))
    assert field in [d["field"] for d in caught.value.details], caught.value.details


def test_tenant_budgets_are_validated_naming_the_variable() -> None:
    assert Settings(tenant_budgets="acme=50, beta=10").tenant_budgets == {"acme": 50.0, "beta": 10.0}
    s = Settings(tenant_budgets='{"acme": 5}', tenant_monthly_usd=2)
    assert (s.tenant_budget("acme"), s.tenant_budget("beta")) == (5.0, 2.0)
    assert Settings().tenant_budget("acme") is None and not Settings().tenant_budgeted
    for wrong, says in [("acme", "not tenant=dollars"), ("acme=x", "'x' is not an amount"),
                        ("acme=-1", "positive"), ("acme=1,acme=2", "given twice"), ("Bad Tenant=1", "Bad Tenant")]:
        with pytest.raises(ValidationError) as caught:
            Settings(tenant_budgets=wrong)
        (line,) = settings_errors(caught.value)
        assert line.startswith("CONCLAVE_TENANT_BUDGETS: ") and says in line, line


def test_a_tenant_whose_month_is_spent_cannot_submit_and_others_can(template_db: Path, directory: Path) -> None:
    planes = Planes.open(template_db, directory, models=priced_registry(directory),
                         tenant_budgets="acme=0.05,beta=0.04")
    try:
        first = submit(planes, wide_team(8, budget=None), tenant="acme")
        planes.run_all()
        rows = planes.usage(first)
        spent = sum(r.cost_usd or 0.0 for r in rows)
        assert spent <= 0.05 and planes.state(first).plan.status == PlanStatus.BUDGET_EXHAUSTED
        assert "tenant 'acme'" in (planes.state(first).plan.error_message or "")
        # the operator pays the month's last call elsewhere: acme's budget is now spent
        p = planes.state(first).phases[0]
        usage.record_usage(planes.db, plan_id=first, phase_id=p.id, attempt=p.attempt, seq=99, purpose="phase",
                           model="offline:priced", input_tokens=0, output_tokens=0, source="provider", method=None,
                           cost_usd=0.05 - spent)
        with pytest.raises(TenantBudgetExhausted) as caught:
            submit(planes, wide_team(1, budget=None), tenant="acme")
        assert caught.value.code == "tenant.budget_exhausted" and caught.value.http_status == 402
        details = caught.value.details
        assert details["tenant"] == "acme" and details["budget_usd"] == 0.05
        assert details["spent_usd"] == pytest.approx(0.05) and len(details["month"]) == 7
        assert plans.running_plan_ids(planes.db) == []  # nothing stored for the refused plan
        other = submit(planes, wide_team(1, budget=None), tenant="beta")  # beta's month is its own
        planes.run_all()
        assert planes.state(other).plan.status == PlanStatus.COMPLETED
    finally:
        planes.close()


def test_a_tenant_with_a_monthly_budget_cannot_run_a_model_without_a_price(template_db: Path,
                                                                             directory: Path) -> None:
    planes = Planes.open(template_db, directory, models=priced_registry(directory), tenant_monthly_usd=10)
    try:
        with pytest.raises(InvalidPlan) as caught:
            submit(planes, wide_team(1, budget=None, model="free"), tenant="acme")
        assert {d["field"] for d in caught.value.details} == {f"experts[{i}].model" for i in range(5)}
        assert "tenant 'acme' has a monthly budget" in caught.value.message
        assert plans.running_plan_ids(planes.db) == []
    finally:
        planes.close()
