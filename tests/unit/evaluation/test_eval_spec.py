"""The eval spec: what a user writes is refused naming the field, and what it resolves to — the
record of items, arms and plan templates — is the same every time and fills valid plans."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.core.errors import InvalidEval
from orchestrator.evaluation import arms
from orchestrator.evaluation.scoring import Scorer
from orchestrator.evaluation.spec import check_record, resolve
from orchestrator.plan.schema import LABEL_RE, TASK_ID_RE, parse_plan
from tests.conftest import ROOT

PANEL = {"kind": "team", "title": "Panel", "question": "Answer: {question}", "decide": "vote", "divergence": "off",
         "experts": [{"name": "Ada", "role": "Solver", "model": "solver"},
                     {"name": "Bo", "role": "Solver", "model": "solver"}],
         "phases": [{"id": "ada", "expert": "Ada", "prompt": "Solve it."},
                    {"id": "bo", "expert": "Bo", "prompt": "Solve it."}]}
SOLVER = {"provider": "offline", "options": {"latency": 0, "solver": {"skill": 0.7}}}


def write(tmp_path: Path, spec: dict[str, Any], panel: dict[str, Any] | None = None) -> Path:
    (tmp_path / "panel.yaml").write_text(yaml.safe_dump(PANEL if panel is None else panel))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def base(**changes: Any) -> dict[str, Any]:
    spec = {"name": "arith", "generate": {"n": 6, "options": 2, "seed": 1}, "plan": "panel.yaml",
            "models": {"solver": SOLVER}, "baselines": {"single": {"model": "solver"},
                                                        "self_consistency": {"model": "solver", "n": 3}}}
    spec.update(changes)
    return {k: v for k, v in spec.items() if v is not None}


def refused(tmp_path: Path, spec: dict[str, Any], panel: dict[str, Any] | None = None) -> tuple[str, str]:
    with pytest.raises(InvalidEval) as caught:
        resolve(write(tmp_path, spec, panel))
    detail = caught.value.details[0]
    assert caught.value.message.startswith(f"{detail['field']}: ") or not detail["field"]
    return detail["field"], detail["message"]


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"generate": None}, "dataset", "exactly one of dataset"),
    ({"dataset": "items.jsonl"}, "dataset", "exactly one of dataset"),
    ({"name": "Not A Slug"}, "name", "pattern"),
    ({"surprise": 1}, "surprise", "unknown field"),
    ({"generate": {"n": 0}}, "generate.n", "greater than or equal to 1"),
    ({"generate": {"n": 5, "options": 30}}, "generate.options", "less than or equal to 26"),
    ({"baselines": {"single": {"model": 3}}}, "baselines.single.model", "valid string"),
    ({"baselines": {"self_consistency": {"model": "solver", "n": "five"}}}, "baselines.self_consistency.n", ""),
    ({"baselines": {"self_consistency": {"model": "solver", "n": 25}}}, "baselines.self_consistency.n", "24"),
    ({"baselines": {"triple": {"model": "solver"}}}, "baselines.triple", "unknown field"),
    ({"scoring": "fuzzy"}, "scoring", ""),
    ({"scoring": {"judge": {}}}, "scoring.judge.model", "required"),
    ({"decide": "plurality"}, "decide", ""),
    ({"tolerance": -1}, "tolerance", "greater than or equal to 0"),
    ({"models": {"solver": {"provider": "psychic"}}}, "models.solver.provider", ""),
    ({"plan": "missing.yaml"}, "plan", "cannot read the plan template"),
])
def test_a_bad_spec_names_its_field(tmp_path: Path, changes: dict[str, Any], field: str, says: str) -> None:
    where, message = refused(tmp_path, base(**changes))
    assert where == field and says in message


def test_a_bad_template_or_dataset_names_its_field(tmp_path: Path) -> None:
    assert refused(tmp_path, base(), {**PANEL, "question": "no slot"})[0] == "plan.question"
    twice = {**PANEL, "experts": [PANEL["experts"][0], PANEL["experts"][0]]}
    field, message = refused(tmp_path, base(), twice)
    assert field == "plan.experts[1].name" and "used twice" in message
    assert refused(tmp_path, base(decide="chair"))[0] == "plan.synthesis"  # a team with no synthesis needs a tally
    clash = {**PANEL, "models": {"solver": {"provider": "offline"}}}
    assert refused(tmp_path, base(), clash) == ("models.solver", "the plan template defines this model differently")
    briefed = {**PANEL, "briefing": [{"path": "notes.md"}]}
    assert refused(tmp_path, base(), briefed)[0] == "plan.briefing[0].path"
    (tmp_path / "items.jsonl").write_text('{"id": "a", "question": "Q?", "answer": 1}\n{"id": "b", "question": "Q?"}\n')
    field, message = refused(tmp_path, base(generate=None, dataset="items.jsonl"))
    assert field == "dataset" and "line 2: answer: missing" in message
    (tmp_path / "items.jsonl").write_text('{"id": "a", "question": "Q?", "choices": ["Yes", "yes"], "answer": "Yes"}\n')
    field, message = refused(tmp_path, base(generate=None, dataset="items.jsonl"))
    assert field == "items[0]" and "same answer" in message


def test_a_spec_resolves_to_the_same_record_every_time(tmp_path: Path) -> None:
    path = write(tmp_path, base())
    first, again = resolve(path), resolve(path)
    assert json.dumps(first.record, sort_keys=True) == json.dumps(again.record, sort_keys=True)
    record = first.record
    assert [a["name"] for a in record["arms"]] == ["panel", "single", "self_consistency"]
    assert len(record["items"]) == 6 and record["items"][0]["id"] == "gen-1-0" and record["limit"] is None
    assert resolve(path, limit=2).record["items"] == record["items"][:2]
    assert check_record(json.loads(json.dumps(record))) == record  # what a server checks, after JSON


def test_each_arm_fills_a_valid_plan_with_its_task_id_labels_and_answer(tmp_path: Path) -> None:
    record = resolve(write(tmp_path, base(tolerance=0.5))).record
    item = record["items"][0]
    panel, _, sc = record["arms"]
    filled = {a["name"]: parse_plan(arms.fill(record, a, item)) for a in record["arms"]}
    assert filled["panel"].question == f"Answer: {item['question']}"
    assert filled["panel"].answer is not None and filled["panel"].answer.model_dump() == {
        "type": "choice", "options": item["choices"]}
    for name, plan in filled.items():
        assert plan.task_id == f"eval:arith:{name}:{item['id']}"
        assert plan.labels == ["eval=arith", f"arm={name}"]
        assert "solver" in plan.models and plan.decide == "vote"
    assert [e.name for e in filled["single"].experts] == ["solver"] and len(filled["single"].phases) == 1
    assert [e.name for e in filled["self_consistency"].experts] == ["sample-1", "sample-2", "sample-3"]
    assert filled["single"].synthesis is None and filled["single"].divergence == "off"
    five = parse_plan(arms.fill(record, sc, item, samples=5))
    assert [p.id for p in five.phases] == [f"sample-{i}" for i in range(1, 6)]
    numeric = {"id": "n1", "question": "What is 2 + 3?", "answer": 5.0}
    assert arms.fill(record, panel, numeric)["answer"] == {"type": "number", "tolerance": 0.5}


def test_item_ids_that_cannot_be_in_a_task_id_are_digested(tmp_path: Path) -> None:
    assert arms.item_key("real-01") == "real-01"
    odd = arms.item_key("Question #7 (hard)")
    assert odd.startswith("sha-") and odd == arms.item_key("Question #7 (hard)")
    tid = arms.task_id("a" * 59, "self_consistency", "x" * 100)
    judge = arms.judge_task_id("a" * 59, "Question #7 (hard)", "an answer")
    for value in (tid, judge):
        assert len(value) <= 200 and re.fullmatch(TASK_ID_RE, value)
    assert re.fullmatch(LABEL_RE, arms.labels("a" * 59, "self_consistency")[0])


def test_the_scorer_grades_choices_numbers_and_judged_text() -> None:
    choice = {"id": "c", "question": "q", "choices": ["Au", "Ag"], "answer": "Au"}
    number = {"id": "n", "question": "q", "answer": 92.0}
    exact, near = Scorer("exact"), Scorer("numeric", tolerance=0.5)
    assert exact.grade(choice, " au ") and not exact.grade(choice, "Ag") and not exact.grade(choice, None)
    assert exact.grade(number, 92.0) and exact.grade(number, "92") and not exact.grade(number, 92.4)
    assert near.grade(number, 92.4) and not near.grade(number, 93.0) and not near.grade(number, "ninety-two")
    judge = Scorer("judge", judged={("c", "gold"): True})
    assert judge.grade(choice, "Gold.") and not judge.grade(choice, "silver") and not judge.is_judged(choice, "x")


def test_self_consistency_is_sized_to_an_odd_number_of_samples() -> None:
    ratios = (0.0, 1.0, 3.4, 4.0, 4.9, 5.2, 6.0, 7.6, 100.0)
    assert [arms.choose_samples(r) for r in ratios] == [3, 3, 3, 5, 5, 5, 7, 7, 23]


CLAUDE = {"provider": "anthropic", "model": "claude-3-5-haiku-latest", "api_key_env": "ANTHROPIC_API_KEY"}
GPT_MINI = {"provider": "openai", "model": "gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}


def test_a_judge_on_an_expert_s_model_is_warned_about(tmp_path: Path) -> None:
    judged = resolve(write(tmp_path, base(scoring={"judge": {"model": "solver"}}))).warnings
    assert judged and "same model as an expert of the panel arm" in judged[0]
    other = base(scoring={"judge": {"model": "grader"}}, models={"solver": SOLVER, "grader": CLAUDE})
    assert resolve(write(tmp_path, other)).warnings == []


def test_a_judge_of_an_expert_s_model_family_is_warned_about(tmp_path: Path) -> None:
    # another model, another name, another provider, the same family: a judge grading its own kind
    gpt = {"provider": "openai", "model": "gpt-4o", "api_key_env": "OPENAI_API_KEY"}
    panel = {**PANEL, "experts": [{**e, "model": "mini"} for e in PANEL["experts"]]}
    family = base(scoring={"judge": {"model": "grader"}}, models={"mini": GPT_MINI, "grader": gpt})
    warned = resolve(write(tmp_path, family, panel)).warnings
    assert warned == ["the judge (grader) is of the same model family (gpt) as an expert of the panel arm (mini): "
                      "it grades answers of its own kind, and tends to find them right"]
    # a registry name is read in the operator's registry when the caller has it, and only then
    registered = base(scoring={"judge": {"model": "grader"}}, models={"mini": GPT_MINI})
    assert resolve(write(tmp_path, registered, panel)).warnings == []
    assert resolve(write(tmp_path, registered, panel), registry={"grader": gpt})
    assert resolve(write(tmp_path, registered, panel), registry={"grader": CLAUDE}).warnings == []
    assert arms.model_family({}, "x", {"x": {"provider": "openai", "model": "meta-llama/Llama-3.1-8B"}}) == "llama"
    assert arms.model_family({}, "x", {"x": {"provider": "ollama", "model": "llama3.1:8b"}}) == "llama"
    assert arms.model_family({"models": {"x": {"provider": "offline"}}}, "x") == "offline"


def test_the_example_specs_resolve() -> None:
    arithmetic = resolve(ROOT / "examples" / "eval" / "arithmetic.yaml").record
    assert len(arithmetic["items"]) == 300 and [a["name"] for a in arithmetic["arms"]] == [
        "panel", "single", "self_consistency"]
    assert len(arithmetic["arms"][0]["plan"]["experts"]) == 5 and arithmetic["arms"][2]["samples"] == 5
    real = resolve(ROOT / "examples" / "eval" / "real-questions.yaml").record
    assert len(real["items"]) == 50 and real["arms"][2]["samples"] == "auto"
