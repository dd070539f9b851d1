"""Submission is atomic: a failure while storing any phase leaves no trace of the plan
(no half-stored plan that resume would later find), and the same submission then
succeeds whole. The fault is a real Postgres trigger failing the insert of one phase."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text

from orchestrator.core.errors import ConclaveError
from tests.integration.durability import board_plan


def counts(client: Any) -> dict[str, int]:
    with client.local.db.engine.connect() as c:
        return {t: int(c.execute(text(f"select count(*) from {t}")).scalar() or 0)
                for t in ("plans", "phases", "events", "contents", "usage")}


def test_a_failure_storing_one_phase_stores_nothing(client: Any) -> None:
    name = f"fault_{uuid.uuid4().hex[:8]}"
    with client.local.db.engine.begin() as c:
        c.execute(text(f"""
            CREATE FUNCTION {name}() RETURNS trigger AS $$
            BEGIN
              IF NEW.key = 'r1.summary' THEN RAISE EXCEPTION 'injected fault storing %', NEW.key; END IF;
              RETURN NEW;
            END $$ LANGUAGE plpgsql"""))
        c.execute(text(f"CREATE TRIGGER {name} BEFORE INSERT ON phases FOR EACH ROW EXECUTE FUNCTION {name}()"))
    plan = board_plan(task_id="atomic-1")
    try:
        with pytest.raises(ConclaveError):
            client.submit(plan)
        assert counts(client) == {"plans": 0, "phases": 0, "events": 0, "contents": 0, "usage": 0}
    finally:
        with client.local.db.engine.begin() as c:
            c.execute(text(f"DROP TRIGGER IF EXISTS {name} ON phases"))
            c.execute(text(f"DROP FUNCTION IF EXISTS {name}()"))
    plan_id = client.submit(plan)  # the same task_id is free: nothing of the failed attempt remains
    view = client.get(plan_id)
    assert view.task_id == "atomic-1"
    assert [p.key for p in view.phases] == ["opening", "r1.dana", "r1.ravi", "r1.summary", "final"]
    assert all(p.status in ("pending", "running", "completed") for p in view.phases)


def test_broker_down_at_submit_stores_the_plan_and_the_reconciler_runs_it(settings: Any, workers: Any) -> None:
    from orchestrator.client.conclave import Conclave
    from tests.integration.durability import assert_exactly_once, ledger

    down = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0", "result_backend": None,
                                       "redis_url": None})
    with Conclave(down, worker=False) as offline_client:
        plan_id = offline_client.submit(board_plan(task_id="broker-down"))  # stored, not sent: no error
        stored = ledger(offline_client.local.db, plan_id)
    assert stored.plan.status == "running" and all(p.status == "pending" for p in stored.phases)
    assert all(p.enqueued_at is None for p in stored.phases)  # the failed send released its mark

    workers(beat=True)  # a worker and the reconciler on the real broker
    with Conclave(settings, worker=False) as client:
        view = client.wait(plan_id, timeout=60)
        assert view.status == "completed"
        assert_exactly_once(ledger(client.local.db, plan_id))
