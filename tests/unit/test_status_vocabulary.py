"""One status vocabulary (``storage.status``), and the values stored rows hold are its
values: rows written as plain strings — by hand, by a migration, or before the enums
existed — read back as members of the vocabulary, and whether each is final is decided
by the vocabulary's final sets, wherever it is asked."""

from __future__ import annotations

from sqlalchemy import text

from orchestrator.plan import dag
from storage.status import PHASE_FINAL, PLAN_FINAL, PhaseStatus, PlanStatus
from tests.unit.planes import Planes
from tests.unit.stored import example

# what the status columns have always held (migration 0001 onwards), and people's statuses (0012): a
# seat waiting for its answer, a plan whose draft waits for approval — neither final
STORED_PHASE = {"pending": False, "running": False, "completed": True, "failed": True, "cancelled": True,
                "skipped": True, "awaiting_input": False}
STORED_PLAN = {"running": False, "completed": True, "failed": True, "cancelled": True, "budget_exhausted": True,
               "awaiting_approval": False}


def test_the_vocabulary_is_what_the_rows_hold() -> None:
    assert {s.value: s.final for s in PhaseStatus} == STORED_PHASE
    assert {s.value: s.final for s in PlanStatus} == STORED_PLAN
    assert {PhaseStatus(v) for v, final in STORED_PHASE.items() if final} == PHASE_FINAL
    assert {PlanStatus(v) for v, final in STORED_PLAN.items() if final} == PLAN_FINAL


def test_rows_stored_as_plain_strings_read_back_as_the_vocabulary(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example("board", rounds=1)).plan_id  # 7 phases
    keys = list(planes.statuses(plan_id))
    written = dict(zip(keys, list(STORED_PHASE), strict=True))
    with planes.db.transaction() as s:  # as an older version, or an operator, wrote them
        for key, value in written.items():
            s.execute(text("UPDATE phases SET status = :v WHERE plan_id = :p AND key = :k"),
                      {"v": value, "p": plan_id, "k": key})
    state = planes.state(plan_id)
    assert {p.key: (p.status, p.final) for p in state.phases} == {
        k: (PhaseStatus(v), STORED_PHASE[v]) for k, v in written.items()}
    assert all(type(p.status) is PhaseStatus for p in state.phases)
    # the control plane's decisions read the same vocabulary: with every phase final, the plan has an outcome
    with planes.db.transaction() as s:
        s.execute(text("UPDATE phases SET status = 'skipped' WHERE plan_id = :p "
                       "AND status IN ('pending', 'running', 'awaiting_input')"), {"p": plan_id})
    assert dag.outcome(planes.state(plan_id).plan, planes.state(plan_id).phases) is not None

    for value, final in STORED_PLAN.items():
        with planes.db.transaction() as s:
            s.execute(text("UPDATE plans SET status = :v WHERE id = :p"), {"v": value, "p": plan_id})
        plan = planes.state(plan_id).plan
        assert (plan.status, plan.final, type(plan.status)) == (PlanStatus(value), final, PlanStatus)
