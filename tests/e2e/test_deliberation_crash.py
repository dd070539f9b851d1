"""A tallied board survives the death of its worker: a real worker subprocess is SIGKILLed
while round one's turns run (each turn is a slow call and its verdict repair), another
worker takes the plan over, and what is stored afterwards is as if nothing had happened —
every turn's verdict stored once, by the attempt that completed it; one ``decision_recorded``
event, equal to the tally code computes from those stored verdicts; the dead attempts' usage
on record as waste, never as cost."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.deliberation.verdicts import read_verdict
from orchestrator.plan import tally
from orchestrator.plan.schema import parse_plan
from storage import contents, plans, usage
from tests.integration.durability import ledger, owner_pid, wait_for

EXPERTS = [("Dana", "Chief Financial Officer"), ("Ravi", "Chief Technology Officer"), ("Sofia", "Head of Sales")]
CALLS = {"opening": 1, "turn": 2, "round_summary": 1, "decision": 0, "final_summary": 1}  # a turn's repair too


def _board() -> dict[str, Any]:
    """One round of three experts, deciding by vote. The experts' model is slow (a turn and
    its repair take seconds) and breaks each turn's verdict once; the chair's is quick."""
    return {
        "kind": "board", "title": "Pricing, decided by vote, through a crash", "rounds": 1,
        "question": "Should Ledgerly move to usage-based pricing next quarter?",
        "answer": {"type": "choice", "options": ["Adopt usage pricing", "Keep the flat plan"]}, "decide": "vote",
        "moderator": {"name": "Morgan", "role": "Chair of the board", "model": "quick"},
        "experts": [{"name": n, "role": r} for n, r in EXPERTS],
        "models": {"default": {"provider": "offline", "options": {"words": 40, "latency": 0.25,
                                                                  "malformed_verdict": "once"}},
                   "quick": {"provider": "offline", "options": {"words": 40}}},
    }


@pytest.mark.slow
def test_a_tallied_board_outlives_a_sigkilled_worker(client: Any, workers: Any) -> None:
    victim = workers()
    plan_id = client.submit(_board())
    db = client.local.db

    def turns_running_one_in_its_repair() -> list[tuple[str, int, bool]] | None:
        """Round one's turns, all running on the victim, at least one of them past its first
        call (its usage row is on record) and in its repair: killed now, that one leaves waste
        behind. ``(key, attempt, first call on record)`` for each."""
        state = plans.load_state(db, plan_id)
        turns = [p for p in state.phases if p.kind == "turn"]
        spent = {(u.phase_id, u.attempt) for u in usage.rows_for_plan(db, plan_id)}
        running = all(p.status == "running" and owner_pid(p) == victim.pid for p in turns)
        if running and any((p.id, p.attempt) in spent for p in turns):
            return [(p.key, p.attempt, (p.id, p.attempt) in spent) for p in turns]
        return None

    killed = wait_for(turns_running_one_in_its_repair, 60, interval=0.02, what="round one's turns mid-way")
    victim.kill()  # SIGKILL: no ack, no cleanup; the leases are left to expire
    survivor = workers()
    wait_for(lambda: client.get(plan_id).final, 90, interval=0.25, what="the plan to finish")

    led = ledger(db, plan_id)
    assert led.plan.status == "completed", led.statuses()
    assert set(led.statuses().values()) == {"completed"}
    stored_events = client.local.reads.list_events(plan_id)
    spec = parse_plan(led.plan.spec)
    assert spec.answer is not None

    for key, attempt, first_call_done in killed:
        p = led.phase(key)
        assert p.attempt > attempt and owner_pid(p) is None  # run again, by the survivor
        started_by = [e.data["worker"] for e in stored_events if e.type == "phase_started" and e.phase_key == key]
        assert str(survivor.pid) in started_by[-1]
        dead = [u for u in led.usage_of(p) if u.attempt == attempt]
        assert dead or not first_call_done  # (a first call may also have ended just before the kill)
        assert not any(u.counted for u in dead)  # what the dead attempt spent is waste
    for p in led.phases:
        rows = led.usage_of(p)
        counted = [u for u in rows if u.counted]
        assert led.content_rows.get(p.id) == 1, p.key
        assert sorted(u.seq for u in counted) == list(range(1, CALLS[p.kind] + 1)), (p.key, rows)
        assert {u.attempt for u in counted} <= {p.attempt}, p.key  # only the completing attempt is cost
        assert all(u.attempt < p.attempt for u in rows if not u.counted), p.key
        completed = [e for e in stored_events if e.type == "phase_completed" and e.phase_key == p.key]
        assert [e.data["attempt"] for e in completed] == [p.attempt], p.key  # written once, by the winner
        if p.kind == "turn":
            text = contents.read_text(db, plan_id, p.key) or ""
            assert p.verdict is not None and p.verdict["repaired"] is True and p.verdict["answer"] is not None
            assert p.verdict == {**read_verdict(text, spec.answer).as_json(), "repaired": True}

    decision = led.phase("decision")
    inputs = [p for p in led.phases if p.key in decision.inputs]
    assert decision.verdict == tally.decide(spec, plan_id, inputs).as_json()
    assert [v["phase"] for v in decision.verdict["votes"]] == ["r1.dana", "r1.ravi", "r1.sofia"]
    [recorded] = [e for e in stored_events if e.type == "decision_recorded"]
    assert recorded.data == decision.verdict
    final = led.phase("final").verdict
    assert final is not None and final["matches_decision"] is True

    view = client.get(plan_id)
    assert view.decision is not None and view.decision["key"] == decision.verdict["key"]
    assert view.usage.total_tokens == sum(u.input_tokens + u.output_tokens for u in led.counted) > 0
    assert view.usage.wasted_tokens == sum(u.input_tokens + u.output_tokens for u in led.waste) > 0
    assert view.usage.calls == len(led.usage_rows) == len(led.counted) + len(led.waste)
