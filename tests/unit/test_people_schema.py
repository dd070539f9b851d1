"""People in a plan document: a person's seat (``human: true``, ``respond_within``), approval
(``synthesis.approve``, ``final.approve``) — what is accepted, what is refused and the field
each refusal names, the operator's ceiling, and that plans without people keep their spec."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.core.errors import InvalidPlan
from orchestrator.plan.durations import format_duration, parse_duration
from orchestrator.plan.expand import expand
from orchestrator.plan.schema import BoardPlan, TeamPlan, dump_plan, load_plan
from tests.unit.planes import Planes
from tests.unit.stored import example

EXPERTS = [{"name": "Dana", "role": "CFO"}, {"name": "You", "role": "Founder", "human": True, "respond_within": "2h"}]


def board(**changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = dump_plan(example("board", rounds=1, experts=EXPERTS))
    plan.pop("models", None)
    return {**plan, **changes}


def refused(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidPlan) as caught:
        load_plan(data)
    details = caught.value.details
    assert isinstance(details, list)
    return details[0]


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("3d", 259200),
                                                ("2H", 7200), (" 45 m ", 2700), (600, 600)])
def test_durations_are_written_with_a_unit(text: object, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2", "2 hours", "1.5h", "-5m", "", "h", True, 2.5, None])
def test_a_duration_without_a_unit_is_refused_saying_how_to_write_one(text: object) -> None:
    with pytest.raises(ValueError, match="90s, 30m, 2h or 3d"):
        parse_duration(text)


def test_a_duration_is_written_back_the_short_way() -> None:
    assert [format_duration(s) for s in (90, 5400, 7200, 86400, 259200, 61)] == ["90s", "90m", "2h", "1d", "3d", "61s"]


def test_a_person_s_seat_is_read_and_stored_in_seconds() -> None:
    plan = load_plan(board())
    you = plan.experts[1]
    assert (you.human, you.respond_within, you.models) == (True, 7200, [])  # a person calls no model
    assert plan.people == [you]
    stored = dump_plan(plan)
    assert stored["experts"][1] == {"name": "You", "role": "Founder", "human": True, "respond_within": 7200}
    assert load_plan(stored) == plan  # what the worker parses back from the stored spec
    seats = {p.key: p.meta for p in expand(plan) if p.meta.get("human")}
    assert seats == {"r1.you": {"human": True, "missing_expert": "tolerate", "respond_within": 7200}}


@pytest.mark.parametrize(("value", "why"), [("30s", "out of range"), ("31d", "out of range"),
                                            ("soon", "not a duration"), (True, "not a boolean")])
def test_a_deadline_out_of_bounds_names_the_seat_s_field(value: object, why: str) -> None:
    experts = [EXPERTS[0], {**EXPERTS[1], "respond_within": value}]
    problem = refused(board(experts=experts))
    assert problem["field"] == "experts[1].respond_within" and why in problem["message"]


def test_only_a_person_s_seat_has_a_deadline() -> None:
    experts = [{**EXPERTS[0], "respond_within": "1h"}, EXPERTS[1]]
    assert refused(board(experts=experts)) == {
        "field": "experts[0].respond_within",
        "message": "only a person's seat has a deadline: add human: true (a model's clocks are its model's settings)"}


@pytest.mark.parametrize("field", ["model", "fallback_models", "system", "skills"])
def test_a_person_s_seat_carries_no_model_settings(field: str) -> None:
    value = {"model": "fast", "fallback_models": ["default"], "system": "Be brief.",
             "skills": [{"name": "x", "text": "y"}]}[field]
    experts = [EXPERTS[0], {**EXPERTS[1], field: value}]
    problem = refused(board(experts=experts))
    assert problem["field"] == f"experts[1].{field}" and "runs no model" in problem["message"]


def test_a_person_cannot_chair_a_board() -> None:
    problem = refused(board(moderator={"name": "Morgan", "role": "Chair", "human": True}))
    assert problem["field"] == "moderator.human" and "final: {approve: true}" in problem["message"]


def test_a_person_cannot_write_a_team_s_synthesis() -> None:
    team = example("team").model_dump(mode="json")
    team.pop("models", None)
    people = [{**e, "human": True} if e["name"] == team["synthesis"]["expert"] else e for e in team["experts"]]
    for e in people:
        if e.get("human"):
            for k in ("model", "fallback_models", "system", "skills"):
                e.pop(k, None)
    problem = refused({**team, "experts": people})
    assert problem["field"] == "synthesis.expert" and "synthesis: {approve: true}" in problem["message"]


def test_approval_is_a_boolean_where_the_answer_is_written() -> None:
    team = example("team").model_dump(mode="json")
    team.pop("models", None)
    assert refused({**team, "synthesis": {**team["synthesis"], "approve": "yes"}})["field"] == "synthesis.approve"
    assert refused(board(final={"approve": 1}))["field"] == "final.approve"
    assert refused(board(final={"aprove": True})) == {"field": "final.aprove",
                                                      "message": "unknown field — did you mean 'approve'?"}
    assert refused({**team, "final": {"approve": True}})["field"] == "final"  # a team's answer is its synthesis
    approved_team = load_plan({**team, "synthesis": {**team["synthesis"], "approve": True}})
    assert isinstance(approved_team, TeamPlan) and approved_team.needs_approval
    approved_board = load_plan(board(final={"approve": True}))
    assert isinstance(approved_board, BoardPlan) and approved_board.needs_approval
    assert not load_plan(board()).needs_approval


def test_a_plan_without_people_keeps_the_spec_it_always_had() -> None:
    for name in ("board", "team", "board-vote"):
        stored = dump_plan(example(name))
        assert "final" not in stored and "approve" not in (stored.get("synthesis") or {})
        assert all("human" not in e and "respond_within" not in e for e in stored["experts"])


def test_the_operator_s_ceiling_refuses_a_longer_deadline_naming_the_field(planes: Planes) -> None:
    planes.settings = planes.settings.model_copy(update={"max_respond_within": 3600})
    planes.coordinator.settings = planes.settings
    with pytest.raises(InvalidPlan) as caught:
        planes.coordinator.submit(board())
    assert caught.value.details == [{"field": "experts[1].respond_within",
                                     "message": "2h is longer than this deployment lets a seat wait "
                                                "(CONCLAVE_MAX_RESPOND_WITHIN: 1h)"}]
    experts = [EXPERTS[0], {**EXPERTS[1], "respond_within": "1h"}]
    assert planes.coordinator.submit(board(experts=experts)).created  # at the ceiling: accepted
