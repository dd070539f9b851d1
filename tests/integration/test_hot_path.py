"""The hot path on Postgres: one statement to claim, one for the usage row, three to complete
(plan lock, the folded write, COMMIT) — in a 5-phase board as in a 200-phase team — and the
events the folded statements store are exactly what their builders make.

The control plane and the phase runner run in this process against the test Postgres
(a RecordingDispatcher instead of the broker, the in-memory bus), the way the unit tier
runs them over SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus
from orchestrator.core.settings import Settings
from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.plan.canvas import Advance, Chain, Run, Step
from storage import connect, contents, event_shapes, outbox, plans
from storage.status import Outcome
from tasks.lease import Lease
from tasks.runner import PhaseRunner
from tests.integration.durability import board_plan
from tests.sqlcount import StatementCounter
from tests.unit.test_statements import big_team

CLAIM, USAGE, COMPLETE = "storage.phases.claim_phase", "storage.usage.record_usage", "storage.phases.complete_phase"


class InProcess:
    def __init__(self, url: str) -> None:
        self.settings = Settings(database_url=url, offline_latency=0.0)
        self.db = connect(url)
        self.dispatcher = RecordingDispatcher()
        self.coordinator = Coordinator(self.db, self.settings, self.dispatcher, MemoryBus())
        self.runner = PhaseRunner(self.db, self.settings, MemoryBus(), {"offline": OfflineProvider()})

    def deliver(self, plan_id: str, key: str, phase_id: str | None = None) -> Outcome | None:
        phase_id = phase_id or plans.load_state(self.db, plan_id).by_key()[key].id
        work = self.runner.claim(phase_id, owner="it:1:hot", plan_id=plan_id)
        return None if work is None else self.runner.execute(work, Lease(phase_id, work.attempt))

    def run(self, plan_id: str, step: Step) -> None:
        if isinstance(step, Run):
            work = self.runner.claim(step.phase_id, owner="it:1:hot", plan_id=plan_id)
            if work is not None:
                self.runner.execute(work, Lease(step.phase_id, work.attempt))
        elif isinstance(step, Advance):
            self.coordinator.advance(plan_id)
        else:
            for s in step.steps if isinstance(step, Chain) else step.lanes:
                self.run(plan_id, s)

    def cost(self, plan_id: str, key: str) -> dict[str, Any]:
        phase_id = plans.load_state(self.db, plan_id).by_key()[key].id
        counter = StatementCounter().attach(self.db.engine)
        try:
            assert self.deliver(plan_id, key, phase_id) == Outcome.COMPLETED
            return counter.snapshot()
        finally:
            counter.detach()


@pytest.fixture()
def hot(clean_db: str) -> Iterator[InProcess]:
    h = InProcess(clean_db)
    yield h
    h.db.dispose()


def test_claim_usage_and_completion_are_1_1_and_3_statements_in_any_plan(hot: InProcess) -> None:
    board = hot.coordinator.submit(board_plan("hot path", experts=2)).plan_id
    team = hot.coordinator.submit(big_team()).plan_id
    hot.deliver(board, "opening")
    hot.deliver(team, "l0-0")  # the first claim of each plan reads its spec, once per process
    for step in range(1, 19):
        hot.deliver(team, f"l0-{step}")
    small, deep = hot.cost(board, "r1.dana"), hot.cost(team, "l0-19")  # 1 input; 19, in a plan of 200
    for cost in (small, deep):
        assert cost["statements"] == {CLAIM: 1, USAGE: 1, COMPLETE: 3}  # lock, the folded write, COMMIT
        assert cost["begins"] == {COMPLETE: 1}  # the only transaction: claim and usage run in autocommit


def test_a_briefed_phase_costs_one_read_more_in_autocommit(hot: InProcess) -> None:
    memo = "# Pricing\n\n## Risks\n\nHeavy users would pay three times more.\n\n## Margin\n\nMargins rise 4%.\n"
    plan_id = hot.coordinator.submit(board_plan("briefed", plan={"briefing": [{"title": "Pricing memo",
                                                                              "text": memo}]})).plan_id
    hot.deliver(plan_id, "opening")
    cost = hot.cost(plan_id, "r1.dana")
    assert "[pricing-memo:" in (contents.read_text(hot.db, plan_id, "r1.dana") or "")
    # the search tiers, the inputs' cited passages and the fallback: one SELECT, no transaction
    assert cost["statements"] == {CLAIM: 1, USAGE: 1, COMPLETE: 3, "storage.briefings.candidates": 1}
    assert cost["begins"] == {COMPLETE: 1}


def test_the_folded_statements_store_what_the_event_builders_make(hot: InProcess) -> None:
    plan_id = hot.coordinator.submit(board_plan("events", experts=2)).plan_id
    for canvas in hot.dispatcher.take():
        hot.run(plan_id, canvas.root)
    state = plans.load_state(hot.db, plan_id)
    assert state.plan.status == "completed"
    stored = outbox.list_events(hot.db, plan_id)
    for phase in state.phases:
        started = next(e for e in stored if e.type == "phase_started" and e.phase_key == phase.key)
        d = started.data
        expected = event_shapes.phase_started(phase, attempt=1, worker="it:1:hot", k=d["k"], n=5)
        assert (started.type, started.phase_key, started.data) == (expected.type, expected.phase_key, expected.data)
        assert list(started.data) == list(expected.data)  # the builder's keys, in its order
        done = next(e for e in stored if e.type == "phase_completed" and e.phase_key == phase.key)
        d = done.data
        expected = event_shapes.phase_completed(phase, attempt=1, chars=d["chars"], truncated=False, fallback=False,
                                            offloaded=d["offloaded"], summary=phase.summary or "", k=d["k"], n=5)
        assert (done.type, done.phase_key, done.data) == (expected.type, expected.phase_key, expected.data)
        assert list(done.data) == list(expected.data)
    # progress is exact: every completion reports a different k, the last one all of them
    assert sorted(e.data["k"] for e in stored if e.type == "phase_completed") == [1, 2, 3, 4, 5]


RESERVE = "storage.spend.reserve"


def test_a_budgeted_call_adds_one_reservation_and_its_usage_row_settles_it(hot: InProcess) -> None:
    """Under a budget a call pays one short transaction before it (lock the plan row, release
    what older attempts of the phase hold, sum rows and reservations in one SELECT, insert);
    settling is the usage row's own statement. Without one, nothing is added (above)."""
    plan_id = hot.coordinator.submit(board_plan("budgeted", plan={"budget": {"max_tokens": 10_000_000}})).plan_id
    hot.deliver(plan_id, "opening")
    cost = hot.cost(plan_id, "r1.dana")
    assert cost["statements"] == {CLAIM: 1, RESERVE: 5, USAGE: 1, COMPLETE: 3}
    assert cost["begins"] == {RESERVE: 1, COMPLETE: 1}


def test_a_tenant_budget_for_other_tenants_costs_a_plan_nothing(clean_db: str) -> None:
    """Tenant budgets configured, none for this plan's tenant: its tenant is read once per
    process and plan, and its calls pay no statement for it."""
    h = InProcess(clean_db)
    try:
        h.settings = h.runner.settings = h.settings.model_copy(update={"tenant_budgets": {"acme": 5.0}})
        plan_id = h.coordinator.submit(board_plan("other tenants' budgets", experts=2)).plan_id
        h.deliver(plan_id, "opening")  # reads the plan's tenant, once
        assert h.cost(plan_id, "r1.dana")["statements"] == {CLAIM: 1, USAGE: 1, COMPLETE: 3}
    finally:
        h.db.dispose()
