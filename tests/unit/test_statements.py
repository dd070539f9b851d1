"""What a phase costs in SQL: the same in a 5-phase board as in a 200-phase team, whatever
the number of its inputs. Counted with SQLAlchemy events (:class:`tests.sqlcount.StatementCounter`)
on SQLite, where each operation is a few plain statements in one ``BEGIN IMMEDIATE``
transaction (on Postgres the claim and the completion are one statement each, see
``bench/RESULTS.md``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from storage.status import Outcome
from tests.sqlcount import StatementCounter
from tests.unit.planes import Planes
from tests.unit.stored import example

SMALL_BOARD = example("board", rounds=1, experts=[{"name": "Dana", "role": "Chief Financial Officer"},
                                                  {"name": "Ravi", "role": "Chief Technology Officer"}])
CLAIM, USAGE, COMPLETE = "storage.phases.claim_phase", "storage.usage.record_usage", "storage.phases.complete_phase"


def big_team() -> Any:
    """200 phases: 10 lanes of 19 or 20 expert phases, then the synthesis (no divergence check)."""
    lanes = [20] * 9 + [19]
    phases = []
    for lane, length in enumerate(lanes):
        for step in range(length):
            deps = [f"l{lane}-{step - 1}"] if step else []
            phases.append({"id": f"l{lane}-{step}", "expert": f"E{lane}", "prompt": "go on", "depends_on": deps})
    return {"kind": "team", "title": "200 phases", "question": "Should we?", "divergence": "off",
            "models": {"default": {"provider": "offline", "options": {"words": 12}}},
            "experts": [{"name": f"E{i}", "role": "Analyst"} for i in range(10)],
            "phases": phases,
            "synthesis": {"expert": "E0", "depends_on": [f"l{i}-{n - 1}" for i, n in enumerate(lanes)]}}


def run(planes: Planes, plan_id: str, key: str) -> Counter[str]:
    """Deliver one phase whose inputs are complete; the statements each repository call sent."""
    phase_id = planes.state(plan_id).by_key()[key].id
    counter = StatementCounter().attach(planes.db.engine)
    try:
        assert planes.deliver(phase_id, key, plan_id=plan_id) == Outcome.COMPLETED
        return counter.snapshot()["statements"]
    finally:
        counter.detach()


def test_claim_and_completion_cost_the_same_in_any_plan(planes: Planes) -> None:
    board = planes.coordinator.submit(SMALL_BOARD).plan_id
    team = planes.coordinator.submit(big_team()).plan_id
    assert len(planes.state(team).phases) == 200 and len(planes.state(board).phases) == 5
    run(planes, board, "opening")  # first phase of each plan: the worker reads and caches its spec
    first = run(planes, team, "l0-0")
    assert first["storage.plans.get_spec"] == 3  # once per plan and process: BEGIN IMMEDIATE, SELECT, COMMIT

    small = run(planes, board, "r1.dana")  # 1 input
    big = run(planes, team, "l0-1")  # 1 input, in a plan 40 times larger
    for step in range(2, 19):
        run(planes, team, f"l0-{step}")
    deep = run(planes, team, "l0-19")  # 19 inputs
    for cost in (small, big, deep):
        # SQLite: BEGIN IMMEDIATE, the claim UPDATE, progress, phase_started, the inputs with their texts, COMMIT
        assert cost[CLAIM] == 6
        assert cost[USAGE] == 3  # BEGIN IMMEDIATE, INSERT … ON CONFLICT DO NOTHING, COMMIT
        # BEGIN IMMEDIATE, plan lock, content, fenced status, progress, phase_completed, COMMIT
        assert cost[COMPLETE] == 7
        assert set(cost) == {CLAIM, USAGE, COMPLETE}  # nothing else: no plan load, no spec read
    assert small == big == deep


def test_the_lease_heartbeat_is_one_statement_for_every_held_lease(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    planes.run_step(plan_id, planes.dispatcher.take()[0].root.steps[0])  # type: ignore[union-attr]
    turns = [p for p in planes.state(plan_id).phases if p.kind == "turn"]
    held = []
    for p in turns:
        work = planes.runner.claim(p.id, owner="unit:held", plan_id=plan_id)
        assert work is not None
        held.append((p.id, work.attempt))
    counter = StatementCounter().attach(planes.db.engine)
    try:
        assert planes.runner.renew(held) == {p.id: True for p in turns}
        assert counter.snapshot()["statements"] == Counter({"storage.phases.renew_leases": 3})  # BEGIN, UPDATE, COMMIT
        planes.coordinator.cancel(plan_id)
        counter.reset()
        assert planes.runner.renew([*held, ("no-such-phase", 1)]) == {p.id: False for p in turns} | {
            "no-such-phase": False}  # cancelled plans and lost leases learn it in the same statement
        assert counter.total("storage.phases.renew_leases") == 3
    finally:
        counter.detach()


BRIEFED = "storage.briefings.candidates"


def test_a_briefing_costs_a_phase_one_read_and_no_briefing_none(planes: Planes) -> None:
    plain = planes.coordinator.submit(SMALL_BOARD).plan_id
    memo = "# Pricing\n\n## Risks\n\nHeavy users would pay three times more.\n\n## Margin\n\nMargins rise 4%.\n"
    briefed = planes.coordinator.submit(example("board", rounds=1, title="Briefed", experts=SMALL_BOARD.model_dump(
        mode="json")["experts"], briefing=[{"title": "Pricing memo", "text": memo}])).plan_id
    run(planes, plain, "opening")
    run(planes, briefed, "opening")
    without, with_briefing = run(planes, plain, "r1.dana"), run(planes, briefed, "r1.dana")
    assert set(without) == {CLAIM, USAGE, COMPLETE}  # no statement for a plan without a briefing
    # every search tier, the cited passages and the fallback in one SELECT: BEGIN IMMEDIATE, SELECT, COMMIT
    assert with_briefing == without + Counter({BRIEFED: 3})
    assert "[pricing-memo:" in (planes.text(briefed, "r1.dana") or "")
