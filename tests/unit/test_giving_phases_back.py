"""A warm shutdown gives phases back (I41), on the worker's side: the lease keeper stops
every call it holds — and every call it hands out afterwards — for ``shutdown`` (not as
lost), and giving a phase back is fenced by the attempt, so a stale attempt stopping late
never frees the phase another attempt is running."""

from __future__ import annotations

from collections.abc import Sequence

from storage.models import utcnow
from storage.status import Outcome, PhaseStatus
from tasks.lease import LOST, SHUTDOWN, Lease, LeaseKeeper
from tests.unit.planes import Planes
from tests.unit.stored import example

PANEL = [{"name": "Dana", "role": "Chief Financial Officer"}, {"name": "Ravi", "role": "Chief Technology Officer"}]


def _alive(held: Sequence[tuple[str, int]]) -> dict[str, bool]:
    return {phase_id: True for phase_id, _ in held}


def test_a_shutdown_stops_every_call_held_now_and_later_to_give_its_phase_back() -> None:
    keeper = LeaseKeeper(_alive, interval=3600.0)
    try:
        with keeper.hold("phase-a", 1) as a, keeper.hold("phase-b", 3) as b:
            assert not a.should_stop() and not b.should_stop()
            keeper.shut_down()
            assert a.should_stop() and b.should_stop()
            assert (a.reason, b.reason) == (SHUTDOWN, SHUTDOWN) and a.shutting_down and b.shutting_down
            with keeper.hold("phase-c", 1) as c:  # a task that starts while the worker is stopping
                assert c.should_stop() and c.shutting_down
    finally:
        keeper.close()


def test_a_call_already_lost_stays_lost_when_the_worker_then_shuts_down() -> None:
    keeper = LeaseKeeper(lambda held: {phase_id: False for phase_id, _ in held}, interval=3600.0)
    try:
        with keeper.hold("phase-a", 1) as lease:
            keeper.beat()  # the renewal finds the lease taken over (or the plan cancelled)
            keeper.shut_down()
            assert lease.should_stop() and lease.reason == LOST and not lease.shutting_down
    finally:
        keeper.close()


def test_a_stale_attempt_stopped_by_a_shutdown_does_not_give_back_the_phase_another_attempt_runs(
        planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example(
        "board", rounds=1, experts=PANEL, models={"default": {"provider": "offline", "max_retries": 0}})).plan_id
    [canvas] = planes.dispatcher.take()
    phase_id = canvas.runs[0].phase_id
    stale = planes.runner.claim(phase_id, owner="unit:old")
    assert stale is not None
    planes.expire_lease(phase_id)  # the old worker went silent; another took the phase over
    fresh = planes.runner.claim(phase_id, owner="unit:new")
    assert fresh is not None and fresh.attempt == stale.attempt + 1
    before = planes.state(plan_id).by_key()["opening"]

    lease = Lease(phase_id, stale.attempt)
    lease.stop(SHUTDOWN)  # the old worker, late, is asked to stop
    assert planes.runner.execute(stale, lease) == Outcome.FENCED  # neither given back nor failed

    after = planes.state(plan_id).by_key()["opening"]
    assert (after.status, after.attempt, after.error_code) == (PhaseStatus.RUNNING, fresh.attempt, None)
    assert after.lease_expires_at == before.lease_expires_at and after.lease_expires_at is not None
    assert after.lease_expires_at > utcnow()  # still the new attempt's, not ended
    assert after.enqueued_at == before.enqueued_at
    assert planes.coordinator.reconcile() == []  # nothing to resend: the new attempt is running it
    assert planes.runner.execute(fresh, Lease(phase_id, fresh.attempt)) == Outcome.COMPLETED


def test_a_phase_given_back_is_resent_at_once_even_after_a_resend_while_it_ran(planes: Planes) -> None:
    plan_id = planes.coordinator.submit(example(
        "board", rounds=1, experts=PANEL, models={"default": {"provider": "offline", "max_retries": 0}})).plan_id
    [canvas] = planes.dispatcher.take()
    phase_id = canvas.runs[0].phase_id
    work = planes.runner.claim(phase_id, owner="unit:leaving")
    assert work is not None
    planes.expire_lease(phase_id)  # its heartbeats were missed (a database blip): the reconciler re-sends it
    assert planes.coordinator.reconcile() == [plan_id]
    assert planes.state(plan_id).by_key()["opening"].enqueued_at is not None
    planes.dispatcher.take()  # that message is gone (held by the very worker that is now stopping)

    lease = Lease(phase_id, work.attempt)
    lease.stop(SHUTDOWN)
    assert planes.runner.execute(work, lease) == Outcome.RELEASED
    opening = planes.state(plan_id).by_key()["opening"]
    assert (opening.status, opening.enqueued_at) == (PhaseStatus.RUNNING, None)
    assert planes.coordinator.reconcile() == [plan_id]  # at once, not after CONCLAVE_REQUEUE_AFTER
    [resent] = planes.dispatcher.take()
    assert resent.runs[0].key == "opening"
