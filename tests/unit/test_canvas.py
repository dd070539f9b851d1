"""What one ``advance`` sends: the statically known part of a plan as one canvas of chains
and chords, ending in ``advance`` where the shape can change and at the end."""

from __future__ import annotations

import copy
import dataclasses
import uuid
from datetime import timedelta
from typing import Any

from celery import Celery

from orchestrator.plan import dag
from orchestrator.plan.canvas import compile_canvas, orphans, to_signature
from orchestrator.plan.expand import expand
from orchestrator.plan.schema import load_plan
from orchestrator.plan.seriesparallel import Leaf, Open, Parallel, Series, decompose
from storage.models import utcnow
from storage.read_models import PhaseRecord
from tests.unit.shapes import shape
from tests.unit.test_schema import BOARD, TEAM


def records(doc: dict[str, Any], done: tuple[str, ...] = (), *, marked: tuple[str, ...] = ()) -> list[PhaseRecord]:
    out = []
    now = utcnow()
    for p in expand(load_plan(copy.deepcopy(doc))):
        out.append(PhaseRecord(
            id=str(uuid.uuid4()), plan_id="p", key=p.key, kind=p.kind, expert=p.expert, round=p.round,
            group_key=p.group_key, position=p.position, depends_on=p.depends_on, inputs=p.inputs, meta=p.meta,
            status="completed" if p.key in done else "pending", attempt=0, lease_owner=None,
            lease_expires_at=None, enqueued_at=now if p.key in marked else None, retries_requested=0, summary=None,
            truncated=False, error_code=None, error_message=None, started_at=None,
            finished_at=now if p.key in done else None))
    return out


def shape_for(phases: list[PhaseRecord], resent: tuple[str, ...] = ()) -> Any:
    return shape(compile_canvas("p", phases, [p for p in dag.ready(phases) if p.enqueued_at is None
                                              or p.key in resent], resent=resent))


def team(phases: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    experts = sorted({p["expert"] for p in phases})
    return {"kind": "team", "title": "t", "question": "Should we?", "divergence": "off",
            "experts": [{"name": n, "role": "Analyst"} for n in experts], "phases": phases,
            "synthesis": {"expert": experts[0], "depends_on": extra.pop("synthesis_after", [])}, **extra}


def ph(pid: str, *deps: str, expert: str = "Ada") -> dict[str, Any]:
    return {"id": pid, "expert": expert, "prompt": pid, "depends_on": list(deps)}


# ---------------------------------------------------------------- boards


def test_a_board_is_one_canvas_from_its_opening_to_advance() -> None:
    assert shape_for(records(BOARD)) == [
        "opening", ("r1.dana", "r1.ravi"), "r1.summary", ("r2.dana", "r2.ravi"), "r2.summary", "final", "advance"]


def test_a_board_resumed_mid_round_continues_from_what_is_ready() -> None:
    phases = records(BOARD, done=("opening", "r1.dana"))
    assert shape_for(phases) == ["r1.ravi", "r1.summary", ("r2.dana", "r2.ravi"), "r2.summary", "final", "advance"]


def test_phases_an_earlier_canvas_carries_are_left_to_it_unless_that_canvas_is_broken() -> None:
    # round 1 was sent in the board's canvas; the summary is due from it: nothing to send
    phases = records(BOARD, done=("opening",), marked=("r1.dana", "r1.ravi", "r1.summary", "r2.dana", "r2.ravi",
                                                      "r2.summary", "final"))
    assert [p for p in dag.ready(phases) if p.enqueued_at is None] == []  # every ready phase is carried
    # r1.ravi is re-sent (its message was lost): what its canvas would have triggered goes with it,
    # as far as it does not wait for a phase the earlier canvas still carries (r1.dana)
    assert shape_for(phases, resent=("r1.ravi",)) == ["r1.ravi", "advance"]
    by_key = {p.key: p for p in phases}
    assert orphans(phases, ["r1.ravi"], ["r1.ravi"]) == [by_key[k] for k in (
        "r1.summary", "r2.dana", "r2.ravi", "r2.summary", "final")]  # their marks are released
    done = records(BOARD, done=("opening", "r1.dana"), marked=("r1.ravi", "r1.summary", "r2.dana", "r2.ravi",
                                                              "r2.summary", "final"))
    assert shape_for(done, resent=("r1.ravi",)) == [
        "r1.ravi", "r1.summary", ("r2.dana", "r2.ravi"), "r2.summary", "final", "advance"]


# ---------------------------------------------------------------- teams


def test_a_team_stops_after_its_divergence_check() -> None:
    assert shape_for(records(TEAM)) == [("money", "tech"), "check-1", "advance"]
    # once the check completed (debates, if any, are stored by then) the rest is static
    assert shape_for(records(TEAM, done=("money", "tech", "check-1"))) == ["plan", "synthesis", "advance"]


def rec(key: str, *deps: str, kind: str = "expert", position: int = 0) -> PhaseRecord:
    return PhaseRecord(
        id=f"id-{key}", plan_id="p", key=key, kind=kind, expert="Ada", round=None, group_key=None,
        position=position, depends_on=list(deps), inputs=list(deps), meta={}, status="pending", attempt=0,
        lease_owner=None, lease_expires_at=None, enqueued_at=None, retries_requested=0, summary=None,
        truncated=False, error_code=None, error_message=None, started_at=None, finished_at=None)


def test_a_check_on_one_branch_ends_its_own_lane_without_waiting_for_the_other() -> None:
    phases = [rec("a1", position=0), rec("a2", position=1), rec("b1", position=2), rec("b2", "b1", position=3),
              rec("check-1", "a1", "a2", kind="divergence", position=4),
              rec("after", "check-1", "a1", "a2", "b2", position=5)]
    canvas = compile_canvas("p", phases, dag.ready(phases))
    # the check's lane gets its own advance (debates may follow it), the other lane runs on and
    # ends in its own; "after" waits for the check, so no canvas carries it yet
    assert shape(canvas) == ([("a1", "a2"), "check-1", "advance"], ["b1", "b2", "advance"])
    assert canvas.advances == 2 and "after" not in [r.key for r in canvas.runs]


def test_series_parallel_dags_compile_exactly() -> None:
    doc = team([ph("a"), ph("b", "a"), ph("c", "a", expert="Bo"), ph("d", "b", "c"), ph("e", "d"),
                ph("f", "d", expert="Bo"), ph("g", "e", "f")], synthesis_after=["g"])
    assert shape_for(records(doc)) == ["a", ("b", "c"), "d", ("e", "f"), "g", "synthesis", "advance"]
    # lanes of different lengths side by side, joined once
    doc = team([ph("a"), ph("a2", "a"), ph("a3", "a2"), ph("b", expert="Bo")], synthesis_after=["a3", "b"])
    assert shape_for(records(doc)) == [(["a", "a2", "a3"], "b"), "synthesis", "advance"]


def test_a_dag_that_is_not_series_parallel_ends_each_lane_in_advance_instead_of_a_barrier() -> None:
    # the "N": c needs a; d needs a and b. No chain/chord says exactly that.
    doc = team([ph("a"), ph("b", expert="Bo"), ph("c", "a"), ph("d", "a", "b", expert="Bo")],
               synthesis_after=["c", "d"])
    phases = records(doc)
    assert shape_for(phases) == (["a", "advance"], ["b", "advance"])
    # once a is done, the rest is series-parallel again: b then d beside c, then advance
    assert shape_for(records(doc, done=("a",))) == [(["b", "d"], "c"), "synthesis", "advance"]


def test_the_decomposition_itself() -> None:
    deps = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    assert decompose(list(deps), deps) == Series((Leaf("a"), Parallel((Leaf("b"), Leaf("c"))), Leaf("d")))
    n = {"a": [], "b": [], "c": ["a"], "d": ["a", "b"], "e": ["c", "d"]}
    assert decompose(list(n), n) == Open(Parallel((Leaf("a"), Leaf("b"))))
    # a redundant edge (a -> d besides a -> b -> d) does not break the structure
    deps = {"a": [], "b": ["a"], "d": ["a", "b"]}
    assert decompose(list(deps), deps) == Series((Leaf("a"), Leaf("b"), Leaf("d")))


# ---------------------------------------------------------------- readiness and signatures


def test_a_failed_dependency_blocks_unless_tolerated() -> None:
    phases = records(BOARD, done=("opening", "r1.dana"))
    phases = [dataclasses.replace(p, status="failed") if p.key == "r1.ravi" else p for p in phases]
    assert [p.key for p in dag.ready(phases)] == ["r1.summary"]  # a board summary tolerates a missing expert
    assert dag.to_skip(phases) == []


def test_a_marked_phase_is_resent_only_once_it_has_been_ready_for_requeue_after() -> None:
    now = utcnow()
    cutoff = now - timedelta(seconds=60)
    long_ago = now - timedelta(seconds=600)
    phases = records(BOARD, done=("opening",), marked=("r1.dana", "r1.ravi"))
    phases = [dataclasses.replace(p, enqueued_at=long_ago if p.enqueued_at else None,
                                  finished_at=now if p.finished_at else None) for p in phases]
    # sent long ago in the board's canvas, but the opening finished just now: the message is due
    assert dag.sendable(phases, now=now, cutoff=cutoff, force=False) == []
    phases = [dataclasses.replace(p, finished_at=long_ago if p.finished_at else None) for p in phases]
    assert [p.key for p in dag.sendable(phases, now=now, cutoff=cutoff, force=False)] == ["r1.dana", "r1.ravi"]
    assert len(dag.sendable(records(BOARD), now=now, cutoff=cutoff, force=True)) == 1  # resume: every head


def flat(sig: Any) -> list[Any]:
    """A signature as Celery will run it: ("run", key) / "advance" in order, a chord as
    {"header": [...], "body": [...]}, a group as a tuple."""
    kind = type(sig).__name__
    if kind == "_chain":
        return [x for t in sig.tasks for x in flat(t)]
    if kind == "_chord":
        return [{"header": [flat(t) for t in sig.tasks], "body": flat(sig.body)}]
    if kind == "group":
        return [tuple(flat(t) for t in sig.tasks)]
    assert sig.immutable  # a run_phase never receives its predecessor's result
    if sig.task == "conclave.advance":
        return ["advance"]
    return [("run", sig.kwargs["phase_key"])] + (["advance"] if sig.kwargs.get("advance") else [])


def signatures(sig: Any) -> Any:
    """Every task signature in a canvas signature, in order."""
    inner = [*getattr(sig, "tasks", ()), *([sig.body] if type(sig).__name__ == "_chord" else [])]
    if not inner:
        yield sig
    for t in inner:
        yield from signatures(t)


def test_signatures_are_chains_of_chords_by_registered_name() -> None:
    app = Celery("t", set_as_current=False)
    phases = records(BOARD)
    sig = to_signature(compile_canvas("p", phases, dag.ready(phases)), app)
    assert flat(sig) == [
        ("run", "opening"),
        {"header": [[("run", "r1.dana")], [("run", "r1.ravi")]],
         "body": [("run", "r1.summary"),
                  {"header": [[("run", "r2.dana")], [("run", "r2.ravi")]],
                   "body": [("run", "r2.summary"), ("run", "final"), "advance"]}]}]
    tasks = [s for s in sig.tasks]
    assert tasks[0].task == "conclave.run_phase" and tasks[0].options["shadow"] == "conclave.run_phase[opening]"
    # the closing advance is the final run's own last step: no task of its own
    runs = list(signatures(sig))
    assert [s.task for s in runs] == ["conclave.run_phase"] * 8
    assert [s.kwargs["phase_key"] for s in runs if s.kwargs.get("advance")] == ["final"]
