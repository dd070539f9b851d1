"""Every worker's housekeeper: one sweep at a time across processes (a Postgres advisory
lock held by the sweep's own transaction), taken over at once when the holder's
connection dies; and a worker with no beat beside it recovers a plan whose messages the
broker lost."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from storage import Database, connect
from tasks.housekeeping import Housekeeper
from tests.integration.durability import assert_exactly_once, board_plan, ledger, wait_for


class Reconciler:
    """Stands in for the coordinator's recovery: records each sweep and can hold one open."""

    def __init__(self) -> None:
        self.sweeps = 0
        self.deadlines = 0  # people's seats past their deadline: ended on every tick, lock or not
        self.hold = threading.Event()
        self.inside = threading.Event()
        self.hold.set()

    def reconcile(self) -> list[str]:
        self.sweeps += 1
        self.inside.set()
        self.hold.wait(30)
        return []

    def prune(self, *, every: float | None = None) -> None:
        return None

    def expire_deadlines(self) -> dict[str, list[str]]:
        self.deadlines += 1
        return {}


@pytest.fixture()
def two_workers(clean_db: str) -> Iterator[tuple[Database, Database]]:
    """Two processes' databases: separate engines, separate connections."""
    a, b = connect(clean_db, pool_size=2), connect(clean_db, pool_size=2)
    yield a, b
    a.dispose()
    b.dispose()


def test_one_sweep_at_a_time_and_a_dead_holder_is_taken_over_at_once(two_workers: tuple[Database, Database]
                                                                     ) -> None:
    db_a, db_b = two_workers
    rec_a, rec_b = Reconciler(), Reconciler()
    a = Housekeeper(db_a, rec_a, interval=60, stalled_after=60)  # type: ignore[arg-type]
    b = Housekeeper(db_b, rec_b, interval=60, stalled_after=60)  # type: ignore[arg-type]

    rec_a.hold.clear()
    swept: list[bool] = []
    inside = threading.Thread(target=lambda: swept.append(a.sweep()), daemon=True)  # a failure leaves it held
    inside.start()
    assert rec_a.inside.wait(10)
    assert b.sweep() is False and rec_b.sweeps == 0  # a is sweeping: b skips its tick
    assert rec_b.deadlines == 1  # ... but not the deadlines: a conditional UPDATE fires each once, no lock needed
    rec_a.hold.set()
    inside.join(10)
    assert swept == [True]
    assert b.sweep() is True and rec_b.sweeps == 1  # the lock went with a's sweep

    # a dies mid-sweep: its connection goes, and with it the lock
    rec_b.hold.clear()
    rec_b.inside.clear()
    died: list[BaseException] = []

    def sweep_and_die() -> None:
        try:
            b.sweep()
        except BaseException as exc:  # the killed connection surfaces when the sweep ends
            died.append(exc)

    holder = threading.Thread(target=sweep_and_die, daemon=True)
    holder.start()
    assert rec_b.inside.wait(10)
    assert a.sweep() is False
    with db_a.engine.connect() as conn:  # the timeout: return once the backend is gone, its lock with it
        killed = conn.execute(text(
            "SELECT pg_terminate_backend(l.pid, 10000) FROM pg_locks l "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid() "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")).all()
    assert killed == [(True,)]
    assert a.sweep() is True and rec_a.sweeps == 2  # at once: no lease, no timeout to wait out
    rec_b.hold.set()
    holder.join(10)


def test_a_holder_that_stops_without_dying_loses_the_lock(two_workers: tuple[Database, Database]) -> None:
    """SIGSTOP, a long pause, a partition that keeps the socket open: the holder's
    transaction sits idle, and Postgres ends it after ``stalled_after``."""
    db_a, db_b = two_workers
    rec_a, rec_b = Reconciler(), Reconciler()
    a = Housekeeper(db_a, rec_a, interval=60, stalled_after=1.0)  # type: ignore[arg-type]
    b = Housekeeper(db_b, rec_b, interval=60, stalled_after=1.0)  # type: ignore[arg-type]
    rec_a.hold.clear()
    outcome: list[object] = []

    def stalled_sweep() -> None:
        try:
            outcome.append(a.sweep())
        except Exception as exc:  # its session was ended under it
            outcome.append(exc)

    holder = threading.Thread(target=stalled_sweep, daemon=True)
    holder.start()
    assert rec_a.inside.wait(10)
    assert b.sweep() is False  # a holds it, and has not been idle long yet
    wait_for(lambda: b.sweep() or None, 15, interval=0.2, what="the stalled holder's lock to be released")
    assert rec_b.sweeps == 1
    rec_a.hold.set()
    holder.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Exception), outcome  # a learns it lost the lock


def test_sweeps_skip_nothing_on_sqlite(tmp_path: Any) -> None:
    """Embedded mode has one process: it always holds the lock."""
    from storage import upgrade

    url = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(url)
    db = connect(url)
    try:
        rec = Reconciler()
        keeper = Housekeeper(db, rec, interval=60, stalled_after=60)  # type: ignore[arg-type]
        assert keeper.sweep() and keeper.sweep() and rec.sweeps == 2
    finally:
        db.dispose()


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


@pytest.mark.slow
def test_a_worker_without_beat_recovers_a_plan_the_broker_lost(client: Any, workers: Any, redis_server: Any
                                                              ) -> None:
    plan_id = client.submit(board_plan("lost messages", latency=0.05))  # no worker yet: its canvas waits in Redis
    redis_server.flushall()  # and is lost, before any worker could take a message
    (worker,) = workers.many(1)  # no beat anywhere: only the worker's own reconciler can notice
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.25, what="the plan to end")
    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed", led.statuses()
    assert_exactly_once(led)
    assert "reconciled 1 plan(s)" in worker.log()
