"""Plan validation: every rejection names the field that is wrong."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.core.errors import InvalidPlan
from orchestrator.plan.schema import BoardPlan, TeamPlan, load_plan

BOARD: dict[str, Any] = {
    "kind": "board", "title": "t", "question": "Should we?", "rounds": 2,
    "moderator": {"name": "Morgan", "role": "Chair"},
    "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Ravi", "role": "CTO"}],
}
TEAM: dict[str, Any] = {
    "kind": "team", "title": "t", "question": "Should we?",
    "experts": [{"name": "Dana", "role": "CFO"}, {"name": "Ravi", "role": "CTO"}],
    "phases": [{"id": "money", "expert": "Dana", "prompt": "cost?"},
               {"id": "tech", "expert": "Ravi", "prompt": "risk?"},
               {"id": "plan", "expert": "Ravi", "prompt": "plan", "depends_on": ["money", "tech"]}],
    "synthesis": {"expert": "Dana"},
}


def rejected(doc: Any) -> InvalidPlan:
    with pytest.raises(InvalidPlan) as info:
        load_plan(doc)
    return info.value


def fields(err: InvalidPlan) -> list[str]:
    return [d["field"] for d in err.details]


def test_valid_plans_load() -> None:
    assert isinstance(load_plan(copy.deepcopy(BOARD)), BoardPlan)
    assert isinstance(load_plan(copy.deepcopy(TEAM)), TeamPlan)


def test_yaml_and_json_text_load() -> None:
    import json

    import yaml

    assert load_plan(yaml.safe_dump(BOARD)).title == "t"
    assert load_plan(json.dumps(TEAM)).kind == "team"


def test_duplicate_expert_name_is_rejected() -> None:
    doc = copy.deepcopy(BOARD)
    doc["experts"].append({"name": "Dana", "role": "another CFO"})
    err = rejected(doc)
    assert err.code == "plan.invalid"
    assert "experts[3].name" in fields(err) or "experts[2].name" in fields(err)
    assert "used twice" in err.message


def test_expert_named_like_the_moderator_is_rejected() -> None:
    doc = copy.deepcopy(BOARD)
    doc["experts"][0]["name"] = "morgan"
    assert "used twice" in rejected(doc).message


@pytest.mark.parametrize("task_id", [
    "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "3F2504E0-4F89-11D3-9A0C-0305E82C3301",
    "3f2504e04f8911d39a0c0305e82c3301", "urn:uuid:3f2504e0-4f89-11d3-9a0c-0305e82c3301",
    "3f2504e0-4f8911d3-9a0c0305e82c-3301",
])
def test_a_task_id_shaped_like_a_plan_id_is_rejected(task_id: str) -> None:
    """(Which models exist is checked at submit against the registry: tests/unit/test_registry.py.)"""
    doc = copy.deepcopy(BOARD)
    doc["task_id"] = task_id
    err = rejected(doc)
    assert fields(err) == ["task_id"] and "plan id" in err.message


def test_task_ids_that_only_look_hexadecimal_are_fine() -> None:
    for task_id in ("crm:deal/42", "deadbeef", "3f2504e0-4f89-11d3-9a0c", "order-3f2504e04f8911d39a0c0305e82c3301"):
        assert load_plan({**copy.deepcopy(BOARD), "task_id": task_id}).task_id == task_id


def test_unknown_expert_in_a_phase_is_rejected() -> None:
    doc = copy.deepcopy(TEAM)
    doc["phases"][1]["expert"] = "Nobody"
    assert fields(rejected(doc)) == ["phases[1].expert"]


def test_unknown_dependency_is_rejected() -> None:
    doc = copy.deepcopy(TEAM)
    doc["phases"][2]["depends_on"] = ["money", "ghost"]
    err = rejected(doc)
    assert fields(err) == ["phases[2].depends_on[1]"]
    assert "ghost" in err.message


def test_dependency_cycle_is_rejected() -> None:
    doc = copy.deepcopy(TEAM)
    doc["phases"][0]["depends_on"] = ["plan"]
    err = rejected(doc)
    assert fields(err) == ["phases"]
    assert "cycle" in err.message and "money" in err.message


def test_empty_plan_and_empty_lists_are_rejected() -> None:
    assert "empty" in rejected({}).message
    doc = copy.deepcopy(BOARD)
    doc["experts"] = []
    assert fields(rejected(doc)) == ["experts"]
    doc = copy.deepcopy(TEAM)
    doc["phases"] = []
    assert fields(rejected(doc)) == ["phases"]


def test_oversized_inputs_are_rejected() -> None:
    doc = copy.deepcopy(BOARD)
    doc["question"] = "x" * 20_001
    assert fields(rejected(doc)) == ["question"]
    doc = copy.deepcopy(BOARD)
    doc["experts"] = [{"name": f"E{i}", "role": "r"} for i in range(25)]
    assert fields(rejected(doc)) == ["experts"]
    with pytest.raises(InvalidPlan) as info:
        load_plan("title: " + "x" * 2000 + "\n", max_bytes=1000)
    assert info.value.message == ("the plan is 2,008 bytes (0.0 MB); the limit is 1,000 bytes "
                                  "(set CONCLAVE_MAX_PLAN_BYTES to raise it)")


def test_unknown_field_and_inline_keys_are_rejected() -> None:
    doc = copy.deepcopy(BOARD)
    doc["models"] = {"default": {"provider": "openai", "api_key": "sk-secret"}}
    err = rejected(doc)
    assert fields(err) == ["models.default.api_key"]
    assert "api_key_env" in err.details[0]["message"]
    assert "sk-secret" not in err.message


def test_wrong_kind_and_types_name_the_field() -> None:
    assert fields(rejected({"kind": "party", "title": "x"}))[0] == "kind"
    doc = copy.deepcopy(BOARD)
    doc["rounds"] = "many"
    assert fields(rejected(doc)) == ["rounds"]


def test_unreadable_file_is_a_clear_error(tmp_path: Any) -> None:
    err = rejected(str(tmp_path / "missing.yaml"))
    assert "cannot read plan file" in err.message
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    assert "not valid YAML" in rejected(str(bad)).message


def test_skills_default_to_full_text() -> None:
    doc = copy.deepcopy(BOARD)
    doc["experts"][0]["skills"] = [{"name": "s", "text": "full body"}]
    plan = load_plan(doc)
    assert isinstance(plan, BoardPlan)
    assert plan.experts[0].skills[0].mode == "full"


def test_paths_that_are_not_plan_files_get_a_clear_error(tmp_path: Any) -> None:
    assert "it is a directory" in rejected(str(tmp_path)).message
    (tmp_path / "dir.yaml").mkdir()
    assert "it is a directory" in rejected(str(tmp_path / "dir.yaml")).message
    assert "no such file" in rejected("plan.txt").message
    assert "no such file" in rejected(tmp_path / "nope" / "x.yaml").message
    plan = tmp_path / "plan.txt"  # any name works when the file exists
    import yaml

    plan.write_text(yaml.safe_dump(BOARD))
    assert load_plan(str(plan)).title == "t"
