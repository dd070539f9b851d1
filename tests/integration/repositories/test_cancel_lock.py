"""A cancel and a claim of the same plan at once never deadlock, whichever is first.

Both lock the plan's row (``FOR NO KEY UPDATE``, :data:`storage.sql.base.PLAN_LOCK`) before a
phase row: a cancel takes the plan, then cancels the pending phases; a claim (one statement)
takes the plan in its condition, then its phase row, then inserts its ``phase_started`` event
(whose trigger locks the plan again, a no-op, before it takes the id). A claim that took its
phase row first would hold the phase a cancel waits for while it waits for the plan the cancel
holds, and Postgres would fail one of the two (the API answered 503 ``database unavailable``).

Each order is driven on real statements: a gate holds the first (the claim after its event's
insert, or the cancel before its ``UPDATE phases``) while the second starts, and lets it go
once the second waits.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from storage import Database, connect, plans
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, new_plan
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
