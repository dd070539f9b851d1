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
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus
from storage import Database, connect, outbox, plans
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, complete, new_plan


class FinishGate:
    """Holds the plan-finishing ``UPDATE plans`` of the sessions named :attr:`app` until :meth:`open`."""

    def __init__(self, db: Database) -> None:
        tag = uuid.uuid4().hex[:8]
        self.app = f"finish-gate-{tag}"
        self.key = int(tag, 16)
        self._trigger = f"finish_gate_{tag}"
        self._db = db
        with db.engine.begin() as c:
            c.execute(text(f"""
                CREATE FUNCTION {self._trigger}() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF current_setting('application_name') = '{self.app}'
                       AND current_query() ILIKE 'UPDATE plans SET%finished_at%' THEN
                        PERFORM pg_advisory_lock({self.key});
                        PERFORM pg_advisory_unlock({self.key});
                    END IF;
                    RETURN NULL;
                END $$"""))
            c.execute(text(f"CREATE TRIGGER {self._trigger} BEFORE UPDATE ON plans "
                           f"FOR EACH STATEMENT EXECUTE FUNCTION {self._trigger}()"))
        self._holder = db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._holder.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self.key})

    def url(self, database_url: str) -> str:
        return f"{database_url}{'&' if '?' in database_url else '?'}application_name={self.app}"

    def waiting(self) -> bool:
        with self._db.engine.connect() as c:
            return bool(c.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = :app AND wait_event_type = 'Lock' AND wait_event = 'advisory'"),
                {"app": self.app}).scalar())

    def open(self) -> None:
        if not self._holder.closed:
            self._holder.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            self._holder.close()

    def remove(self) -> None:
        self.open()
        with self._db.engine.begin() as c:
            c.execute(text(f"DROP TRIGGER IF EXISTS {self._trigger} ON plans"))
            c.execute(text(f"DROP FUNCTION IF EXISTS {self._trigger}()"))


@pytest.fixture()
def pg(clean_db: str) -> Iterator[Database]:
    database = connect(clean_db, pool_size=4)
    yield database
    database.dispose()


@pytest.fixture()
def gate(pg: Database) -> Iterator[FinishGate]:
    held = FinishGate(pg)
    try:
        yield held
    finally:
        held.remove()


def _coordinator(db: Database, settings: Any) -> Coordinator:
    return Coordinator(db, settings, RecordingDispatcher(), MemoryBus())


def test_a_cancel_between_the_last_completion_and_the_finish_ends_cancelled(
        pg: Database, gate: FinishGate, settings: Any) -> None:
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
