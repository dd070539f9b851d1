"""What a user reads of a plan's spend adds up: cost is the completing attempts' rows, split
into provider-reported and estimated tokens; waste is every other attempt's rows, whoever
reported them; a running attempt is live cost, not waste; the view carries the stored plan
and phases unchanged; and waiting for it ends when it is final or at the timeout (issue 18's
provider-reported waste; survivors of the systematic mutation run, docs/mutation.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from orchestrator.core.errors import WaitTimeout
from orchestrator.plan.views import PlanView, UsageView, plan_view, wait_final
from storage import usage
from storage.read_models import UsageRecord
from storage.status import PhaseStatus, PlanStatus
from tests.unit.planes import Planes
from tests.unit.stored import example

BOARD = example("board", rounds=1, task_id="t-42", labels=["q3", "finance"],
                experts=[{"name": "Dana", "role": "Chief Financial Officer"},
                         {"name": "Ravi", "role": "Chief Technology Officer"}])


def finished(planes: Planes) -> str:
    plan_id = planes.coordinator.submit(BOARD).plan_id
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    return plan_id


def record(planes: Planes, plan_id: str, key: str, *, attempt: int, seq: int, tin: int, tout: int, source: str
           ) -> None:
    phase = planes.state(plan_id).by_key()[key]
    assert usage.record_usage(planes.db, plan_id=plan_id, phase_id=phase.id, attempt=attempt, seq=seq,
                              purpose="answer", model="m", input_tokens=tin, output_tokens=tout, source=source,
                              method=None)


def view(planes: Planes, plan_id: str) -> PlanView:
    return planes.coordinator.reads.view(plan_id)


def consistent(u: UsageView) -> None:
    assert u.total_tokens == u.input_tokens + u.output_tokens == u.provider_tokens + u.estimated_tokens


def test_provider_reported_cost_and_waste_are_told_apart(planes: Planes) -> None:
    plan_id = finished(planes)
    before = view(planes, plan_id)
    opening = planes.state(plan_id).by_key()["opening"]
    assert before.usage.estimated and before.usage.provider_tokens == 0 and before.usage.wasted_tokens == 0
    # the completing attempt's provider report, then two calls of a lost attempt: one reported, one estimated
    record(planes, plan_id, "opening", attempt=opening.attempt, seq=90, tin=100, tout=200, source="provider")
    record(planes, plan_id, "opening", attempt=opening.attempt + 1, seq=0, tin=7, tout=11, source="provider")
    record(planes, plan_id, "opening", attempt=opening.attempt + 1, seq=1, tin=13, tout=17, source="estimated")
    after = view(planes, plan_id)
    consistent(after.usage)
    consistent(after.phase("opening").usage)
    b, a = before.usage, after.usage
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (b.input_tokens + 100, b.output_tokens + 200,
                                                                 b.total_tokens + 300)
    assert (a.provider_tokens, a.estimated_tokens) == (300, b.estimated_tokens)
    assert (a.wasted_tokens, a.calls, a.estimated) == (7 + 11 + 13 + 17, b.calls + 3, True)
    bo, ao = before.phase("opening").usage, after.phase("opening").usage
    assert (ao.total_tokens, ao.provider_tokens, ao.wasted_tokens, ao.calls) == (
        bo.total_tokens + 300, 300, 48, bo.calls + 3)
    # every other phase is as it was
    assert [p.usage for p in after.phases if p.key != "opening"] == [
        p.usage for p in before.phases if p.key != "opening"]


def test_spend_reported_only_by_providers_is_not_an_estimate(planes: Planes) -> None:
    plan_id = finished(planes)
    phase = planes.state(plan_id).by_key()["opening"]
    rows = [UsageRecord(phase.id, phase.attempt, 0, "answer", "m", 5, 6, "provider", None, True),
            UsageRecord(phase.id, phase.attempt + 1, 0, "answer", "m", 50, 60, "provider", None, False)]
    u = plan_view(planes.state(plan_id), rows).usage
    assert u == UsageView(input_tokens=5, output_tokens=6, total_tokens=11, estimated=False, provider_tokens=11,
                          estimated_tokens=0, wasted_tokens=110, calls=2)


def test_a_running_attempt_is_live_cost_and_its_earlier_attempts_stay_waste(planes: Planes) -> None:
    plan_id = finished(planes)
    state = planes.state(plan_id)
    final = state.by_key()["final"]
    record(planes, plan_id, "final", attempt=final.attempt + 1, seq=0, tin=40, tout=2, source="provider")
    done = view(planes, plan_id).phase("final").usage
    # the phase runs again (attempt + 1): its completed attempt's rows are no longer the cost
    running = replace(state, phases=[replace(p, status=PhaseStatus.RUNNING, attempt=final.attempt + 1)
                                     if p.key == "final" else p for p in state.phases])
    # as the database derives it: no attempt of a phase that is not completed is counted
    rows = [replace(r, counted=False) if r.phase_id == final.id else r for r in planes.usage(plan_id)]
    live = plan_view(running, rows).phase("final").usage
    consistent(live)
    assert (live.total_tokens, live.provider_tokens, live.calls) == (42, 42, done.calls)
    assert live.wasted_tokens == done.total_tokens and done.wasted_tokens == 42  # the two attempts swap roles
    others = plan_view(running, rows)
    assert [p.usage for p in others.phases if p.key != "final"] == [
        p.usage for p in view(planes, plan_id).phases if p.key != "final"]


def test_the_view_carries_the_stored_plan_and_phases(planes: Planes) -> None:
    plan_id = finished(planes)
    planes.coordinator.cancel(plan_id)  # too late to change anything but the request flag
    state = planes.state(plan_id)
    p, v = state.plan, view(planes, plan_id)
    assert (v.id, v.task_id, v.title, v.kind, v.labels, v.status, v.cancel_requested, v.error_code, v.error) == (
        p.id, "t-42", p.title, "board", ["q3", "finance"], PlanStatus.COMPLETED, p.cancel_requested, p.error_code,
        p.error_message)
    assert p.finished_at is not None and v.created_at == p.created_at.isoformat()
    assert v.finished_at == p.finished_at.isoformat() and v.final and v.done == len(state.phases)
    assert [(ph.id, ph.key, ph.kind, ph.expert, ph.round, ph.status, ph.attempt, ph.depends_on, ph.truncated,
             ph.summary, ph.error_code, ph.error, ph.retries_requested) for ph in v.phases] == [
        (ph.id, ph.key, ph.kind, ph.expert, ph.round, ph.status, ph.attempt, ph.depends_on, ph.truncated,
         ph.summary, ph.error_code, ph.error_message, ph.retries_requested) for ph in state.phases]
    assert {ph.expert for ph in v.phases} >= {"Dana", "Ravi"} and any(ph.summary for ph in v.phases)
    assert v.phase("final").key == "final" and v.phase("opening").key == "opening"
    assert v.to_dict()["phases"][0]["usage"]["calls"] == v.phases[0].usage.calls


def test_the_view_carries_a_failure_as_stored(planes: Planes) -> None:
    plan_id = finished(planes)
    state = planes.state(plan_id)
    failed = replace(state, plan=replace(state.plan, status=PlanStatus.FAILED, error_code="llm.upstream",
                                         error_message="the provider answered 502"),
                     phases=[replace(p, status=PhaseStatus.FAILED, error_code="llm.timeout", error_message="idle")
                             if p.key == "final" else p for p in state.phases])
    v = plan_view(failed, planes.usage(plan_id))
    assert (v.status, v.error_code, v.error) == (PlanStatus.FAILED, "llm.upstream", "the provider answered 502")
    assert (v.phase("final").error_code, v.phase("final").error) == ("llm.timeout", "idle")
    assert v.phase("opening").error_code is None


def test_waiting_ends_when_the_plan_is_final_or_at_the_timeout(planes: Planes) -> None:
    plan_id = finished(planes)
    done = view(planes, plan_id)
    running = replace(done, status=PlanStatus.RUNNING)
    reads: list[str] = []

    def get(after: int) -> Callable[[str], PlanView]:
        def read(ref: str) -> PlanView:
            reads.append(ref)
            return done if len(reads) > after else running
        return read

    assert wait_final(get(3), plan_id, None, 0.001) == done and len(reads) == 4
    reads.clear()
    with pytest.raises(WaitTimeout) as info:
        wait_final(get(200), plan_id, 0.05, 0.005)
    assert str(info.value) == f"plan {plan_id} still running after 0.05s" and 2 <= len(reads) < 200
