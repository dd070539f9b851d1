"""Exactly-once results on an at-least-once queue: duplicated messages, and the
order of writes when completing a phase fails part-way.

Real worker subprocesses on a private Redis and the test Postgres; faults in the
completing transaction are injected by a Postgres trigger (a real failure inside
the real transaction), never by mocking our storage.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from orchestrator.fleet.celery_app import QUEUE
from orchestrator.plan.canvas import ADVANCE, RUN_PHASE
from storage import plans
from tests.integration.durability import assert_exactly_once, board_plan, ledger, wait_for


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


def _noops(fleet: list[Any]) -> int:
    """Tasks the workers acknowledged without doing anything (``run_phase`` returned "noop")."""
    return sum(w.log().count(": 'noop'") for w in fleet)


def test_duplicate_delivery_one_result_one_usage_row(client: Any, workers: Any,
                                                    settings: Any) -> None:
    import redis

    plan_id = client.submit(board_plan("duplicates", latency=0.03))  # no worker yet: the message waits
    broker = redis.Redis.from_url(settings.broker_url)
    queued = broker.lrange(QUEUE, 0, -1)
    assert len(queued) == 1  # chain(run(opening), advance)
    broker.rpush(QUEUE, *(queued * 3))  # the same message delivered three more times, byte for byte
    for _ in range(10):  # and a burst of advances racing each other
        client.local.app.send_task(ADVANCE, kwargs={"plan_id": plan_id})
    fleet = workers.many(2)  # two workers consume the copies at once
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")
    # the copies were delivered, found the phase taken or final, and did nothing
    wait_for(lambda: _noops(fleet) >= 3, 30, interval=0.1, what="the three copies acknowledged as no-ops")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed"
    assert set(led.statuses().values()) == {"completed"}
    assert_exactly_once(led)
    assert len(led.usage_rows) == len(led.phases)  # one usage row per phase, no waste at all
    assert all(p.attempt == 1 for p in led.phases)  # no copy ran a model call a second time
    started = [e for e in client.local.reads.list_events(plan_id) if e.type == "phase_started"]
    assert sorted(e.phase_key for e in started) == sorted(p.key for p in led.phases)


@pytest.mark.slow
def test_duplicate_delivered_while_running_and_after_completion(client: Any, workers: Any) -> None:
    fleet = workers.many(2)
    plan_id = client.submit(board_plan("late duplicates", latency=0.05))
    state = plans.load_state(client.local.db, plan_id)
    opening = next(p for p in state.phases if p.key == "opening")
    wait_for(lambda: plans.load_state(client.local.db, plan_id).by_key()["opening"].status == "running", 20,
             interval=0.02, what="opening running")
    for _ in range(4):  # while it runs: the copies find it leased by someone alive
        client.local.app.send_task(RUN_PHASE, kwargs={"plan_id": plan_id, "phase_id": opening.id})
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")
    for p in state.phases:  # after completion: the copies find it final
        client.local.app.send_task(RUN_PHASE, kwargs={"plan_id": plan_id, "phase_id": p.id})
    copies = 4 + len(state.phases)
    wait_for(lambda: _noops(fleet) >= copies, 30, interval=0.1, what=f"{copies} copies acknowledged as no-ops")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed"
    assert_exactly_once(led)
    assert all(p.attempt == 1 for p in led.phases)
    assert len(led.usage_rows) == len(led.phases)


class FaultOnce:
    """A Postgres trigger that makes the first write of a phase's result fail inside
    the completing transaction: the INSERT of its content row, or the UPDATE that
    sets it completed. One-shot through a sequence (nextval is not rolled back). A
    content row names no phase (phases point at their contents): on ``contents`` it is
    the first content written at all, which is the opening's — every phase of a board
    waits for it."""

    def __init__(self, engine: Any, table: str, phase_id: str) -> None:
        self.engine = engine
        self.name = f"fault_{uuid.uuid4().hex[:8]}"
        self.table = table
        match = "TRUE" if table == "contents" else f"NEW.id = '{phase_id}'"
        when = "" if table == "contents" else "WHEN (NEW.status = 'completed')"
        event = "INSERT" if table == "contents" else "UPDATE"
        with engine.begin() as c:
            c.execute(text(f"CREATE SEQUENCE {self.name}"))
            c.execute(text(f"""
                CREATE FUNCTION {self.name}() RETURNS trigger AS $$
                BEGIN
                  IF {match} AND nextval('{self.name}') = 1 THEN
                    RAISE EXCEPTION 'injected fault while writing the result of {phase_id}';
                  END IF;
                  RETURN NEW;
                END $$ LANGUAGE plpgsql"""))
            c.execute(text(f"CREATE TRIGGER {self.name} BEFORE {event} ON {table} FOR EACH ROW {when} "
                           f"EXECUTE FUNCTION {self.name}()"))

    def fired(self) -> bool:
        with self.engine.connect() as c:
            return bool(c.execute(text(f"SELECT is_called FROM {self.name}")).scalar())

    def drop(self) -> None:
        with self.engine.begin() as c:
            c.execute(text(f"DROP TRIGGER IF EXISTS {self.name} ON {self.table}"))
            c.execute(text(f"DROP FUNCTION IF EXISTS {self.name}()"))
            c.execute(text(f"DROP SEQUENCE IF EXISTS {self.name}"))


@pytest.fixture()
def fault(client: Any) -> Iterator[Any]:
    made: list[FaultOnce] = []

    def inject(table: str, phase_id: str) -> FaultOnce:
        f = FaultOnce(client.local.db.engine, table, phase_id)
        made.append(f)
        return f

    yield inject
    for f in made:
        f.drop()


@pytest.mark.slow
@pytest.mark.parametrize("table", ["contents", "phases"])
def test_failure_while_writing_result_leaves_phase_reclaimable(client: Any, workers: Any, fault: Any,
                                                                table: str) -> None:
    plan_id = client.submit(board_plan(f"persistence order ({table})", latency=0.02))
    opening = plans.load_state(client.local.db, plan_id).by_key()["opening"]
    injected = fault(table, opening.id)  # before any worker can run it
    workers(beat=True)

    wait_for(injected.fired, 30, interval=0.02, what="the injected fault")
    after = plans.load_state(client.local.db, plan_id).by_key()["opening"]
    led = ledger(client.local.db, plan_id)
    assert after.attempt == 1  # (the lease outlives this check: it is not taken over yet)
    assert after.status == "running"  # never completed without its content ...
    assert after.lease_owner is not None  # ... and the lease is kept until a result is durable
    assert opening.id not in led.content_rows
    assert not led.counted
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed"
    assert_exactly_once(led)
    taken = led.phase("opening")
    assert taken.attempt == 2  # reclaimed after the lease of the failed attempt expired
    spent = led.usage_of(taken)
    assert [(u.attempt, u.counted) for u in sorted(spent, key=lambda u: u.attempt)] == [(1, False), (2, True)]
    completed = [e for e in client.local.reads.list_events(plan_id)
                 if e.type == "phase_completed" and e.phase_key == "opening"]
    assert len(completed) == 1 and completed[0].data["attempt"] == 2
    view = client.get(plan_id)
    assert view.phase("opening").usage.wasted_tokens == spent[0].input_tokens + spent[0].output_tokens
