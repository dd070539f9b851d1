"""Every write of a plan locks the plan's row before a phase row, so two writes of one plan
never wait on each other in opposite orders — which Postgres breaks by failing one of them
(the API answered 503 ``database unavailable``; a worker's write failed).

The plan's row is locked ``FOR NO KEY UPDATE`` (:data:`storage.sql.base.PLAN_LOCK`): a cancel
takes it, then cancels the pending phases; a claim (one statement) takes it in its condition,
then its phase row, then inserts its ``phase_started`` event (whose trigger locks the plan
again, a no-op, before it takes the id); an advance marking phases enqueued takes it in its
``UPDATE phases``' condition, before the rows. A claim that took its phase row first would hold
the phase a cancel waits for while it waits for the plan the cancel holds; an advance that
marked its phases first would hold the phase a claim waits for while it waits for the plan the
claim holds.

Each order is driven on real statements: a gate holds the first write (the claim after its
event's insert, the cancel before its ``UPDATE phases``, the advance before its ``UPDATE
plans``) while the second starts, and lets it go once the second waits.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from storage import Database, connect, phases, plans
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, new_plan, phase
from tests.statement_gate import StatementGate, statement_gate


def _waits_for_a_lock(db: Database, app: str) -> bool:
    with db.engine.connect() as c:
        return bool(c.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = :app AND wait_event_type = 'Lock'"), {"app": app}).scalar())


def _race(pg: Database, url: str, gate: StatementGate, first: Callable[[Database], Any],
          second: Callable[[Database], Any]) -> dict[str, Any]:
    """``first`` through the gate's session, held; ``second`` once it is; the gate opened
    once ``second`` waits for a lock (or has finished). What each returned or raised."""
    app = f"second-{uuid.uuid4().hex[:8]}"
    held = connect(gate.url(url), pool_size=2)
    other = connect(f"{url}{'&' if '?' in url else '?'}application_name={app}", pool_size=2)
    outcome: dict[str, Any] = {}

    def run(name: str, call: Callable[[Database], Any], via: Database) -> threading.Thread:
        def target() -> None:
            try:
                outcome[name] = call(via)
            except Exception as exc:  # asserted by the caller
                outcome[f"{name} error"] = exc
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        return thread

    threads = [run("first", first, held)]
    try:
        wait_for(gate.waiting, 30, interval=0.02, what="the first to wait at the gate")
        threads.append(run("second", second, other))
        wait_for(lambda: not threads[1].is_alive() or _waits_for_a_lock(pg, app), 30, interval=0.02,
                 what="the second to wait for the first")
        gate.open()
        for thread in threads:
            thread.join(30)
        assert not any(t.is_alive() for t in threads)
    finally:
        gate.open()
        for thread in threads:
            thread.join(30)
        held.dispose()
        other.dispose()
    return outcome


def test_a_cancel_landing_while_a_claim_commits_waits_for_it(pg: Database, clean_db: str) -> None:
    plan_id = new_plan(pg)
    with statement_gate(pg, name="claim-gate", event="INSERT", table="events", when="AFTER") as gate:
        outcome = _race(pg, clean_db, gate, lambda via: claim(via, plan_id, "opening", "w1"),
                        lambda via: plans.request_cancel(via, plan_id).keys)
    assert "first error" not in outcome and "second error" not in outcome, outcome
    assert outcome["first"] is not None  # the claim took its phase; the cancel left it running
    assert outcome["second"] == ["final"]
    state = plans.load_state(pg, plan_id)
    assert state.plan.cancel_requested
    assert {p.key: p.status for p in state.phases} == {"opening": "running", "final": "cancelled"}


def test_a_claim_landing_while_a_cancel_commits_waits_for_it_and_takes_nothing(pg: Database, clean_db: str) -> None:
    plan_id = new_plan(pg)
    with statement_gate(pg, name="cancel-gate", event="UPDATE", table="phases", query_like="UPDATE phases%") as gate:
        outcome = _race(pg, clean_db, gate, lambda via: plans.request_cancel(via, plan_id).keys,
                        lambda via: claim(via, plan_id, "opening", "w1"))
    assert "first error" not in outcome and "second error" not in outcome, outcome
    assert sorted(outcome["first"]) == ["final", "opening"]
    assert outcome["second"] is None  # it saw the cancel once the plan's row was its
    state = plans.load_state(pg, plan_id)
    assert state.plan.cancel_requested and {p.status for p in state.phases} == {"cancelled"}


def test_a_claim_landing_while_an_advance_marks_its_phase_waits_for_it(pg: Database, clean_db: str) -> None:
    plan_id = new_plan(pg)
    opening = phase(pg, plan_id, "opening").id
    with statement_gate(pg, name="mark-gate", event="UPDATE", table="plans",
                        query_like="UPDATE plans SET updated_at%") as gate:
        outcome = _race(pg, clean_db, gate, lambda via: phases.mark_enqueued(via, [opening], stale_before=None),
                        lambda via: claim(via, plan_id, "opening", "w1"))
    assert "first error" not in outcome and "second error" not in outcome, outcome
    assert outcome["first"] == [opening]
    assert outcome["second"] is not None and outcome["second"].phase.status == "running"
