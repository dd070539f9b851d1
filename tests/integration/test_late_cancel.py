"""Never a success after a cancel, at the last moment: the final phase has completed, the
coordinator has read the plan (every phase done, no cancel) and is about to mark it
completed — and a cancel lands in between. The plan ends ``cancelled``; the cancel says
so; one ``plan_finished`` is recorded, and it says cancelled.

Driven deterministically on Postgres: the finishing coordinator's database sessions carry
their own ``application_name``, and a statement-level ``BEFORE UPDATE ON plans`` trigger
holds that session's finishing write (``UPDATE plans SET … finished_at …``) on an advisory
lock the test holds — before the statement locks any row — until the cancel has returned
(as :mod:`tests.integration.test_durability_fence` gates a completion).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus
from storage import Database, connect, outbox, plans
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, complete, new_plan
from tests.statement_gate import StatementGate, statement_gate


@pytest.fixture()
def pg(clean_db: str) -> Iterator[Database]:
    database = connect(clean_db, pool_size=4)
    yield database
    database.dispose()


@pytest.fixture()
def gate(pg: Database) -> Iterator[StatementGate]:
    """Holds the plan-finishing ``UPDATE plans`` of the coordinator's session."""
    with statement_gate(pg, name="finish-gate", event="UPDATE", query_like="UPDATE plans SET%finished_at%") as held:
        yield held


def _coordinator(db: Database, settings: Any) -> Coordinator:
    return Coordinator(db, settings, RecordingDispatcher(), MemoryBus())


def test_a_cancel_between_the_last_completion_and_the_finish_ends_cancelled(
        pg: Database, gate: StatementGate, settings: Any) -> None:
    plan_id = new_plan(pg, "late cancel")
    for key in ("opening", "final"):
        claimed = claim(pg, plan_id, key, "w1")
        assert claimed is not None
        assert complete(pg, plan_id, key, claimed.phase.attempt, f"text of {key}").status == "completed"
    assert plans.get_plan(pg, plan_id).status == "running"  # every phase done; the plan not yet marked

    finishing_db = connect(gate.url(settings.database_url), pool_size=2)
    finisher = _coordinator(finishing_db, settings)
    errors: list[BaseException] = []

    def advance() -> None:  # what the worker's chord body does once the final phase completed
        try:
            finisher.advance(plan_id)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=advance)
    try:
        thread.start()
        wait_for(gate.waiting, 30, interval=0.02, what="the finishing write to wait at the gate")
        assert plans.get_plan(pg, plan_id).status == "running"

        result = _coordinator(pg, settings).cancel(plan_id)  # lands between the two writes

        gate.open()
        thread.join(30)
        assert not thread.is_alive() and errors == []
    finally:
        gate.open()
        thread.join(30)
        finishing_db.dispose()

    _coordinator(pg, settings).advance(plan_id)  # a later nudge changes nothing
    plan = plans.get_plan(pg, plan_id)
    assert (plan.status, plan.cancel_requested, plan.error_code) == ("cancelled", True, "plan.cancelled")
    assert result.status == "cancelled"  # what the caller was told
    finished = [e.data for e in outbox.list_events(pg, plan_id) if e.type == "plan_finished"]
    assert len(finished) == 1 and finished[0]["status"] == "cancelled", finished
