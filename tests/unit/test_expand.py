"""Plans expand into the phases that are stored for them."""

from __future__ import annotations

import copy

from orchestrator.plan.expand import expand
from orchestrator.plan.schema import load_plan
from tests.unit.test_schema import BOARD, TEAM


def test_board_expands_to_opening_rounds_summaries_and_final() -> None:
    phases = expand(load_plan(copy.deepcopy(BOARD)))
    assert [p.key for p in phases] == [
        "opening", "r1.dana", "r1.ravi", "r1.summary", "r2.dana", "r2.ravi", "r2.summary", "final"]
    by = {p.key: p for p in phases}
    assert by["r1.dana"].depends_on == ["opening"] and by["r1.dana"].kind == "turn"
    assert by["r1.summary"].depends_on == ["r1.dana", "r1.ravi"]
    assert by["r2.ravi"].depends_on == ["r1.summary"] and by["r2.ravi"].round == 2
    assert by["final"].depends_on == ["r2.summary"] and by["final"].meta["terminal"]
    assert by["r1.summary"].meta["tolerate_failed_deps"] is True
    assert [p.position for p in phases] == list(range(len(phases)))


def test_board_missing_expert_fatal_does_not_tolerate() -> None:
    doc = copy.deepcopy(BOARD) | {"missing_expert": "fatal"}
    by = {p.key: p for p in expand(load_plan(doc))}
    assert by["r1.summary"].meta["tolerate_failed_deps"] is False


def test_team_inserts_a_check_after_parallel_phases_and_ends_in_synthesis() -> None:
    phases = expand(load_plan(copy.deepcopy(TEAM)))
    by = {p.key: p for p in phases}
    assert set(by) == {"money", "tech", "plan", "check-1", "synthesis"}
    assert by["check-1"].kind == "divergence" and by["check-1"].depends_on == ["money", "tech"]
    assert by["plan"].depends_on == ["money", "tech", "check-1"]
    assert by["synthesis"].depends_on == ["money", "tech", "plan", "check-1"]
    assert by["synthesis"].meta["terminal"] and phases[-1].key == "synthesis"


def test_team_without_debates_has_no_checks() -> None:
    doc = copy.deepcopy(TEAM) | {"max_debates": 0}
    assert "check-1" not in {p.key for p in expand(load_plan(doc))}
