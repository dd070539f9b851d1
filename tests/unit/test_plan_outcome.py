"""The pure decisions of ``orchestrator.plan.dag`` over stored phases: how a plan ends (cancel,
then budget, then the terminal phases, then the first failure), what is skipped and why,
what is ready, and what an ``advance`` sends. Each case is a handful of stored records."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.plan import dag
from storage.read_models import NewPhase, PhaseRecord, PlanRecord
from storage.status import PlanStatus
from tests.unit.stored import record

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ph(key: str, status: str = "completed", deps: tuple[str, ...] = (), **changes: Any) -> PhaseRecord:
    meta = changes.pop("meta", {})
    return dataclasses.replace(record(NewPhase(key, "opening", 0, list(deps), meta=meta), status), **changes)


def plan(cancel: bool = False) -> PlanRecord:
    return PlanRecord(id="plan-1", tenant="default", task_id=None, title="t", kind="board", spec={},
                      status=PlanStatus.RUNNING, cancel_requested=cancel, max_debates=0, error_code=None,
                      error_message=None, created_at=T0, updated_at=T0, finished_at=None)


TERMINAL = {"terminal": True}
EXHAUSTED = {"error_code": dag.BUDGET_EXHAUSTED}

# ------------------------------------------------------------------ outcome


def test_no_outcome_while_a_phase_is_pending_or_running() -> None:
    assert dag.outcome(plan(), [ph("a"), ph("z", "pending", meta=TERMINAL)]) is None
    assert dag.outcome(plan(cancel=True), [ph("a", "running"), ph("z", meta=TERMINAL)]) is None


def test_a_cancel_that_lands_after_the_final_phase_completed_still_ends_cancelled() -> None:
    phases = [ph("a"), ph("z", meta=TERMINAL)]
    assert dag.outcome(plan(cancel=True), phases) == (PlanStatus.CANCELLED, "plan.cancelled",
                                                      "the plan was cancelled")
    assert dag.outcome(plan(), phases) == (PlanStatus.COMPLETED, None, None)


def test_a_cancel_outranks_an_exhausted_budget_and_a_failure() -> None:
    phases = [ph("a", "failed", error_code="x", error_message="boom"),
              ph("b", "failed", error_message="spent", **EXHAUSTED), ph("z", "skipped", meta=TERMINAL)]
    assert dag.outcome(plan(cancel=True), phases)[0] == PlanStatus.CANCELLED  # type: ignore[index]


def test_an_exhausted_budget_outranks_a_failure_and_carries_the_first_exhausted_message() -> None:
    phases = [ph("a", "failed", error_code="llm.refused", error_message="boom"),
              ph("b", "failed", error_message="spent 100 of 100", **EXHAUSTED),
              ph("c", "failed", error_message="later", **EXHAUSTED), ph("z", "skipped", meta=TERMINAL)]
    assert dag.outcome(plan(), phases) == (PlanStatus.BUDGET_EXHAUSTED, "plan.budget_exhausted",
                                           "spent 100 of 100")


def test_an_exhausted_budget_ends_the_plan_so_even_if_the_final_phase_completed() -> None:
    phases = [ph("b", "failed", error_message="spent", **EXHAUSTED), ph("z", meta=TERMINAL)]
    assert dag.outcome(plan(), phases)[0] == PlanStatus.BUDGET_EXHAUSTED  # type: ignore[index]


def test_completed_when_every_terminal_phase_completed_whatever_else_failed() -> None:
    phases = [ph("a", "failed", error_code="x", error_message="boom"), ph("y", meta=TERMINAL),
              ph("z", meta=TERMINAL)]
    assert dag.outcome(plan(), phases) == (PlanStatus.COMPLETED, None, None)


def test_failed_with_the_first_failed_phase_when_a_terminal_phase_did_not_complete() -> None:
    phases = [ph("a", "failed", error_code="llm.refused", error_message="boom"),
              ph("b", "failed", error_code="llm.timeout", error_message="slow"),
              ph("y", meta=TERMINAL), ph("z", "skipped", meta=TERMINAL)]
    assert dag.outcome(plan(), phases) == (PlanStatus.FAILED, "llm.refused", "phase a failed: boom")


def test_failed_as_incomplete_when_nothing_failed_but_the_final_phase_did_not_run() -> None:
    expected = (PlanStatus.FAILED, "plan.incomplete", "the final phase did not run")
    assert dag.outcome(plan(), [ph("a"), ph("z", "skipped", meta=TERMINAL)]) == expected
    assert dag.outcome(plan(), [ph("a"), ph("b")]) == expected  # no terminal phase: never completed
    assert dag.outcome(plan(), [ph("a"), ph("z", meta={"terminal": False})]) == expected


# ------------------------------------------------------------------ skips


def test_a_failure_skips_everything_downstream_that_needs_it_and_nothing_else() -> None:
    phases = [ph("a", "failed"), ph("b", "pending", ("a",)), ph("ok"), ph("c", "pending", ("b",)),
              ph("d", "pending", ("ok",)), ph("e", "pending", ("c", "ok"))]
    reasons, after = dag.skips(phases)
    assert reasons == {"a phase it depends on did not complete": ["b", "c", "e"]}
    assert {p.key: p.status for p in after} == {"a": "failed", "b": "skipped", "ok": "completed",
                                                 "c": "skipped", "d": "pending", "e": "skipped"}
    assert dag.to_skip(phases) == ["b"]  # one step at a time


def test_a_phase_that_tolerates_failed_inputs_is_not_skipped_and_runs_once_they_are_final() -> None:
    tolerant = {"tolerate_failed_deps": True}
    for gone in ("failed", "skipped", "cancelled"):
        phases = [ph("a", gone), ph("b"), ph("s", "pending", ("a", "b"), meta=tolerant)]
        assert dag.skips(phases) == ({}, phases)
        assert [p.key for p in dag.ready(phases)] == ["s"]
    waiting = [ph("a", "running"), ph("s", "pending", ("a",), meta=tolerant)]
    assert dag.ready(waiting) == []
    # a given-up input before one still running: not ready yet
    assert dag.ready([ph("a", "failed"), ph("r", "running"), ph("s", "pending", ("a", "r"), meta=tolerant)]) == []
    assert dag.ready([ph("a", "failed"), ph("s", "pending", ("a",))]) == []


def test_an_exhausted_budget_skips_every_pending_phase() -> None:
    phases = [ph("a", "failed", **EXHAUSTED), ph("b", "pending"), ph("ok"), ph("c", "pending", ("ok",))]
    reasons, after = dag.skips(phases)
    assert reasons == {"the plan's budget is exhausted": ["b", "c"]}
    assert [p.status for p in after] == ["failed", "skipped", "completed", "skipped"]
    assert dag.skips([ph("a", "failed", **EXHAUSTED), ph("ok")]) == ({}, [ph("a", "failed", **EXHAUSTED),
                                                                          ph("ok")])


def test_nothing_to_skip() -> None:
    phases = [ph("a"), ph("b", "pending", ("a",)), ph("c", "pending", ("missing",))]
    assert dag.skips(phases) == ({}, phases)


# ------------------------------------------------------------------ ready


def test_ready_means_pending_with_every_input_completed() -> None:
    phases = [ph("a"), ph("r", "running"), ph("b", "pending", ("a",)), ph("c", "pending", ("a", "r")),
              ph("d", "pending", ("missing",)), ph("e", "pending"), ph("f", "running", ("a",))]
    assert [p.key for p in dag.ready(phases)] == ["b", "e"]


def test_ready_since_is_when_the_last_direct_input_became_final() -> None:
    a, b = ph("a", finished_at=T0), ph("b", "failed", finished_at=T0 + timedelta(seconds=5))
    by_key = {p.key: p for p in (a, b, ph("r", "running"), ph("n", finished_at=None))}
    assert dag.ready_since(ph("x", "pending", ("b", "a")), by_key) == T0 + timedelta(seconds=5)
    assert dag.ready_since(ph("x", "pending", ("a", "r")), by_key) is None  # one is not final
    assert dag.ready_since(ph("x", "pending", ("a", "n")), by_key) is None  # one has no time
    assert dag.ready_since(ph("x", "pending", ("a", "missing")), by_key) is None
    assert dag.ready_since(ph("x", "pending"), by_key) is None


# ------------------------------------------------------------------ closure


def test_closure_is_every_transitive_input_in_plan_order() -> None:
    deps = {"z": [], "y": ["z"], "x": ["y", "unknown"], "w": ["x", "z"], "loop": ["loop", "w"]}
    assert dag.closure(deps) == {"z": [], "y": ["z"], "x": ["z", "y"], "w": ["z", "y", "x"],
                                 "loop": ["z", "y", "x", "w"]}


# ------------------------------------------------------------------ sendable

NOW = T0 + timedelta(minutes=10)
CUTOFF = NOW - timedelta(seconds=30)
RECENT, STALE = CUTOFF + timedelta(seconds=1), CUTOFF - timedelta(seconds=1)


def _sent(*phases: PhaseRecord, force: bool = False) -> list[str]:
    return [p.key for p in dag.sendable(list(phases), now=NOW, cutoff=CUTOFF, force=force)]


def test_a_ready_phase_is_sent_unless_a_canvas_recently_carried_it() -> None:
    done_long_ago = ph("a", finished_at=STALE)
    assert _sent(done_long_ago, ph("b", "pending", ("a",))) == ["b"]
    assert _sent(done_long_ago, ph("b", "pending", ("a",), enqueued_at=RECENT)) == []
    assert _sent(done_long_ago, ph("b", "pending", ("a",), enqueued_at=CUTOFF)) == []  # not before the cutoff
    assert _sent(done_long_ago, ph("b", "pending", ("a",), enqueued_at=STALE)) == ["b"]
    assert _sent(done_long_ago, ph("b", "pending", ("a",), enqueued_at=RECENT), force=True) == ["b"]
    assert _sent(ph("a", "running"), ph("b", "pending", ("a",))) == []  # not ready
    assert _sent(ph("a", "running"), ph("b", "pending", ("a",)), force=True) == []


def test_a_stale_mark_waits_while_the_inputs_became_final_recently() -> None:
    # sent in a big canvas long ago, marked; its input finished just now: its message is due any moment
    assert _sent(ph("a", finished_at=RECENT), ph("b", "pending", ("a",), enqueued_at=STALE)) == []
    assert _sent(ph("a", finished_at=CUTOFF), ph("b", "pending", ("a",), enqueued_at=STALE)) == []
    assert _sent(ph("b", "pending", enqueued_at=STALE)) == ["b"]  # no inputs: ready since ever


def test_a_running_phase_whose_lease_expired_is_sent_again_unless_recently_resent() -> None:
    expired, live = NOW - timedelta(seconds=1), NOW + timedelta(seconds=1)
    assert _sent(ph("r", "running", lease_expires_at=expired)) == ["r"]
    assert _sent(ph("r", "running", lease_expires_at=expired, enqueued_at=STALE)) == ["r"]
    assert _sent(ph("r", "running", lease_expires_at=expired, enqueued_at=RECENT)) == []
    assert _sent(ph("r", "running", lease_expires_at=expired, enqueued_at=CUTOFF)) == []
    assert _sent(ph("r", "running", lease_expires_at=expired, enqueued_at=RECENT), force=True) == ["r"]
    assert _sent(ph("r", "running", lease_expires_at=NOW)) == []  # expires now, not yet expired
    assert _sent(ph("r", "running", lease_expires_at=live), force=True) == []
    assert _sent(ph("r", "running", lease_expires_at=None), force=True) == []
    assert _sent(ph("c", lease_expires_at=expired), force=True) == []  # completed: never sent
