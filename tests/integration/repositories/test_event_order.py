"""One plan's events commit in the order of their ids, so a watcher that follows them by id
(``id > last``, as the SSE stream and a ``Last-Event-ID`` reconnect do) never moves past
an event that is still to commit.

Driven deterministically on Postgres: a first write of the plan is held by a gate after its
event's insert and before its commit (a statement-level ``AFTER INSERT ON events`` trigger);
a second write of the same plan runs meanwhile. The second either waits for the first, or
commits — and a watcher reading then would see its event and move its cursor past the
first's. Every pair of the plan's writers is tried: claims (one statement, in autocommit),
completions (the plan lock first), and an event appended through the outbox.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from storage import Database, connect, outbox, plans
from storage.event_shapes import NewEvent
from storage.read_models import EventRecord, NewPhase
from tests.integration.durability import wait_for
from tests.integration.repositories.ledger import claim, complete
from tests.statement_gate import StatementGate, statement_gate

Write = Callable[[Database], object]


def _plan(db: Database) -> str:
    """Three phases ready at once, and a final one after them."""
    created = plans.create_plan(
        db, title="order", kind="board", spec={"title": "order"}, task_id=None, max_active=100,
        phases=[NewPhase("a", "a", 0, []), NewPhase("b", "b", 1, []), NewPhase("c", "c", 2, []),
                NewPhase("final", "final", 3, ["a", "b", "c"], meta={"terminal": True})])
    assert created.created
    return created.plan_id


def _writer(kind: str, db: Database, plan_id: str, key: str) -> Callable[[Database], object]:
    """The write ``kind`` of phase ``key``, through the database it is given; what it returns
    says it happened (a claim that took the phase, a completion that completed it)."""
    if kind == "claim":
        def claim_it(via: Database) -> object:
            claimed = claim(via, plan_id, key, f"worker-{key}")
            assert claimed is not None, f"the claim of {key} took nothing"
            return claimed.event.id
        return claim_it
    if kind == "complete":
        claimed = claim(db, plan_id, key, f"worker-{key}")
        assert claimed is not None

        def complete_it(via: Database) -> object:
            finished = complete(via, plan_id, key, claimed.phase.attempt, f"text of {key}")
            assert finished.status == "completed", finished
            return finished
        return complete_it
    assert kind == "append"
    return lambda via: outbox.append_event(via, plan_id, NewEvent("note", {"of": key}, key))


@pytest.fixture()
def gate(pg: Database) -> Iterator[StatementGate]:
    """Holds the held session's first insert into ``events`` after it, before its commit."""
    with statement_gate(pg, name="event-gate", event="INSERT", table="events", when="AFTER") as held:
        yield held


def _blocked(db: Database, app: str) -> bool:
    with db.engine.connect() as c:
        return bool(c.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = :app AND wait_event_type = 'Lock'"), {"app": app}).scalar())


def _run(write: Write, via: Database, errors: list[BaseException]) -> threading.Thread:
    def target() -> None:
        try:
            write(via)
        except BaseException as exc:  # the test reads it after the join
            errors.append(exc)
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("second", ["claim", "complete", "append"])
@pytest.mark.parametrize("first", ["claim", "complete", "append"])
def test_a_watcher_following_by_id_sees_every_event_of_a_plan_when_two_writes_race(
        pg: Database, gate: StatementGate, clean_db: str, first: str, second: str) -> None:
    plan_id = _plan(pg)
    first_write, second_write = _writer(first, pg, plan_id, "a"), _writer(second, pg, plan_id, "b")
    before = outbox.list_events(pg, plan_id)

    other_app = f"second-writer-{uuid.uuid4().hex[:8]}"
    held_db = connect(gate.url(clean_db), pool_size=2)
    other_db = connect(f"{clean_db}{'&' if '?' in clean_db else '?'}application_name={other_app}", pool_size=2)
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    try:
        threads.append(_run(first_write, held_db, errors))
        wait_for(gate.waiting, 30, interval=0.02, what="the first write to wait between its insert and commit")
        threads.append(_run(second_write, other_db, errors))
        wait_for(lambda: not threads[1].is_alive() or _blocked(pg, other_app), 30, interval=0.02,
                 what="the second write to finish or wait for the first")

        # a watcher reads now, and once more after both writes have committed
        seen: list[EventRecord] = outbox.list_events(pg, plan_id, after=before[-1].id)
        last = seen[-1].id if seen else before[-1].id
        gate.open()
        for thread in threads:
            thread.join(30)
        assert not any(t.is_alive() for t in threads) and errors == []
        seen += outbox.list_events(pg, plan_id, after=last)
    finally:
        gate.open()
        for thread in threads:
            thread.join(30)
        held_db.dispose()
        other_db.dispose()

    stored = outbox.list_events(pg, plan_id, after=before[-1].id)
    assert [(e.type, e.phase_key) for e in stored if e.phase_key in ("a", "b")] \
        == [_written(first, "a"), _written(second, "b")]  # both writes stored their events, first's first
    assert [e.id for e in seen] == [e.id for e in stored]  # and the watcher saw every one, once, in order


def _written(kind: str, key: str) -> tuple[str, str]:
    return {"claim": "phase_started", "complete": "phase_completed", "append": "note"}[kind], key
