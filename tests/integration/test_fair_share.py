"""Fair share of the fleet per tenant, on Postgres and real worker processes: a tenant never has
more phases running than its share (read from the phases' stored start and end times), another
tenant's plan is not queued behind its backlog, held phases are released by weighted round-robin
between tenants and by priority within one, and a release lost with its worker is recovered by
the sweep."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from orchestrator.client.conclave import Conclave
from orchestrator.control.coordinator import Coordinator
from orchestrator.control.dispatch import RecordingDispatcher
from orchestrator.core.bus import MemoryBus
from storage import Database, connect, fairshare, plans
from storage.models import Phase, Plan, utcnow
from storage.sql.base import Claimed
from storage.status import PhaseStatus
from tests.integration.durability import board_plan


@pytest.fixture()
def db(clean_db: str) -> Iterator[Database]:
    database = connect(clean_db)
    yield database
    database.dispose()


def peak_in_flight(db: Database, tenant: str) -> int:
    """The most phases of ``tenant`` that ran at the same moment, from their stored start and
    end times (a phase runs from ``started_at`` to ``finished_at``)."""
    with db.transaction() as s:
        spans = s.execute(select(Phase.started_at, Phase.finished_at).join(Plan, Plan.id == Phase.plan_id)
                          .where(Plan.tenant == tenant, Phase.started_at.is_not(None))).all()
    edges: list[tuple[datetime, int]] = []
    for start, end in spans:
        edges += [(start or utcnow(), 1), (end or utcnow(), -1)]
    peak = running = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        running += step
        peak = max(peak, running)
    return peak


def slow_board(title: str) -> dict[str, Any]:
    """Three experts, one round: six phases, each a few tenths of a second on the offline model."""
    return board_plan(title, experts=3, rounds=1, words=12, latency=0.04)


def test_a_tenant_runs_within_its_share_and_another_is_not_queued_behind_its_burst(
        settings: Any, workers: Any) -> None:
    fair = settings.model_copy(update={"tenant_max_in_flight": 2, "tenant_in_flight": {"quiet": 4}})
    worker = workers(settings=fair, concurrency=8)
    burst, quiet = Conclave(fair, worker=False, tenant="burst"), Conclave(fair, worker=False, tenant="quiet")
    try:
        burst_ids = [burst.submit(slow_board(f"burst {i}")) for i in range(6)]
        quiet_id = quiet.submit(slow_board("quiet"))
        views = [burst.wait(p, timeout=240) for p in burst_ids] + [quiet.wait(quiet_id, timeout=240)]
    finally:
        burst.close()
        quiet.close()
    assert [v.status for v in views] == ["completed"] * 7
    db = connect(fair.database_url)
    try:
        assert peak_in_flight(db, "burst") == 2  # its share, used, never passed
        assert peak_in_flight(db, "quiet") <= 4
        ends = {p: plans.get_plan(db, p).finished_at for p in [*burst_ids, quiet_id]}
        assert fairshare.held_count(db) == 0  # every held phase was released
    finally:
        db.dispose()
    # the quiet tenant's board did not wait for the burst's backlog: it ended before most of it
    later = [p for p in burst_ids if ends[p] > ends[quiet_id]]  # type: ignore[operator]
    assert len(later) >= 4, (ends, quiet_id)
    assert "phase held" in worker.log()


def _coordinator(db: Database, settings: Any) -> tuple[Coordinator, RecordingDispatcher]:
    dispatcher = RecordingDispatcher()
    return Coordinator(db, settings, dispatcher, MemoryBus()), dispatcher


def _hold_ready(db: Database, plan_id: str) -> list[str]:
    """Hold the plan's ready phases (as refused claims past the share would)."""
    with db.transaction() as s:
        held = s.scalars(update(Phase).where(Phase.plan_id == plan_id, Phase.status == PhaseStatus.PENDING,
                                             func.json_array_length(Phase.depends_on) == 0)
                         .values(held_at=utcnow(), enqueued_at=None).returning(Phase.key)).all()
    return list(held)


def _submit(settings: Any, db: Database, tenant: str, title: str, **plan: Any) -> str:
    with Conclave(settings, db=db, worker=False, tenant=tenant) as c:
        return c.submit(board_plan(title, plan=plan))


def test_held_phases_go_by_weighted_round_robin_between_tenants(settings: Any, db: Database) -> None:
    weighted = settings.model_copy(update={"tenant_max_in_flight": 100, "tenant_weights": {"heavy": 2}})
    share = fairshare.policy_of(weighted)
    assert share is not None
    for tenant in ("heavy", "light"):
        for i in range(4):
            _hold_ready(db, _submit(weighted, db, tenant, f"{tenant} {i}"))
    order = []
    for _ in range(6):
        with db.transaction() as s:
            (plan_id,) = fairshare.release(s, db.dialect, share, utcnow(), most=1)
        order.append(plans.get_plan(db, plan_id).tenant)
    assert order.count("heavy") == 4 and order.count("light") == 2, order  # weight 2 : 1
    assert order[:3] in (["heavy", "light", "heavy"], ["heavy", "heavy", "light"]), order  # interleaved, not FIFO


def test_priority_goes_first_within_a_tenant_and_patch_changes_it(settings: Any, db: Database) -> None:
    fair = settings.model_copy(update={"tenant_max_in_flight": 100})
    share = fairshare.policy_of(fair)
    assert share is not None
    low = _submit(fair, db, "acme", "low", priority=-1)
    high = _submit(fair, db, "acme", "high", priority=2)
    plain = _submit(fair, db, "acme", "plain")
    for p in (low, plain, high):  # held in this order: the oldest first, by time alone
        _hold_ready(db, p)
    with db.transaction() as s:
        first = fairshare.release(s, db.dialect, share, utcnow(), most=1)
    assert first == [high]
    with Conclave(fair, db=db, worker=False, tenant="acme") as c:
        assert c.update(low, priority=1).priority == 1  # now before the plain plan
    with db.transaction() as s:
        assert fairshare.release(s, db.dialect, share, utcnow(), most=2) == [low, plain]
    assert plans.get_plan(db, low).priority == 1


def test_a_lost_release_is_recovered_by_the_sweep(settings: Any, db: Database) -> None:
    fair = settings.model_copy(update={"tenant_max_in_flight": 1, "requeue_after": 0.01})
    plan_id = _submit(fair, db, "acme", "lost")
    held = _hold_ready(db, plan_id)
    assert held == ["opening"]
    coordinator, dispatcher = _coordinator(db, fair)
    assert coordinator.advance(plan_id) == []  # a held phase is never sent by an advance
    with Conclave(fair, db=db, worker=False, tenant="acme") as c:
        assert c.get(plan_id).phase("opening").held  # what a user sees: it waits for its share
    # the finish that would have released it died with its worker: nothing runs, the slot is free
    assert coordinator.reconcile() == [plan_id]
    (canvas,) = dispatcher.take()
    assert canvas.runs[0].key == "opening"
    state = plans.load_state(db, plan_id)
    assert state.phases[0].held_at is None and state.phases[0].enqueued_at is not None


def test_a_fresh_phase_does_not_jump_ahead_of_held_ones(settings: Any, db: Database) -> None:
    fair = settings.model_copy(update={"tenant_max_in_flight": 1})
    share = fairshare.policy_of(fair)
    assert share is not None
    first = _submit(fair, db, "acme", "first")
    second = _submit(fair, db, "acme", "second")
    _hold_ready(db, first)
    opening = {p: plans.load_state(db, p).phases[0].id for p in (first, second)}
    lease = timedelta(seconds=30)
    # nothing runs, yet the second plan's opening waits behind the first's held one
    assert fairshare.claim(db, opening[second], tenant="acme", policy=share, owner="w", lease=lease) == fairshare.HELD
    with db.transaction() as s:
        assert fairshare.release(s, db.dialect, share, utcnow()) == [first]  # the one free slot, in order
    claimed = fairshare.claim(db, opening[first], tenant="acme", policy=share, owner="w", lease=lease)
    assert isinstance(claimed, Claimed) and claimed.phase.key == "opening"
    assert fairshare.held_count(db) == 1  # the second waits for the first to finish
