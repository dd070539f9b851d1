"""Through the coordinator — what every API route and the CLI call: a principal finds,
cancels and resumes only its own tenant's plans (another tenant's plan is "not found",
by plan id and by task id, and is left untouched), an admin and the operator find every
tenant's; and submit, cancel and resume record who asked on the plan's events."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.errors import PlanNotFound
from storage import outbox, plans
from storage.identity import ADMIN, READ, WRITE, Principal
from tests.integration.durability import board_plan

ACME = Principal("a1a1a1a1a1a1a1a1", "acme ci", "acme", (READ, WRITE))
GLOBEX = Principal("b2b2b2b2b2b2b2b2", "globex ci", "globex", (READ, WRITE))
OPS = Principal("c3c3c3c3c3c3c3c3", "ops", "default", (ADMIN,))
AUDITED = ("plan_submitted", "cancel_requested", "resume_requested")


def audit(db: Any, plan_id: str) -> list[tuple[str, Any]]:
    """(event type, who) of the plan's audited events, in order."""
    return [(e.type, e.data.get("principal") if e.type == "plan_submitted" else e.data.get("actor"))
            for e in outbox.list_events(db, plan_id) if e.type in AUDITED]


def test_a_principal_finds_cancels_and_resumes_only_its_tenants_plans(client: Any) -> None:
    co, reads = client.local.coordinator, client.local.reads
    mine = co.submit(board_plan("acme's", task_id="crm:9"), principal=ACME).plan_id
    for ref in (mine, "crm:9"):
        assert reads.state(ref, principal=ACME).plan.id == mine
        for action in (reads.state, reads.view, co.cancel, co.resume):
            with pytest.raises(PlanNotFound):
                action(ref, principal=GLOBEX)
        assert reads.state(ref, principal=OPS).plan.id == mine  # an admin sees every tenant
        assert reads.state(ref).plan.id == mine  # so does the operator
    stored = plans.get_plan(client.local.db, mine)
    assert (stored.tenant, stored.cancel_requested, stored.status) == ("acme", False, "running")
    assert audit(client.local.db, mine) == [("plan_submitted", ACME.audit())]  # globex's attempts left no trace


def test_submit_cancel_and_resume_record_who_asked(client: Any) -> None:
    co = client.local.coordinator
    pid = co.submit(board_plan("audited"), principal=ACME).plan_id
    co.resume(pid, principal=OPS)
    co.cancel(pid, principal=ACME)
    assert audit(client.local.db, pid) == [("plan_submitted", ACME.audit()), ("resume_requested", OPS.audit()),
                                           ("cancel_requested", ACME.audit())]
    operators = co.submit(board_plan("the operator's")).plan_id
    co.cancel(operators)
    assert audit(client.local.db, operators) == [("plan_submitted", None), ("cancel_requested", None)]
