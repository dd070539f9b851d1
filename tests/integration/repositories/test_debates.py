"""Debates are inserted by the transaction that completes their divergence check, and
only while fewer than ``max_debates`` debate groups are stored — counted from the
stored phases of that plan, so a resumed plan cannot exceed the limit."""

from __future__ import annotations

import pytest

from storage import Database, events, phases, plans
from storage.records import NewPhase
from tests.integration.repositories.ledger import claim, complete, event_types, phase

CHECKS = ("check-1", "check-2", "check-3")


def _team(db: Database, title: str = "debates") -> str:
    """Three divergence checks (carrying a group key of their own kind), then the synthesis."""
    plan_id, _ = plans.create_plan(
        db, title=title, kind="team", spec={"title": title}, task_id=None, max_active=100,
        phases=[*(NewPhase(c, "divergence", i, [], group_key="checks") for i, c in enumerate(CHECKS)),
                NewPhase("synthesis", "synthesis", 3, list(CHECKS), meta={"terminal": True})])
    return plan_id


def _debate(check: str) -> phases.Insertion:
    group = f"debate-{check}"
    return phases.Insertion(
        phases=[NewPhase(f"{group}.{who}", "debate", 10 + i, [check], expert=who, round=2, group_key=group,
                         meta={"topic": "pricing"})
                for i, who in enumerate(("Ada", "Bo"))],
        extra_deps={"synthesis": [f"{group}.Ada", f"{group}.Bo"]},
        event={"group": group, "participants": ["Ada", "Bo"]})


def _diverge(db: Database, plan_id: str, check: str, limit: int) -> phases.Finished:
    assert claim(db, plan_id, check, "w1") is not None
    return complete(db, plan_id, check, 1, '{"diverged": true}', insertion=_debate(check), max_groups=limit)


def _debates(db: Database, plan_id: str) -> list[str]:
    return sorted(p.key for p in plans.load_state(db, plan_id).phases if p.kind == "debate")


def test_debates_are_inserted_with_the_check_up_to_max_debates(db: Database) -> None:
    plan_id = _team(db)
    for check in ("check-1", "check-2"):
        assert _diverge(db, plan_id, check, limit=1).status == "completed"

    state = plans.load_state(db, plan_id)
    assert _debates(db, plan_id) == ["debate-check-1.Ada", "debate-check-1.Bo"]
    ada = state.by_key()["debate-check-1.Ada"]
    assert (ada.status, ada.attempt, ada.expert, ada.round, ada.group_key, ada.position) == (
        "pending", 0, "Ada", 2, "debate-check-1", 10)
    assert (ada.depends_on, ada.meta) == (["check-1"], {"topic": "pricing"})
    assert state.by_key()["synthesis"].depends_on == [*CHECKS, "debate-check-1.Ada", "debate-check-1.Bo"]
    inserted = [e.data for e in events.list_events(db, plan_id) if e.type == "debate_inserted"]
    assert inserted == [{"group": "debate-check-1", "participants": ["Ada", "Bo"]}]
    limited = [e.data for e in events.list_events(db, plan_id) if e.type == "debate_limit_reached"]
    assert limited == [{"limit": 1, "existing": 1}]
    again = claim(db, plan_id, "debate-check-1.Ada", "w1")  # a debate runs like any phase: attempt 1
    assert again is not None and again.attempt == 1


@pytest.mark.parametrize("limit", [2, 3])
def test_the_limit_counts_debate_groups_not_phases(db: Database, limit: int) -> None:
    plan_id = _team(db)
    for check in CHECKS:
        _diverge(db, plan_id, check, limit=limit)
    assert len(_debates(db, plan_id)) == 2 * limit
    assert event_types(db, plan_id).count("debate_inserted") == limit


def test_the_limit_counts_this_plans_debates_only(db: Database) -> None:
    busy = _team(db, "a plan that debated")
    _diverge(db, busy, "check-1", limit=1)
    plan_id = _team(db)
    assert _diverge(db, plan_id, "check-1", limit=1).status == "completed"
    assert _debates(db, plan_id) == ["debate-check-1.Ada", "debate-check-1.Bo"]
    for pid in (busy, plan_id):  # each plan's synthesis waits for its own debate
        assert phase(db, pid, "synthesis").depends_on == [*CHECKS, "debate-check-1.Ada", "debate-check-1.Bo"]


def test_a_dependent_that_already_started_is_not_rewired(db: Database) -> None:
    plan_id = _team(db)
    other = _team(db, "another plan")
    assert claim(db, plan_id, "synthesis", "w1") is not None  # (claimed directly: storage does not check inputs)
    _diverge(db, plan_id, "check-1", limit=1)
    assert phase(db, plan_id, "synthesis").depends_on == list(CHECKS)
    assert phase(db, other, "synthesis").depends_on == list(CHECKS)  # and another plan's never


def test_a_fenced_check_inserts_no_debate(db: Database) -> None:
    plan_id = _team(db)
    assert claim(db, plan_id, "check-1", "w1") is not None
    done = complete(db, plan_id, "check-1", 2, '{"diverged": true}', insertion=_debate("check-1"), max_groups=1)
    assert done.status == "fenced"
    assert _debates(db, plan_id) == []
