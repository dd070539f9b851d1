"""Debates are inserted by the transaction that completes their divergence check, and
only while fewer than ``max_debates`` debate groups are stored — counted from the
stored phases, so a resumed plan cannot exceed the limit."""

from __future__ import annotations

from storage import Database, phases, plans
from storage.records import NewPhase
from tests.integration.repositories.ledger import claim, complete, event_types


def _team(db: Database) -> str:
    plan_id, _ = plans.create_plan(
        db, title="debates", kind="team", spec={"title": "debates"}, task_id=None, max_active=100,
        phases=[NewPhase("check-1", "divergence", 0, []), NewPhase("check-2", "divergence", 1, []),
                NewPhase("synthesis", "synthesis", 2, ["check-1", "check-2"], meta={"terminal": True})])
    return plan_id


def _debate(check: str) -> phases.Insertion:
    group = f"debate-{check}"
    return phases.Insertion(
        phases=[NewPhase(f"{group}.{who}", "debate", 10 + i, [check], expert=who, group_key=group)
                for i, who in enumerate(("Ada", "Bo"))],
        extra_deps={"synthesis": [f"{group}.Ada", f"{group}.Bo"]},
        event={"group": group})


def test_debates_are_inserted_with_the_check_up_to_max_debates(db: Database) -> None:
    plan_id = _team(db)
    for check in ("check-1", "check-2"):
        assert claim(db, plan_id, check, "w1") is not None
        done = complete(db, plan_id, check, 1, '{"diverged": true}', insertion=_debate(check), max_groups=1)
        assert done.status == "completed"

    state = plans.load_state(db, plan_id)
    debates = [p for p in state.phases if p.kind == "debate"]
    assert sorted(p.key for p in debates) == ["debate-check-1.Ada", "debate-check-1.Bo"]
    assert all(p.status == "pending" for p in debates)
    assert state.by_key()["synthesis"].depends_on == ["check-1", "check-2", "debate-check-1.Ada",
                                                      "debate-check-1.Bo"]
    types = event_types(db, plan_id)
    assert types.count("debate_inserted") == 1 and types.count("debate_limit_reached") == 1


def test_a_fenced_check_inserts_no_debate(db: Database) -> None:
    plan_id = _team(db)
    assert claim(db, plan_id, "check-1", "w1") is not None
    done = complete(db, plan_id, "check-1", 2, '{"diverged": true}', insertion=_debate("check-1"), max_groups=1)
    assert done.status == "fenced"
    assert not [p for p in plans.load_state(db, plan_id).phases if p.kind == "debate"]
