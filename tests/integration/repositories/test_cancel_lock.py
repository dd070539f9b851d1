"""A cancel and a claim of the same plan at once never deadlock (Postgres row locks across
two connections, ordered by hand so the interleaving is the one that used to deadlock).

A claim is one statement: it takes its phase row, then inserts its ``phase_started`` event,
whose foreign key takes a KEY SHARE lock on the plan row. A cancel takes the plan row, then
cancels the pending phases. With the plan locked ``FOR UPDATE`` the two waited on each other
and Postgres failed one (the API answered 503 ``database unavailable``); the plan row is
locked ``FOR NO KEY UPDATE`` (:data:`storage.plans.PLAN_LOCK`), which a foreign-key check
does not wait for."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import text

from storage import Database, plans
from tests.integration.repositories.ledger import new_plan


def test_a_cancel_racing_a_claims_event_insert_does_not_deadlock(pg: Database) -> None:
    plan_id = new_plan(pg)
    outcome: dict[str, Any] = {}
    with pg.engine.connect() as claim:
        claim.execute(text("SET lock_timeout = '20s'"))
        # the claim's first half: the phase row (pending, as a claim finds it)
        claim.execute(text("UPDATE phases SET enqueued_at = now() WHERE plan_id = :p AND key = 'final'"),
                      {"p": plan_id})

        def cancel() -> None:
            try:
                outcome["cancelled"] = plans.request_cancel(pg, plan_id).keys
            except Exception as exc:  # the outcome is asserted below
                outcome["error"] = exc

        canceller = threading.Thread(target=cancel)
        canceller.start()
        deadline = time.monotonic() + 10  # the cancel holds the plan row and waits for the phase row
        while time.monotonic() < deadline and not claim.execute(text(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE NOT l.granted AND a.datname = current_database()")).scalar():
            time.sleep(0.05)
        # the claim's second half: its event, whose foreign key checks the plan row
        claim.execute(text("INSERT INTO events (plan_id, phase_key, type, data, created_at) "
                           "VALUES (:p, 'final', 'phase_started', '{}', now())"), {"p": plan_id})
        claim.commit()
        canceller.join(timeout=30)
    assert "error" not in outcome, outcome.get("error")
    assert sorted(outcome["cancelled"]) == ["final", "opening"]
    state = plans.load_state(pg, plan_id)
    assert state.plan.cancel_requested and {p.status for p in state.phases} == {"cancelled"}
