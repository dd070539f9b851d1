"""Debate policy: verdict parsing, the debate phases a verdict inserts, and the lexical detector."""

from __future__ import annotations

import json

import pytest

from orchestrator.gateway.providers.offline import OfflineProvider
from orchestrator.gateway.types import ModelSpec
from orchestrator.plan.debates import MalformedVerdict, Verdict, debate_insertion, parse_verdict
from orchestrator.plan.divergence import lexical_verdict, stance_of
from orchestrator.plan.prompts import build_request
from orchestrator.plan.schema import TeamPlan
from storage.read_models import PhaseRecord
from tests.unit.planes import Planes
from tests.unit.shapes import shape
from tests.unit.stored import example, inputs_of, stored


def team(**changes: object) -> TeamPlan:
    plan = example("team", **changes)
    assert isinstance(plan, TeamPlan)
    return plan


def at_check(plan: TeamPlan) -> tuple[PhaseRecord, list[PhaseRecord]]:
    """The stored phases when check-1 runs: its set done, its dependents waiting."""
    phases = stored(plan, pending=["rollout", "synthesis"])
    return next(p for p in phases if p.key == "check-1"), phases


# ---------------------------------------------------------------- verdicts


@pytest.mark.parametrize("answer", [
    '{"diverged": true, "topic": "margin", "participants": ["Priya", "Marcus"]}',
    '```json\n{"diverged": true, "topic": "margin", "participants": ["Priya", "Marcus"]}\n```',
    'Here is my verdict: {"diverged": true, "topic": "margin", "participants": ["Priya", "Marcus"]} Thanks.',
])
def test_verdicts_parse_with_or_without_a_fence_or_prose(answer: str) -> None:
    assert parse_verdict(answer) == Verdict(diverged=True, topic="margin", participants=["Priya", "Marcus"])


@pytest.mark.parametrize("answer", [
    'Looking at the positions, I think they diverge. {"diverged": true, "topic": "pricing',  # the offline mode
    "They clearly disagree.",
    '{"diverged": "very much", "topic": "x", "participants": []}',
    '{"topic": "x"}',
    '{"diverged": true, "participants": "Priya"}',
])
def test_malformed_verdicts_are_rejected(answer: str) -> None:
    with pytest.raises(MalformedVerdict):
        parse_verdict(answer)


# ---------------------------------------------------------------- insertion


def test_a_diverged_verdict_inserts_one_debate_phase_per_participant() -> None:
    plan = team()
    check, phases = at_check(plan)
    verdict = Verdict(diverged=True, topic="margin vs growth", participants=["Priya", "Marcus"])
    ins = debate_insertion(plan, check, verdict, inputs_of(check, phases))
    assert ins is not None
    assert [(p.key, p.kind, p.expert, p.group_key) for p in ins.phases] == [
        ("debate-check-1.priya", "debate", "Priya", "debate-check-1"),
        ("debate-check-1.marcus", "debate", "Marcus", "debate-check-1")]
    for p in ins.phases:
        assert p.depends_on == ["check-1", "growth", "finance"]  # answers what the others actually wrote
        assert p.inputs == ["check-1", "growth", "finance"]
        assert p.meta["topic"] == "margin vs growth" and p.meta["participants"] == ["Priya", "Marcus"]
    assert [p.position for p in ins.phases] == [0, 1]  # relative: stored after every phase of the plan
    assert ins.phases[0].meta["opponents"] == ["Marcus"] and ins.phases[1].meta["opponents"] == ["Priya"]
    assert ins.rewire == "check-1"  # whatever waits for the check now waits for the debate too (see below)
    assert ins.event.type == "debate_inserted" and ins.event.phase_key is None
    assert ins.event.data == {"check": "check-1", "topic": "margin vs growth", "participants": ["Priya", "Marcus"],
                              "phases": ["debate-check-1.priya", "debate-check-1.marcus"]}


def test_stored_debates_rewire_what_waited_for_the_check_and_stay_within_max_debates(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(team(max_debates=1)).plan_id
    [canvas] = planes.dispatcher.take()
    assert shape(canvas) == [("growth", "finance"), "check-1", "advance"]
    planes.run_canvas(canvas)

    by_key = planes.state(plan_id).by_key()
    debates = ["debate-check-1.priya", "debate-check-1.marcus"]
    assert [by_key[k].position for k in debates] == [5, 6]  # after every stored phase
    assert by_key["rollout"].depends_on == ["growth", "finance", "check-1", *debates]
    assert by_key["synthesis"].depends_on == ["growth", "finance", "rollout", "check-1", *debates]
    # transitive inputs follow: everything downstream of the check now reads the debate
    assert set(debates) <= set(by_key["rollout"].inputs) and set(debates) <= set(by_key["synthesis"].inputs)
    assert by_key["check-1"].depends_on == ["growth", "finance"] and by_key["check-1"].inputs == ["growth", "finance"]

    # a second insertion for the same plan (a resumed check, say) finds the limit reached
    check = by_key["check-1"]
    ins = debate_insertion(team(), check, Verdict(diverged=True, participants=["Priya", "Marcus"]),
                           [by_key["growth"], by_key["finance"]])
    assert ins is not None
    with planes.db.transaction() as s:
        from storage.phases import _insert
        from storage.sql.base import PlanLock
        stored = _insert(planes.db, s, plan_id, ins, PlanLock(False, 1), by_key["check-1"].finished_at)
    assert [(e.type, e.data) for e in stored] == [("debate_limit_reached", {"limit": 1, "existing": 1})]
    assert len([p for p in planes.state(plan_id).phases if p.kind == "debate"]) == 2


@pytest.mark.parametrize("verdict", [
    Verdict(diverged=False, topic="x", participants=["Priya", "Marcus"]),
    Verdict(diverged=True, topic="x", participants=["Priya"]),
    Verdict(diverged=True, topic="x", participants=["Priya", "Lena"]),  # Lena is not in the examined set
    Verdict(diverged=True, topic="x", participants=["Priya", "Priya"]),
    Verdict(diverged=True, topic="x", participants=["Nobody", "Ghost"]),
])
def test_no_debate_without_two_real_participants_of_the_set(verdict: Verdict) -> None:
    plan = team()
    check, phases = at_check(plan)
    assert debate_insertion(plan, check, verdict, inputs_of(check, phases)) is None


def test_an_empty_topic_falls_back_to_the_question() -> None:
    plan = team()
    check, phases = at_check(plan)
    ins = debate_insertion(plan, check, Verdict(diverged=True, participants=["Marcus", "Priya"]),
                           inputs_of(check, phases))
    assert ins is not None and ins.phases[0].meta["topic"] == plan.question
    assert [p.expert for p in ins.phases] == ["Marcus", "Priya"]


# ---------------------------------------------------------------- the lexical detector


def test_stance_is_the_last_position_line() -> None:
    text = "Opening.\n\nPosition: SUPPORT — go.\n\nRevised position:\n**Position:** oppose — stop here."
    assert stance_of(text) == ("oppose", "stop here.")
    assert stance_of("Position: CONDITIONAL: only with a pilot") == ("conditional", "only with a pilot")


def test_without_a_position_line_a_clear_majority_of_stance_words_decides() -> None:
    assert stance_of("I support this. I'd go ahead tomorrow.")[0] == "support"
    assert stance_of("I oppose it, and I'd hold off. We should not.")[0] == "oppose"
    assert stance_of("I support the goal but I oppose the timing.")[0] is None
    assert stance_of("No view.")[0] is None


def test_support_against_oppose_diverges_between_those_two() -> None:
    verdict, stances = lexical_verdict("Should we?", [
        ("Priya", "...\nPosition: SUPPORT — a message the market rewards."),
        ("Lena", "...\nPosition: CONDITIONAL — only with legal review."),
        ("Marcus", "...\nPosition: OPPOSE — the margin risk is too high."),
    ])
    assert verdict.diverged and verdict.participants == ["Priya", "Marcus"]
    assert "Priya: a message the market rewards." in verdict.topic and "Marcus: the margin risk" in verdict.topic
    assert stances == {"Priya": "support", "Lena": "conditional", "Marcus": "oppose"}
    assert len(verdict.topic) <= 500


@pytest.mark.parametrize("stances", [("support", "support"), ("support", "conditional"),
                                     ("oppose", "conditional"), ("conditional", "conditional")])
def test_no_divergence_without_opposite_stances(stances: tuple[str, str]) -> None:
    verdict, _ = lexical_verdict("Should we?", [(n, f"Position: {s.upper()} — because.")
                                                for n, s in zip(("A", "B"), stances, strict=True)])
    assert not verdict.diverged and verdict.participants == []


def test_lexical_verdict_on_what_the_offline_experts_of_the_example_write() -> None:
    """Deterministic end to end: the example's stances make the detector call a debate."""
    plan = team()
    phases = stored(plan)
    by_key = {p.key: p for p in phases}
    provider = OfflineProvider()
    spec = ModelSpec(name="default", provider="offline", options={**plan.models["default"].options, "latency": 0,
                                                                  "first_chunk_delay": 0})
    outputs = []
    for key in ("growth", "finance"):
        request = build_request(plan, by_key[key], inputs_of(by_key[key], by_key.values()), {})
        outputs.append((by_key[key].expert or "", provider.complete(spec, request).text))
    first, _ = lexical_verdict(plan.question, outputs)
    again, _ = lexical_verdict(plan.question, outputs)
    assert first == again
    assert first.diverged and first.participants == ["Priya", "Marcus"]
    assert Verdict.model_validate(json.loads(first.model_dump_json())) == first
