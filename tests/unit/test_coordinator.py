"""The control plane, driven by hand against SQLite: what ``submit``, ``advance``,
``cancel`` and ``resume`` store and send (recorded by the RecordingDispatcher), and
what the bus carries — the stored events themselves, once each."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from orchestrator.core.errors import ResumeInProgress
from orchestrator.plan.canvas import Canvas
from storage import plans
from storage.models import Phase, utcnow
from storage.status import Outcome, PhaseStatus, PlanStatus
from tasks.lease import Lease
from tests.unit.planes import Planes, published
from tests.unit.shapes import shape
from tests.unit.stored import example

# two experts, one round: opening → r1.dana, r1.ravi → r1.summary → final
SMALL_BOARD = example("board", rounds=1, experts=[{"name": "Dana", "role": "Chief Financial Officer"},
                                                  {"name": "Ravi", "role": "Chief Technology Officer"}])


def test_a_board_runs_from_its_recorded_canvases_to_a_stored_result(planes: Planes) -> None:
    res = planes.coordinator.submit(example("board"))
    plan_id = res.plan_id
    keys = list(planes.statuses(plan_id))
    assert res.created and res.enqueued == keys  # the whole board is static: one canvas
    assert set(planes.statuses(plan_id).values()) == {PhaseStatus.PENDING}
    [first] = planes.dispatcher.sent
    turns = [tuple(f"r{r}.{s}" for s in ("dana", "ravi", "sofia", "tomas")) for r in (1, 2)]
    assert shape(first) == ["opening", turns[0], "r1.summary", turns[1], "r2.summary", "final", "advance"]
    sub = planes.bus.subscribe(plan_id)

    assert planes.run_all() == 1  # the advance at its end sends nothing: every phase ran from that canvas

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED and len(state.phases) == 12
    assert set(planes.statuses(plan_id).values()) == {PhaseStatus.COMPLETED}
    assert planes.contents(plan_id) == {p.id: 1 for p in state.phases}  # one content row per phase
    rows = planes.usage(plan_id)
    assert sorted((r.phase_id, r.attempt, r.seq) for r in rows) == sorted((p.id, 1, 1) for p in state.phases)
    assert all(r.counted and r.source == "estimated" and r.method == "offline:chars/4" for r in rows)
    final = planes.text(plan_id, "final") or ""
    assert "Recommendation:" in final and all(f"[r2.{s}]" in final for s in ("dana", "ravi", "sofia", "tomas"))

    stored = planes.events(plan_id)
    assert stored[0].type == "plan_submitted" and stored[-1].type == "plan_finished"
    assert stored[-1].data == {"status": "completed", "error_code": None, "error": None}
    completed = [e for e in stored if e.type == "phase_completed"]
    assert sorted(e.data["k"] for e in completed) == list(range(1, 13)) and {e.data["n"] for e in completed} == {12}
    started = [e for e in stored if e.type == "phase_started"]
    assert len(started) == 12 and all(e.data["worker"] == "unit:1:runner" and e.data["attempt"] == 1
                                      for e in started)

    # the bus carried every stored event after the subscription, once, as stored; chunks in between
    messages = published(sub)
    assert [m for m in messages if m["type"] != "chunk"] == [e.message() for e in stored[1:]]
    opening = "".join(m["text"] for m in messages if m["type"] == "chunk" and m["phase"] == "opening")
    assert opening == planes.text(plan_id, "opening")


def test_a_team_inserts_its_debate_before_anything_waits_on_it(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example("team")).plan_id
    planes.run_all()

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED
    by_key = state.by_key()
    assert set(by_key) == {"growth", "finance", "check-1", "debate-check-1.priya", "debate-check-1.marcus",
                           "rollout", "synthesis"}
    assert all(p.status == PhaseStatus.COMPLETED for p in state.phases)
    assert {"debate-check-1.priya", "debate-check-1.marcus"} <= set(by_key["rollout"].depends_on)

    stored = planes.events(plan_id)
    [inserted] = [e for e in stored if e.type == "debate_inserted"]
    assert inserted.data == {"check": "check-1", "topic": inserted.data["topic"],
                             "participants": ["Priya", "Marcus"],
                             "phases": ["debate-check-1.priya", "debate-check-1.marcus"]}
    check_done = next(e for e in stored if e.type == "phase_completed" and e.phase_key == "check-1")
    assert inserted.id < check_done.id and check_done.data["n"] == 7  # same transaction, counted after
    order = [(e.type, e.phase_key) for e in stored]
    debates_done = max(order.index(("phase_completed", k)) for k in ("debate-check-1.priya", "debate-check-1.marcus"))
    assert debates_done < order.index(("phase_started", "rollout"))
    synthesis = planes.text(plan_id, "synthesis") or ""
    assert all(f"[{k}]" in synthesis for k in ("growth", "finance", "rollout"))


def test_a_broker_outage_at_submit_keeps_the_plan_and_releases_its_marks(planes: Planes) -> None:
    def down(canvas: Canvas) -> None:
        raise ConnectionError("broker unreachable")

    planes.dispatcher.handler = down
    res = planes.coordinator.submit(SMALL_BOARD)
    assert res.created and res.enqueued == []
    assert planes.dispatcher.sent == []
    assert all(p.enqueued_at is None for p in planes.state(res.plan_id).phases)  # nothing looks sent

    planes.dispatcher.handler = None  # the broker is back: the next advance (reconciler) sends it
    assert planes.coordinator.advance(res.plan_id) == ["opening", "r1.dana", "r1.ravi", "r1.summary", "final"]
    planes.run_all()
    assert planes.state(res.plan_id).plan.status == PlanStatus.COMPLETED


def test_cancel_ends_queued_phases_and_a_running_one_at_its_completion(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example("board")).plan_id
    [board] = planes.dispatcher.take()
    opening = board.runs[0]
    assert planes.deliver(opening.phase_id, opening.key) == Outcome.COMPLETED
    dana = next(r for r in board.runs if r.key == "r1.dana")
    work = planes.runner.claim(dana.phase_id, owner="unit:2:runner")
    assert work is not None
    sub = planes.bus.subscribe(plan_id)

    res = planes.coordinator.cancel(plan_id)

    pending_then = {"r1.ravi", "r1.sofia", "r1.tomas", "r1.summary", "r2.dana", "r2.ravi", "r2.sofia", "r2.tomas",
                    "r2.summary", "final"}
    assert set(res.cancelled) == pending_then and res.status == PlanStatus.RUNNING  # Dana is still speaking
    assert planes.runner.execute(work, Lease(dana.phase_id, work.attempt)) == Outcome.CANCELLED
    planes.run_canvas(board)  # the rest of the canvas: every delivery finds its phase final and does nothing
    assert [planes.outcomes[k] for k in ("r1.ravi", "r1.sofia", "r1.tomas", "final")] == [[None]] * 4
    assert planes.outcomes["opening"] == [Outcome.COMPLETED, None]
    assert planes.dispatcher.take() == []  # nothing was re-sent

    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.CANCELLED and state.plan.error_code == "plan.cancelled"
    statuses = planes.statuses(plan_id)
    assert statuses["opening"] == PhaseStatus.COMPLETED
    assert {k for k, s in statuses.items() if s == PhaseStatus.CANCELLED} == pending_then | {"r1.dana"}
    assert planes.text(plan_id, "r1.dana") is None  # no result stored after a cancel
    dana_usage = [r for r in planes.usage(plan_id) if r.phase_id == dana.phase_id]
    assert [(r.attempt, r.counted) for r in dana_usage] == [(1, False)]  # spent, on record, not a cost
    stored = planes.events(plan_id)
    cancelled = [e for e in stored if e.type == "phase_cancelled"]
    assert [(e.phase_key, e.data["reason"]) for e in cancelled] == [("r1.dana", "plan cancelled while the model ran")]
    assert stored[-1].type == "plan_finished" and stored[-1].data["status"] == "cancelled"
    after = [e for e in stored if e.type in ("cancel_requested", "phase_cancelled", "plan_finished")]
    assert [m for m in published(sub) if m["type"] != "chunk"] == [e.message() for e in after]


def test_resume_sends_exactly_what_is_pending_after_lost_messages(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    [board] = planes.dispatcher.take()
    opening = board.runs[0]
    planes.deliver(opening.phase_id, opening.key)  # the rest of that canvas never reached a worker
    # round 1 is marked enqueued and only just became ready: its message is due, not lost yet
    assert planes.coordinator.advance(plan_id) == []

    res = planes.coordinator.resume(plan_id)

    assert res.enqueued == ["r1.dana", "r1.ravi", "r1.summary", "final"] and res.retried == []
    with pytest.raises(ResumeInProgress):
        planes.coordinator.resume(plan_id)  # one resume per plan at a time
    planes.run_all()
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
    assert all(len(v) == 1 for k, v in planes.outcomes.items())  # nothing ran twice


def test_resume_hands_a_dead_workers_phase_to_a_new_attempt(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    [opening] = planes.dispatcher.take()
    phase_id = opening.runs[0].phase_id
    dead = planes.runner.claim(phase_id, owner="unit:dead:worker")  # claimed, then the worker died
    assert dead is not None and dead.attempt == 1
    planes.expire_lease(phase_id)

    res = planes.coordinator.resume(plan_id)

    assert res.enqueued[0] == "opening"
    planes.run_all()
    state = planes.state(plan_id)
    assert state.plan.status == PlanStatus.COMPLETED and state.by_key()["opening"].attempt == 2
    started = [e.data for e in planes.events(plan_id) if e.type == "phase_started" and e.phase_key == "opening"]
    assert [(d["attempt"], d["worker"]) for d in started] == [(1, "unit:dead:worker"), (2, "unit:1:runner")]


def test_the_reconciler_resends_a_phase_only_once_it_has_been_ready_and_unclaimed_for_requeue_after(
        planes: Planes) -> None:
    plan_id = planes.coordinator.submit(SMALL_BOARD).plan_id
    [board] = planes.dispatcher.take()  # marks every phase of the board; let its messages be lost
    opening = board.runs[0]
    requeue = timedelta(seconds=planes.settings.requeue_after)

    def stalled() -> list[str]:
        return plans.stalled_plan_ids(planes.db, now=utcnow(), requeue_after=requeue)

    def age(keys: list[str], **columns: timedelta) -> None:
        """Time passes for these phases: each column moves that far into the past."""
        with planes.db.transaction() as s:
            for key in keys:
                row = s.scalars(select(Phase).where(Phase.plan_id == plan_id, Phase.key == key)).one()
                for column, by in columns.items():
                    setattr(row, column, getattr(row, column) - by)

    assert stalled() == []  # just sent
    age(["opening"], enqueued_at=2 * requeue)
    assert stalled() == [plan_id]  # ready (no inputs) and unclaimed for longer than requeue_after
    planes.deliver(opening.phase_id, opening.key)  # the opening finally runs (from a resend, say)

    keys = ["r1.dana", "r1.ravi", "r1.summary", "final"]
    age(keys, enqueued_at=2 * requeue)  # the board's canvas marked them long ago ...
    assert stalled() == []  # ... but round 1 only just became ready: its messages are due, not lost
    assert planes.coordinator.reconcile() == []  # and nothing is resent
    age(["opening"], finished_at=2 * requeue)
    assert stalled() == [plan_id]  # round 1 has been ready for longer than requeue_after
    assert planes.coordinator.reconcile() == [plan_id]
    [resent] = planes.dispatcher.take()
    assert shape(resent) == [("r1.dana", "r1.ravi"), "r1.summary", "final", "advance"]  # with what it triggers
    planes.run_canvas(resent)
    assert planes.dispatcher.take() == []
    assert planes.state(plan_id).plan.status == PlanStatus.COMPLETED
