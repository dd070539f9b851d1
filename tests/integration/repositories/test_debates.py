"""Debates are inserted by the transaction that completes their divergence check, under
the plan's row lock, and only while fewer than the plan's ``max_debates`` debate groups
are stored — counted from the stored phases of that plan, so a resumed plan cannot exceed
the limit. The phases that waited for the check are rewired in storage: their
dependencies and transitive inputs gain the debate."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

from storage import Database, event_shapes, outbox, phases, plans
from storage.read_models import NewPhase
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, complete, event_types, fail, phase
from tests.stored_rows import content_rows

CHECKS = ("check-1", "check-2", "check-3")


def _team(db: Database, title: str = "debates", *, max_debates: int = 1) -> str:
    """Three divergence checks (carrying a group key of their own kind), then the synthesis,
    which waits for them and reads them (its stored transitive inputs)."""
    return plans.create_plan(
        db, title=title, kind="team", spec={"title": title}, task_id=None, max_active=100, max_debates=max_debates,
        phases=[*(NewPhase(c, "divergence", i, [], group_key="checks") for i, c in enumerate(CHECKS)),
                NewPhase("synthesis", "synthesis", 3, list(CHECKS), meta={"terminal": True},
                         inputs=list(CHECKS))]).plan_id


def _keys(check: str) -> list[str]:
    return [f"debate-{check}.{who}" for who in ("Ada", "Bo")]


def _debate(check: str) -> phases.Insertion:
    """As :func:`orchestrator.plan.debates.debate_insertion` builds it: positions relative to the
    end of the plan, the pending phases that wait for ``check`` rewired to wait for it too."""
    group = f"debate-{check}"
    new = [NewPhase(key, "debate", i, [check], expert=who, round=2, group_key=group, meta={"topic": "pricing"},
                    inputs=[check])
           for i, (key, who) in enumerate(zip(_keys(check), ("Ada", "Bo"), strict=True))]
    return phases.Insertion(phases=new, rewire=check,
                            event=event_shapes.debate_inserted(check=check, topic="pricing", participants=["Ada", "Bo"],
                                                           phases=_keys(check)))


def _diverge(db: Database, plan_id: str, check: str) -> phases.Finished:
    assert claim(db, plan_id, check, "w1") is not None
    return complete(db, plan_id, check, 1, '{"diverged": true}', insertion=_debate(check))


def _debates(db: Database, plan_id: str) -> list[str]:
    return sorted(p.key for p in plans.load_state(db, plan_id).phases if p.kind == "debate")


def test_debates_are_inserted_with_the_check_up_to_max_debates(db: Database) -> None:
    plan_id = _team(db, max_debates=1)
    first = _diverge(db, plan_id, "check-1")
    assert (first.status, first.k, first.n) == ("completed", 1, 6)  # counted after the insertion
    second = _diverge(db, plan_id, "check-2")
    assert (second.status, second.k, second.n) == ("completed", 2, 6)  # the limit is reached: no new phases

    state = plans.load_state(db, plan_id)
    assert _debates(db, plan_id) == _keys("check-1")
    ada, bo = (state.by_key()[k] for k in _keys("check-1"))
    assert (ada.status, ada.attempt, ada.expert, ada.round, ada.group_key, ada.position) == (
        "pending", 0, "Ada", 2, "debate-check-1", 4)  # after every stored phase
    assert (bo.position, bo.expert) == (5, "Bo")
    assert (ada.depends_on, ada.inputs, ada.meta) == (["check-1"], ["check-1"], {"topic": "pricing"})
    synthesis = state.by_key()["synthesis"]
    assert synthesis.depends_on == [*CHECKS, *_keys("check-1")]  # waits for the debate too
    assert synthesis.inputs == [*CHECKS, *_keys("check-1")]  # and reads it
    inserted = [e for e in outbox.list_events(db, plan_id) if e.type == "debate_inserted"]
    assert [e.data for e in inserted] == [
        {"check": "check-1", "topic": "pricing", "participants": ["Ada", "Bo"], "phases": _keys("check-1")}]
    limited = [e for e in outbox.list_events(db, plan_id) if e.type == "debate_limit_reached"]
    assert [e.data for e in limited] == [{"limit": 1, "existing": 1}]
    completed = [e for e in outbox.list_events(db, plan_id) if e.type == "phase_completed"]
    # what each completion stored, in order: the insertion's event (or the limit's), then the completion
    assert [[(e.id, e.type) for e in f.events] for f in (first, second)] == [
        [(inserted[0].id, "debate_inserted"), (completed[0].id, "phase_completed")],
        [(limited[0].id, "debate_limit_reached"), (completed[1].id, "phase_completed")]]
    again = claim(db, plan_id, "debate-check-1.Ada", "w1")  # a debate runs like any phase: attempt 1
    assert again is not None and again.phase.attempt == 1
    assert claim(db, plan_id, "synthesis", "w1") is None  # check-3 and the debate have not completed


@pytest.mark.parametrize("limit", [2, 3])
def test_the_limit_counts_debate_groups_not_phases(db: Database, limit: int) -> None:
    plan_id = _team(db, max_debates=limit)
    for check in CHECKS:
        assert _diverge(db, plan_id, check).status == "completed"
    assert len(_debates(db, plan_id)) == 2 * limit
    assert event_types(db, plan_id).count("debate_inserted") == limit
    assert event_types(db, plan_id).count("debate_limit_reached") == 3 - limit
    positions = [p.position for p in plans.load_state(db, plan_id).phases]
    assert positions == list(range(4 + 2 * limit))  # each group after every phase stored before it
    assert phase(db, plan_id, "synthesis").depends_on == [*CHECKS, *(k for c in CHECKS[:limit] for k in _keys(c))]


def _debate_ends(db: Database, plan_id: str, check: str, status: str) -> None:
    """Bring the debate of ``check`` to ``status`` (both of its phases)."""
    for key in _keys(check):
        if status == "pending":
            continue
        if status == "skipped":
            phases.skip_phases(db, plan_id, {"the check was overruled": [key]})
            continue
        assert claim(db, plan_id, key, "w2", timedelta(minutes=5)) is not None
        if status == "completed":
            assert complete(db, plan_id, key, 1, f"{key} argues").status == "completed"
        elif status == "failed":
            assert fail(db, plan_id, key, 1).status == "failed"
    assert {p.status for p in plans.load_state(db, plan_id).phases if p.group_key == f"debate-{check}"} == {status}


@pytest.mark.parametrize("status", ["pending", "running", "completed", "failed", "skipped"])
def test_a_stored_debate_counts_against_the_limit_whatever_became_of_it(db: Database, status: str) -> None:
    """The limit counts debate groups stored, not debates that went well: one that is still
    waiting, being spoken, done, failed or skipped uses its slot all the same."""
    plan_id = _team(db, max_debates=1)
    assert _diverge(db, plan_id, "check-1").status == "completed"
    _debate_ends(db, plan_id, "check-1", status)

    assert _diverge(db, plan_id, "check-2").status == "completed"

    assert _debates(db, plan_id) == _keys("check-1")
    limited = [e.data for e in outbox.list_events(db, plan_id) if e.type == "debate_limit_reached"]
    assert limited == [{"limit": 1, "existing": 1}]


def test_debates_in_mixed_states_fill_a_larger_limit(db: Database) -> None:
    plan_id = _team(db, max_debates=2)
    assert _diverge(db, plan_id, "check-1").status == "completed"
    _debate_ends(db, plan_id, "check-1", "failed")
    assert _diverge(db, plan_id, "check-2").status == "completed"
    _debate_ends(db, plan_id, "check-2", "running")
    assert _diverge(db, plan_id, "check-3").status == "completed"
    assert _debates(db, plan_id) == sorted(_keys("check-1") + _keys("check-2"))
    limited = [e.data for e in outbox.list_events(db, plan_id) if e.type == "debate_limit_reached"]
    assert limited == [{"limit": 2, "existing": 2}]


def test_the_limit_counts_this_plans_debates_only(db: Database) -> None:
    busy = _team(db, "a plan that debated")
    _diverge(db, busy, "check-1")
    plan_id = _team(db)
    assert _diverge(db, plan_id, "check-1").status == "completed"
    assert _debates(db, plan_id) == _keys("check-1")
    assert "debate_limit_reached" not in event_types(db, plan_id)
    for pid in (busy, plan_id):  # each plan's synthesis waits for its own debate
        assert phase(db, pid, "synthesis").depends_on == [*CHECKS, *_keys("check-1")]


def test_a_dependent_that_is_no_longer_pending_is_not_rewired(db: Database) -> None:
    """Only pending phases wait: a dependent that already ended (here skipped by an
    ``advance``) keeps its dependencies and inputs, and so does another plan's. (A dependent
    of a running check cannot have started: the claim refuses a phase whose inputs are not
    complete, so the old "already started" case is now this one.)"""
    plan_id = _team(db)
    other = _team(db, "another plan")
    assert phases.skip_phases(db, plan_id, {"a phase it depends on did not complete": ["synthesis"]})
    assert _diverge(db, plan_id, "check-1").status == "completed"
    assert _debates(db, plan_id) == _keys("check-1")  # inserted, but nothing downstream waits for it
    skipped = phase(db, plan_id, "synthesis")
    assert (skipped.status, skipped.depends_on, skipped.inputs) == ("skipped", list(CHECKS), list(CHECKS))
    untouched = phase(db, other, "synthesis")  # and another plan's never
    assert (untouched.depends_on, untouched.inputs) == (list(CHECKS), list(CHECKS))
    assert _debates(db, other) == []


def test_a_fenced_check_inserts_no_debate(db: Database) -> None:
    plan_id = _team(db)
    assert claim(db, plan_id, "check-1", "w1") is not None
    done = complete(db, plan_id, "check-1", 2, '{"diverged": true}', insertion=_debate("check-1"))
    assert done.status == "fenced" and done.events == ()
    assert _debates(db, plan_id) == []
    assert phase(db, plan_id, "synthesis").depends_on == list(CHECKS)
    assert phase(db, plan_id, "check-1").status == "running"
    assert content_rows(db, plan_id) == {}  # the content written before the fenced update rolled back
    assert not {"debate_inserted", "debate_limit_reached", "phase_completed"} & set(event_types(db, plan_id))


def test_a_debate_insertion_waits_for_the_plans_row(pg: Database) -> None:
    """The check's completion locks the plan row before it counts the stored debate groups
    (the count of ``max_debates`` is read under the lock): while another transaction holds the
    row ``FOR SHARE`` it waits, and nothing of it — the check's result, the debate — is visible."""
    db = pg
    plan_id = _team(db)
    assert claim(db, plan_id, "check-1", "w1", lease=timedelta(seconds=60)) is not None
    outcome: list[str] = []
    with db.engine.connect() as holder:
        tx = holder.begin()
        holder.execute(text("SELECT id FROM plans WHERE id = :id FOR SHARE"), {"id": plan_id})
        writer = threading.Thread(target=lambda: outcome.append(
            complete(db, plan_id, "check-1", 1, '{"diverged": true}', insertion=_debate("check-1")).status))
        writer.start()

        def waiting_or_done() -> bool:
            if outcome:
                return True
            with db.engine.connect() as c:
                return bool(c.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                           "AND datname = current_database() AND query ILIKE 'UPDATE plans%'"))
                            .scalar())

        try:
            wait_for(waiting_or_done, 30, interval=0.02, what="the completion to wait or finish")
            assert outcome == [], "the check's completion did not wait for the plan row"
            assert _debates(db, plan_id) == [] and phase(db, plan_id, "check-1").status == "running"
        finally:
            tx.rollback()
        writer.join(30)
    assert outcome == ["completed"]
    assert _debates(db, plan_id) == _keys("check-1")
