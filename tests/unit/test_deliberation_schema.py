"""The plan fields of deliberation — ``answer``, ``decide``, ``stop_when``, an expert's
``fallback_models``, a tallied team without a synthesis — refuse bad values naming the field
(fallback models against the operator's registry, as the primary model is), and every good
plan round-trips through dump and load unchanged."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.core.errors import InvalidPlan
from orchestrator.core.settings import Settings
from orchestrator.plan.expand import expand
from orchestrator.plan.registry import ModelResolver
from orchestrator.plan.schema import BoardPlan, TeamPlan, dump_plan, load_plan

CHOICE = {"type": "choice", "options": ["yes", "no"]}
BOARD: dict[str, Any] = {
    "kind": "board", "title": "t", "question": "Should we?", "rounds": 2,
    "moderator": {"name": "Morgan", "role": "Chair"},
    "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Ravi", "role": "CTO"}],
}
TEAM: dict[str, Any] = {
    "kind": "team", "title": "t", "question": "Should we?",
    "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Ravi", "role": "CTO"}],
    "phases": [{"id": "money", "expert": "Dana", "prompt": "cost?"},
               {"id": "tech", "expert": "Ravi", "prompt": "risk?"}],
    "synthesis": {"expert": "Dana"},
}


def doc(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``base`` with ``changes``; a change to None removes the field."""
    out = {**copy.deepcopy(base), **changes}
    return {k: v for k, v in out.items() if v is not None}


def refused(plan: dict[str, Any]) -> tuple[str, str]:
    """The (field, message) of the first problem the plan is refused for."""
    with pytest.raises(InvalidPlan) as info:
        load_plan(plan)
    first = info.value.details[0]
    assert info.value.code == "plan.invalid" and info.value.message.startswith(f"invalid plan: {first['field']}: ")
    return first["field"], first["message"]


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"decide": "vote"}, "decide", "declare the plan's answer"),
    ({"decide": "consensus"}, "decide", "declare the plan's answer"),
    ({"answer": CHOICE, "decide": "majority"}, "decide", "'vote', 'weighted_vote', 'borda', 'consensus' or 'chair'"),
    ({"answer": CHOICE, "decide": ["vote"]}, "decide", ""),
    ({"answer": {"type": "number"}, "decide": "borda"}, "decide", "needs answer.type 'choice'"),
    ({"answer": {"type": "text"}, "decide": "borda"}, "decide", "needs answer.type 'choice'"),
    ({"answer": "yes"}, "answer", "dictionary"),
    ({"answer": {"type": "vote"}}, "answer.type", "choice, number, text"),
    ({"answer": {"options": ["yes", "no"]}}, "answer.type", "choice, number, text"),
    ({"answer": {"type": "choice"}}, "answer.options", "required"),
    ({"answer": {"type": "choice", "options": ["yes"]}}, "answer.options", "at least 2"),
    ({"answer": {"type": "choice", "options": ["yes", "Yes."]}}, "answer.options", "is the same answer as"),
    ({"answer": {"type": "choice", "options": ["yes", ""]}}, "answer.options[1]", "at least 1 character"),
    ({"answer": {"type": "choice", "options": [f"o{i}" for i in range(27)]}}, "answer.options", "at most 26"),
    ({"answer": {"type": "choice", "options": ["yes", "no"], "tolerance": 1}}, "answer.tolerance", "unknown field"),
    ({"answer": {"type": "number", "tolerance": -1}}, "answer.tolerance", "greater than or equal to 0"),
    ({"answer": {"type": "number", "tolerance": "1"}}, "answer.tolerance", "valid number"),
    ({"answer": {"type": "number", "tolerance": True}}, "answer.tolerance", "valid number"),
    ({"answer": {"type": "number", "options": ["1", "2"]}}, "answer.options", "unknown field"),
    ({"stop_when": {"agreement": 0.8}}, "stop_when", "declare the plan's answer"),
    ({"answer": CHOICE, "stop_when": 0.8}, "stop_when", "valid dictionary"),
    ({"answer": CHOICE, "stop_when": {}}, "stop_when.agreement", "required"),
    ({"answer": CHOICE, "stop_when": {"agreement": 0.5}}, "stop_when.agreement", "greater than 0.5"),
    ({"answer": CHOICE, "stop_when": {"agreement": 1.5}}, "stop_when.agreement", "less than or equal to 1"),
    ({"answer": CHOICE, "stop_when": {"agreement": "0.8"}}, "stop_when.agreement", "valid number"),
    ({"answer": CHOICE, "stop_when": {"agreement": 0.8, "rounds": 1}}, "stop_when.rounds", "unknown field"),
    ({"experts": [{"name": "Dana", "role": "CFO", "fallback_models": [""]}]},
     "experts[0].fallback_models[0]", "at least 1 character"),
    ({"experts": [{"name": "Dana", "role": "CFO", "fallback_models": "backup"}]},
     "experts[0].fallback_models", "valid list"),
    ({"experts": [{"name": "Dana", "role": "CFO", "fallback_models": ["m"] * 6}]},
     "experts[0].fallback_models", "at most 5"),
    ({"moderator": {"name": "Morgan", "role": "Chair", "fallback_models": ["x" * 81]}},
     "moderator.fallback_models[0]", "at most 80"),
])
def test_a_board_refuses_bad_deliberation_fields_naming_them(changes: dict[str, Any], field: str, words: str) -> None:
    named, message = refused(doc(BOARD, **changes))
    assert named == field and words in message, (named, message)


@pytest.mark.parametrize(("changes", "field", "words"), [
    ({"synthesis": None}, "synthesis", "unless it ends with a tallied decision"),
    ({"synthesis": None, "answer": CHOICE}, "synthesis", "unless it ends with a tallied decision"),
    ({"synthesis": None, "answer": CHOICE, "decide": "chair"}, "synthesis", "unless it ends with a tallied decision"),
    ({"synthesis": None, "answer": CHOICE, "decide": "vote"}, "divergence", "use divergence: lexical or off"),
    ({"synthesis": None, "answer": CHOICE, "decide": "vote", "divergence": "model"}, "divergence", "lexical or off"),
    ({"answer": CHOICE, "stop_when": {"agreement": 0.8}}, "stop_when", "unknown field"),  # a board's rounds only
    ({"answer": CHOICE, "decide": "vote", "phases": [{"id": "decision", "expert": "Dana", "prompt": "x"}]},
     "phases[0].id", "reserved"),
    ({"phases": [{"id": "synthesis", "expert": "Dana", "prompt": "x"}]}, "phases[0].id", "reserved"),
    ({"decide": "weighted_vote"}, "decide", "declare the plan's answer"),
])
def test_a_team_refuses_bad_deliberation_fields_naming_them(changes: dict[str, Any], field: str, words: str) -> None:
    named, message = refused(doc(TEAM, **changes))
    assert named == field and words in message, (named, message)


def test_an_untallied_team_may_still_have_a_phase_called_decision() -> None:
    plan = load_plan(doc(TEAM, phases=[{"id": "decision", "expert": "Dana", "prompt": "x"}]))
    assert [p.key for p in expand(plan)] == ["decision", "synthesis"]


@pytest.mark.parametrize("plan", [
    doc(BOARD, answer=CHOICE),
    doc(BOARD, answer=CHOICE, decide="vote", stop_when={"agreement": 0.75}),
    doc(BOARD, answer={"type": "choice", "options": ["A", "B", "C"]}, decide="borda"),
    doc(BOARD, answer={"type": "number", "tolerance": 0.5}, decide="weighted_vote"),
    doc(BOARD, answer={"type": "text"}, decide="consensus", rounds=4),
    doc(BOARD, experts=[{"name": "Dana", "role": "CFO", "model": "fast", "fallback_models": ["slow", "default"]}],
        moderator={"name": "Morgan", "role": "Chair", "fallback_models": ["slow"]},
        models={"fast": {"provider": "offline"}, "slow": {"provider": "offline"},
                "default": {"provider": "offline"}}),
    doc(TEAM, answer=CHOICE, decide="vote"),
    doc(TEAM, answer=CHOICE, decide="vote", synthesis=None, divergence="lexical"),
    doc(TEAM, answer=CHOICE, decide="consensus", synthesis=None, divergence="off"),
    doc(TEAM, answer=CHOICE, decide="vote", synthesis=None, max_debates=0),
])
def test_good_plans_round_trip_through_dump_and_load(plan: dict[str, Any]) -> None:
    loaded = load_plan(plan)
    dumped = dump_plan(loaded)
    assert load_plan(dumped) == loaded
    assert load_plan(json.dumps(dumped)) == loaded and load_plan(yaml.safe_dump(dumped)) == loaded
    assert dump_plan(load_plan(dumped)) == dumped
    assert [p.key for p in expand(load_plan(dumped))] == [p.key for p in expand(loaded)]


def test_a_plan_without_deliberation_is_dumped_as_before() -> None:
    dumped = dump_plan(load_plan(doc(BOARD)))
    assert (dumped["answer"], dumped["decide"], dumped["stop_when"]) == (None, "chair", None)
    assert all(e["fallback_models"] == [] for e in dumped["experts"])
    assert not load_plan(dumped).tallied


def test_what_a_plan_declares_is_read_as_declared() -> None:
    board = load_plan(doc(BOARD, answer=CHOICE, decide="consensus"))
    assert isinstance(board, BoardPlan) and board.tallied and board.consensus_threshold == 0.8
    stopping = load_plan(doc(BOARD, answer=CHOICE, stop_when={"agreement": 0.6}))
    assert isinstance(stopping, BoardPlan) and not stopping.tallied and stopping.consensus_threshold == 0.6
    team = load_plan(doc(TEAM, answer=CHOICE, decide="vote", synthesis=None, divergence="off"))
    assert isinstance(team, TeamPlan) and team.synthesis is None
    assert [(p.key, p.meta.get("terminal")) for p in expand(team)] == [("money", None), ("tech", None),
                                                                      ("decision", True)]


def test_an_experts_models_are_tried_in_order_each_once() -> None:
    plan = load_plan(doc(BOARD, experts=[{"name": "Dana", "role": "CFO", "model": "a",
                                          "fallback_models": ["b", "a", "c", "b"]}],
                         models={m: {"provider": "offline"} for m in "abc"}))
    assert plan.expert("Dana").models == ["a", "b", "c"]


# ---------------------------------------------------------------- fallback models and the registry

CLUSTER = {"broker_url": "redis://127.0.0.1:6379/15", "database_url": "sqlite:///unused.db"}
REGISTRY = {"main": {"provider": "offline"}, "backup": {"provider": "offline"}}


def cluster(tmp_path: Path) -> ModelResolver:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump({"models": REGISTRY}))
    return ModelResolver.from_settings(Settings(models=path, **CLUSTER))


def test_fallback_models_are_checked_against_the_registry_naming_the_field(tmp_path: Path) -> None:
    resolver = cluster(tmp_path)
    resolver.check_plan(load_plan(doc(
        BOARD, moderator={"name": "Morgan", "role": "Chair", "model": "main", "fallback_models": ["backup"]},
        experts=[{"name": "Dana", "role": "CFO", "model": "main", "fallback_models": ["backup", "main"]}])))

    plan = load_plan(doc(
        BOARD, moderator={"name": "Morgan", "role": "Chair", "model": "main", "fallback_models": ["backup", "gpt-9"]},
        experts=[{"name": "Dana", "role": "CFO", "model": "main"},
                 {"name": "Ravi", "role": "CTO", "model": "main", "fallback_models": ["claude"]}]))
    with pytest.raises(InvalidPlan) as info:
        resolver.check_plan(plan)
    assert [d["field"] for d in info.value.details] == ["moderator.fallback_models[1]",
                                                        "experts[1].fallback_models[0]"]
    assert "unknown model 'gpt-9'" in info.value.details[0]["message"]
    assert "unknown model 'claude'" in info.value.details[1]["message"]


def test_a_plan_defined_fallback_model_is_refused_in_a_cluster_by_default(tmp_path: Path) -> None:
    plan = load_plan(doc(BOARD, models={"mine": {"provider": "offline"}},
                         moderator={"name": "Morgan", "role": "Chair", "model": "main"},
                         experts=[{"name": "Dana", "role": "CFO", "model": "main", "fallback_models": ["mine"]}]))
    with pytest.raises(InvalidPlan) as info:
        cluster(tmp_path).check_plan(plan)
    assert "models.mine" in [d["field"] for d in info.value.details]
