"""Which phases are chained and which are chorded."""

from __future__ import annotations

import copy
import dataclasses
import uuid
from typing import Any

from celery import Celery

from orchestrator import dag
from orchestrator.canvas import compile_canvas, to_signature
from orchestrator.expand import expand
from orchestrator.schema import load_plan
from storage.records import PhaseRecord
from tests.unit.test_schema import BOARD, TEAM


def records(doc: dict[str, Any], done: tuple[str, ...] = ()) -> list[PhaseRecord]:
    out = []
    for p in expand(load_plan(copy.deepcopy(doc))):
        out.append(PhaseRecord(
            id=str(uuid.uuid4()), plan_id="p", key=p.key, kind=p.kind, expert=p.expert, round=p.round,
            group_key=p.group_key, position=p.position, depends_on=p.depends_on, meta=p.meta,
            status="completed" if p.key in done else "pending", attempt=0, lease_owner=None,
            lease_expires_at=None, enqueued_at=None, retries_requested=0, summary=None, truncated=False,
            error_code=None, error_message=None, started_at=None, finished_at=None))
    return out


def canvas_for(phases: list[PhaseRecord]) -> Any:
    return compile_canvas("p", phases, dag.ready(phases))


def test_board_start_is_a_chain_of_the_opening_then_advance() -> None:
    c = canvas_for(records(BOARD))
    assert not c.is_chord and [[r.key for r in lane] for lane in c.lanes] == [["opening"]]


def test_board_round_is_a_chord_of_the_experts() -> None:
    c = canvas_for(records(BOARD, done=("opening",)))
    assert c.is_chord
    assert [[r.key for r in lane] for lane in c.lanes] == [["r1.dana"], ["r1.ravi"]]


def test_last_summary_and_final_are_chained() -> None:
    done = ("opening", "r1.dana", "r1.ravi", "r1.summary", "r2.dana", "r2.ravi")
    c = canvas_for(records(BOARD, done=done))
    assert [[r.key for r in lane] for lane in c.lanes] == [["r2.summary", "final"]]


def test_team_parallel_phases_are_chorded_and_the_check_ends_its_lane() -> None:
    c = canvas_for(records(TEAM))
    assert c.is_chord and [[r.key for r in lane] for lane in c.lanes] == [["money"], ["tech"]]
    c = canvas_for(records(TEAM, done=("money", "tech")))
    assert [[r.key for r in lane] for lane in c.lanes] == [["check-1"]]  # never chain past a check


def test_a_failed_dependency_blocks_unless_tolerated() -> None:
    phases = records(BOARD, done=("opening", "r1.dana"))
    phases = [dataclasses.replace(p, status="failed") if p.key == "r1.ravi" else p for p in phases]
    assert [p.key for p in dag.ready(phases)] == ["r1.summary"]  # a board summary tolerates a missing expert
    assert dag.to_skip(phases) == []


def test_signatures_end_in_advance_and_use_registered_names() -> None:
    app = Celery("t", set_as_current=False)
    chord_sig = to_signature(canvas_for(records(BOARD, done=("opening",))), app)
    assert type(chord_sig).__name__ == "_chord"
    assert chord_sig.body.task == "conclave.advance"
    assert {t.task for t in chord_sig.tasks} == {"conclave.run_phase"}
    assert all(t.immutable for t in chord_sig.tasks)
    chain_sig = to_signature(canvas_for(records(BOARD)), app)
    assert [t.task for t in chain_sig.tasks] == ["conclave.run_phase", "conclave.advance"]
    assert chain_sig.tasks[0].kwargs["phase_key"] == "opening"
