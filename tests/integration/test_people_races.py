"""People's races on Postgres, put in a chosen order where it matters:

- a seat's deadline fires exactly once however many sweepers race: two sweepers (two
  coordinators, each its own connection pool, as two workers are) released together over many
  plans; and, deterministically, one sweeper held at its first write (a gate on its plan-row
  lock, ``tests/statement_gate.py``) while the other ends every seat — the held one then ends none;
- an approval racing a cancel: whichever takes the plan row first wins, the other is refused or
  finds the plan final — never both. The winner is held at the gate between its lock and its write,
  so the loser demonstrably waits on the row lock (seen in ``pg_stat_activity``) before it runs.

The plans are driven in this process (the phase runner on the test database), so no worker
process is needed: only the database decides.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import NotAwaitingApproval
from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.plan import dag
from storage import contents, outbox, plans
from storage.status import PhaseStatus, PlanStatus
from tasks.lease import Lease
from tasks.runner import PhaseRunner
from tests.integration.durability import wait_for
from tests.statement_gate import statement_gate

QUESTION = "Should Ledgerly move to usage-based pricing next quarter?"
LOCK = "UPDATE plans SET updated_at%RETURNING plans.cancel_requested%"  # a finishing write's plan-row lock


def seat_first(n: int, missing_expert: str = "fatal") -> dict[str, Any]:
    """A team whose first phase is a person's seat (asked at submit), then a model's synthesis."""
    return {"kind": "team", "title": f"seat {n}", "task_id": f"seat-{n}", "question": QUESTION,
            "divergence": "off", "missing_expert": missing_expert,
            "experts": [{"name": "You", "role": "Founder", "human": True, "respond_within": "1h"},
                        {"name": "Lead", "role": "Lead expert"}],
            "phases": [{"id": "ask", "expert": "You", "prompt": "Say what you think."}],
            "synthesis": {"expert": "Lead"},
            "models": {"default": {"provider": "offline", "options": {"words": 20}}}}


def approved_board(task_id: str) -> dict[str, Any]:
    return {"kind": "board", "title": task_id, "task_id": task_id, "question": QUESTION, "rounds": 1,
            "moderator": {"name": "Morgan", "role": "Chair of the board"},
            "experts": [{"name": "Dana", "role": "Chief Financial Officer"}], "final": {"approve": True},
            "models": {"default": {"provider": "offline", "options": {"words": 20}}}}


def other(settings: Any, app: str) -> Conclave:
    """Another process's client: its own pool, its sessions named ``app``."""
    return Conclave(settings.model_copy(update={"database_url": f"{settings.database_url}?application_name={app}"}),
                    worker=False)


def run_to_the_end(client: Any, settings: Any, plan_id: str) -> None:
    """Run the plan's phases here, as a worker would, until nothing more can run."""
    runner = PhaseRunner(client.local.db, settings, client.local.bus, {"offline": OfflineProvider()})
    for _ in range(50):  # a phase the claim keeps refusing must fail the test, not hang it
        state = plans.load_state(client.local.db, plan_id)
        ready = [p for p in dag.ready(state.phases) if not p.human]
        if not ready:
            client.local.coordinator.advance(plan_id)
            return
        for p in ready:
            work = runner.claim(p.id, owner="test:1:runner", plan_id=plan_id)
            if work is not None:
                runner.execute(work, Lease(p.id, work.attempt))
    raise AssertionError(f"plan {plan_id}: ready phases were never claimed")


def failed_events(client: Any, plan_id: str) -> list[Any]:
    return [e for e in outbox.list_events(client.local.db, plan_id)
            if e.type == "phase_failed" and e.data["error_code"] == "input.timed_out"]


@pytest.fixture()
def sweepers(settings: Any) -> Iterator[tuple[Conclave, Conclave]]:
    a, b = other(settings, "sweeper-a"), other(settings, "sweeper-b")
    yield a, b
    a.close()
    b.close()


def test_two_sweepers_racing_end_each_seat_once(client: Any, settings: Any,
                                                sweepers: tuple[Conclave, Conclave]) -> None:
    ids = [client.submit(seat_first(n)) for n in range(8)]
    due = max(plans.load_state(client.local.db, i).by_key()["ask"].due_at for i in ids)  # type: ignore[type-var]
    assert due is not None
    start = threading.Barrier(2)

    def sweep(c: Conclave) -> dict[str, list[str]]:
        start.wait(10)
        return c.local.coordinator.expire_deadlines(now=due + timedelta(seconds=1))

    with ThreadPoolExecutor(2) as pool:
        ended = [f.result(60) for f in [pool.submit(sweep, c) for c in sweepers]]
    assert not set(ended[0]) & set(ended[1])  # no plan's seat was ended by both
    assert set(ended[0]) | set(ended[1]) == set(ids)
    for plan_id in ids:
        assert len(failed_events(client, plan_id)) == 1
        state = plans.load_state(client.local.db, plan_id)
        assert state.by_key()["ask"].status == PhaseStatus.FAILED
        assert state.plan.status == PlanStatus.FAILED  # missing_expert: fatal


def test_a_tolerant_team_claims_past_an_absent_seat_on_postgres(client: Any, settings: Any) -> None:
    """The claim's readiness (SQL) agrees with the coordinator's: a seat ended unanswered under
    ``missing_expert: tolerate`` lets the synthesis be claimed, and the plan completes."""
    plan_id = client.submit(seat_first(99, missing_expert="tolerate"))
    due = plans.load_state(client.local.db, plan_id).by_key()["ask"].due_at
    assert due is not None
    assert client.local.coordinator.expire_deadlines(now=due + timedelta(seconds=1)) == {plan_id: ["ask"]}
    run_to_the_end(client, settings, plan_id)
    state = plans.load_state(client.local.db, plan_id)
    assert state.by_key()["synthesis"].status == PhaseStatus.COMPLETED
    assert state.plan.status == PlanStatus.COMPLETED
    assert "You did not answer in time" in (contents.read_text(client.local.db, plan_id, "synthesis") or "")


def test_a_sweeper_held_at_its_lock_ends_nothing_another_sweeper_ended(client: Any, settings: Any) -> None:
    ids = [client.submit(seat_first(n)) for n in range(3)]
    due = plans.load_state(client.local.db, ids[-1]).by_key()["ask"].due_at
    assert due is not None
    late = due + timedelta(seconds=1)
    with statement_gate(client.local.db, name="held-sweeper", event="UPDATE", query_like=LOCK) as gate:
        held = Conclave(settings.model_copy(update={"database_url": gate.url(settings.database_url)}), worker=False)
        quick = other(settings, "quick-sweeper")
        try:
            with ThreadPoolExecutor(1) as pool:
                first = pool.submit(held.local.coordinator.expire_deadlines, now=late)
                wait_for(gate.waiting, 30, interval=0.05, what="the held sweeper at its first plan's lock")
                assert quick.local.coordinator.expire_deadlines(now=late) == {i: ["ask"] for i in ids}
                gate.open()
                assert first.result(60) == {}  # every seat it had found was ended meanwhile
        finally:
            held.close()
            quick.close()
    assert [len(failed_events(client, i)) for i in ids] == [1, 1, 1]


def waiting_on_the_row(client: Any, app: str) -> bool:
    with client.local.db.engine.connect() as c:
        return bool(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND application_name = :app AND wait_event_type = 'Lock' "
                                   "AND wait_event <> 'advisory'"), {"app": app}).scalar())


def plan_events(client: Any, plan_id: str) -> list[str]:
    return [e.type for e in outbox.list_events(client.local.db, plan_id)]


@pytest.mark.parametrize("first", ["approve", "cancel"])
def test_an_approval_racing_a_cancel_is_won_by_one_never_both(client: Any, settings: Any, first: str) -> None:
    plan_id = client.submit(approved_board(f"race-{first}"))
    run_to_the_end(client, settings, plan_id)
    assert plans.get_plan(client.local.db, plan_id).status == PlanStatus.AWAITING_APPROVAL
    second = "cancel" if first == "approve" else "approve"
    # the winner's write to the plan row (after it locked the row) is held at the gate
    with statement_gate(client.local.db, name=f"{first}-first", event="UPDATE",
                        query_like="UPDATE plans SET%status=%") as gate:
        winner = Conclave(settings.model_copy(update={"database_url": gate.url(settings.database_url)}), worker=False)
        loser = other(settings, f"{second}-second")
        try:
            with ThreadPoolExecutor(2) as pool:
                won = pool.submit(getattr(winner, first), plan_id)
                wait_for(gate.waiting, 30, interval=0.05, what=f"the {first} held between its lock and its write")
                lost = pool.submit(getattr(loser, second), plan_id)
                wait_for(lambda: waiting_on_the_row(client, f"{second}-second"), 30, interval=0.05,
                         what=f"the {second} waiting for the plan row")
                gate.open()
                won_result = won.result(60)
                if second == "approve":
                    with pytest.raises(NotAwaitingApproval, match="was cancelled"):
                        lost.result(60)
                else:
                    cancelled = lost.result(60)
                    assert cancelled.status == PlanStatus.COMPLETED and cancelled.cancelled == []
        finally:
            winner.close()
            loser.close()
    plan = plans.get_plan(client.local.db, plan_id)
    kinds = plan_events(client, plan_id)
    finished = [e.data["status"] for e in outbox.list_events(client.local.db, plan_id) if e.type == "plan_finished"]
    if first == "approve":
        assert won_result.status == PlanStatus.COMPLETED
        assert plan.status == PlanStatus.COMPLETED and not plan.cancel_requested
        assert "approved" in kinds and "cancel_requested" not in kinds and finished == ["completed"]
    else:
        assert won_result.status == PlanStatus.CANCELLED
        assert plan.status == PlanStatus.CANCELLED
        assert "approved" not in kinds and "cancel_requested" in kinds and finished == ["cancelled"]
