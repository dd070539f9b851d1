"""A budget is what is on record plus what is promised, of this plan (or this tenant's month)
and no other, and a call that brings it exactly to its limit fits while one a unit more does
not: :func:`storage.spend.reserve` against stored usage rows and open reservations of three
plans of two tenants, with amounts a float adds exactly. Survivors of the systematic
mutation run over ``storage/spend.py`` (docs/mutation.md): the fast tier reserved only with
one plan on record, never at the boundary, never beside another plan or tenant, never a call
priced at zero, and never read a refusal's figures. (Racing processes: tests/integration/test_budgets.py.)"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.plan.schema import load_plan
from orchestrator.plan.spending import refusal_message
from storage import locks, spend, tenancy, usage
from storage.identity import Principal
from storage.models import Reservation
from tests.budgets import priced_registry, wide_team
from tests.unit.planes import Planes


@dataclass
class Books:
    """Plans A and B of tenant acme, C of tenant beta; each has a call on record and one in flight."""

    planes: Planes
    a: str
    b: str
    c: str
    phases: dict[str, list[str]]  # plan id -> its phase ids, in plan order

    def reserve(self, plan: str, limits: spend.Limits, *, tokens: int = 1, cost: float | None = 0.0,
                phase: int = 0, attempt: int = 1, tenant: str = "acme") -> int | spend.Refusal:
        return spend.reserve(self.planes.db, plan_id=plan, phase_id=self.phases[plan][phase], attempt=attempt,
                             tenant=tenant, tokens=tokens, cost_usd=cost, limits=limits)

    def held(self) -> list[tuple[str, str, int, int]]:
        """Every open reservation: (plan, phase, attempt, tokens)."""
        with self.planes.db.transaction() as s:
            return sorted((r.plan_id, r.phase_id, r.attempt, r.tokens) for r in s.query(Reservation))


@pytest.fixture()
def books(template_db: Path, fast_dir: Path) -> Iterator[Books]:
    directory = Path(tempfile.mkdtemp(dir=fast_dir))
    planes = Planes.open(template_db, directory, models=priced_registry(directory))
    ids, phases = [], {}
    for tenant in ("acme", "acme", "beta"):
        who = Principal(id="p1", name="tester", tenant=tenant, scopes=("write",))
        plan_id = planes.coordinator.submit(load_plan(wide_team(3, budget=None)), principal=who).plan_id
        ids.append(plan_id)
        phases[plan_id] = [p.id for p in planes.state(plan_id).phases]
    a, b, c = ids
    # (plan, input tokens, output tokens, dollars on record; tokens, dollars held by a call in flight)
    for plan, tokens_in, tokens_out, cost, held_tokens, held_cost in [
        (a, 30, 10, 0.25, 20, 0.125),
        (b, 500, 500, 0.5, 400, 0.0625),
        (c, 1000, 1000, 4.0, 400, 2.0),
    ]:
        usage.record_usage(planes.db, plan_id=plan, phase_id=phases[plan][0], attempt=1, seq=1, purpose="phase",
                           model="offline:priced", input_tokens=tokens_in, output_tokens=tokens_out,
                           source="provider", method=None, cost_usd=cost)
        held = spend.reserve(planes.db, plan_id=plan, phase_id=phases[plan][1], attempt=1,
                             tenant="beta" if plan == c else "acme", tokens=held_tokens, cost_usd=held_cost,
                             limits=spend.Limits(max_tokens=10**9))
        assert isinstance(held, int)
    yield Books(planes, a, b, c, phases)
    planes.close()
    shutil.rmtree(directory, ignore_errors=True)


def test_a_plans_tokens_are_its_rows_and_its_calls_in_flight_and_no_other_plans(books: Books) -> None:
    before = books.held()
    limits = spend.Limits(max_tokens=100)  # A: 40 on record (30 in, 10 out), 20 in flight: 40 left
    refused = books.reserve(books.a, limits, tokens=41, phase=2)
    assert refused == spend.Refusal("max_tokens", spent=40, reserved=20, limit=100, need=41)
    assert refused.remaining == 40
    assert "40 spent, 20 held by calls in flight, 40 left; this call needs up to 41" in refusal_message(refused, "acme")
    assert books.held() == before  # a refusal writes nothing
    assert isinstance(books.reserve(books.a, limits, tokens=40, phase=2), int)  # exactly the limit: it fits
    assert isinstance(books.reserve(books.a, limits, tokens=1, phase=2), spend.Refusal)  # reached: nothing more


def test_a_plan_with_nothing_on_record_can_spend_its_whole_budget(books: Books) -> None:
    fresh = books.planes.coordinator.submit(load_plan(wide_team(1, budget=None))).plan_id
    books.phases[fresh] = [p.id for p in books.planes.state(fresh).phases]
    assert isinstance(books.reserve(fresh, spend.Limits(max_tokens=10, usd=1.0), tokens=10, cost=1.0), int)


def test_a_plans_dollars_are_its_rows_and_its_calls_in_flight(books: Books) -> None:
    limits = spend.Limits(usd=1.0)  # A: $0.25 on record, $0.125 in flight: $0.625 left
    refused = books.reserve(books.a, limits, cost=0.75, phase=2)
    assert refused == spend.Refusal("usd", spent=0.25, reserved=0.125, limit=1.0, need=0.75)
    assert isinstance(books.reserve(books.a, limits, cost=0.625, phase=2), int)  # exactly the limit
    assert isinstance(books.reserve(books.a, limits, cost=0.0, phase=2), int)  # a model priced at zero still fits
    assert isinstance(books.reserve(books.a, limits, cost=0.001, phase=2), spend.Refusal)


def test_a_plan_past_its_budget_refuses_even_a_free_call_saying_it_needs_nothing(books: Books) -> None:
    # a provider may report more than the worst case reserved: A's $0.375 is past a $0.25 budget
    refused = books.reserve(books.a, spend.Limits(usd=0.25), cost=0.0, phase=2)
    assert refused == spend.Refusal("usd", spent=0.25, reserved=0.125, limit=0.25, need=0.0)
    assert refused.remaining == 0.0


def test_a_tenants_month_is_its_plans_rows_and_calls_in_flight_and_no_other_tenants(books: Books) -> None:
    now = datetime.now(UTC)
    limits = spend.Limits(tenant_usd=1.0)  # acme: $0.75 on record (A, B), $0.1875 in flight: $0.0625 left
    refused = spend.reserve(books.planes.db, plan_id=books.a, phase_id=books.phases[books.a][2], attempt=1,
                            tenant="acme", tokens=1, cost_usd=0.125, limits=limits, now=now)
    assert refused == spend.Refusal("tenant", spent=0.75, reserved=0.1875, limit=1.0, need=0.125,
                                    month=tenancy.month_of(now))
    message = refusal_message(refused, "acme")
    said = f"tenant 'acme''s budget of $1.00 for {now:%Y-%m} (UTC) is exhausted: $0.75 spent"
    assert message.startswith(said), message
    assert isinstance(books.reserve(books.a, limits, cost=0.0625, phase=2), int)  # exactly the limit
    assert isinstance(books.reserve(books.b, limits, cost=0.0, phase=2), int)  # priced at zero: still fits
    assert isinstance(books.reserve(books.b, limits, cost=0.001, phase=2), spend.Refusal)  # B shares A's month
    # beta: $4 on record, $2 in flight; acme's calls are not beta's
    assert isinstance(books.reserve(books.c, spend.Limits(tenant_usd=6.5), cost=0.5, phase=2, tenant="beta"), int)


def test_a_tenant_past_its_month_refuses_even_a_free_call(books: Books) -> None:
    # the operator lowered acme's budget below what it spent this month
    refused = books.reserve(books.b, spend.Limits(tenant_usd=0.5), cost=0.0, phase=2)
    assert isinstance(refused, spend.Refusal) and (refused.budget, refused.need) == ("tenant", 0.0)
    assert (refused.spent, refused.reserved, refused.remaining) == (0.75, 0.1875, 0.0)


def test_a_new_attempt_releases_its_own_phases_older_attempts_only(books: Books) -> None:
    a = books.phases[books.a]
    assert isinstance(books.reserve(books.a, spend.Limits(max_tokens=10**9), tokens=7, phase=2, attempt=2), int)
    assert [h for h in books.held() if h[0] == books.a] == sorted([(books.a, a[1], 1, 20), (books.a, a[2], 2, 7)])
    assert isinstance(books.reserve(books.a, spend.Limits(max_tokens=10**9), tokens=9, phase=1, attempt=3), int)
    assert [h for h in books.held() if h[0] == books.a] == sorted([(books.a, a[1], 3, 9), (books.a, a[2], 2, 7)])


def test_a_released_reservation_is_gone_and_no_other(books: Books) -> None:
    held = books.reserve(books.a, spend.Limits(max_tokens=10**9), tokens=7, phase=2)
    assert isinstance(held, int)
    others = [h for h in books.held() if h[3] != 7]
    spend.release(books.planes.db, held)
    assert books.held() == others and len(others) == 3
    spend.release(books.planes.db, held)  # twice: nothing more goes
    assert books.held() == others


def test_the_reconciler_says_how_many_it_released(books: Books) -> None:
    # no phase is running: every reservation belongs to an attempt that no longer runs
    assert spend.release_stale(books.planes.db) == 3
    assert books.held() == []
    assert spend.release_stale(books.planes.db) == 0


def test_a_reservation_records_when_it_was_made(books: Books) -> None:
    then = datetime(2026, 1, 31, 23, 59, tzinfo=UTC)
    held = spend.reserve(books.planes.db, plan_id=books.a, phase_id=books.phases[books.a][2], attempt=1,
                         tenant="acme", tokens=1, cost_usd=0.0, limits=spend.Limits(max_tokens=10**9), now=then)
    with books.planes.db.transaction() as s:
        row = s.get(Reservation, held)
        assert row is not None and row.created_at == then


def test_each_tenant_spends_under_a_lock_of_its_own() -> None:
    keys = {spend.tenant_lock_key(t) for t in ("acme", "beta", "")}
    assert len(keys) == 3  # one tenant's calls never wait on another's
    assert spend.tenant_lock_key("acme") == locks.lock_key("spend:acme") != tenancy.lock_key("acme")
