"""Bounded growth: retention prunes what finished plans keep (never an active
plan's, never results or usage) and reaches every finished plan over successive
bounded passes; a capacity limit on active plans refuses new submissions with a
clear error — also when the submissions race.

Against the test Postgres (no workers needed: phases are run in-process through
the phase runner, as a worker would).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text

from orchestrator.core.errors import CapacityExceeded, ConclaveError
from orchestrator.gateway.model_gateway import default_providers
from orchestrator.gateway.types import Completion, ModelSpec, Usage
from storage import outbox, plans, retention
from storage.event_shapes import NewEvent
from storage.models import Event, Plan, utcnow
from tasks.runner import PhaseRunner
from tests.integration.durability import assert_exactly_once, board_plan, ledger

CAP = 100


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings.model_copy(update={"max_events_per_plan": CAP, "retention_days": 1.0,
                                               "max_active_plans": 3})


def _run_in_process(client: Any, plan_id: str) -> None:
    """Run every phase of a plan through claim → record usage → complete, in order."""
    coordinator = client.local.coordinator
    runner = PhaseRunner(client.local.db, client.settings, client.local.bus, default_providers())
    spec = ModelSpec(name="default", provider="offline")
    for p in client.local.reads.state(plan_id).phases:
        work = runner.claim(p.id, owner="test:0:retention")
        assert work is not None, p.key
        used = Usage(input_tokens=10, output_tokens=20, source="estimated", method="test")
        runner.record_usage(work, seq=1, purpose="chat", spec=spec, used=used)
        assert runner.complete(work, Completion(text=f"text of {p.key}", usage=used)) == "completed"
    coordinator.advance(plan_id)


def _add_events(client: Any, plan_id: str, n: int, *, old: int = 0) -> None:
    for i in range(n):
        outbox.append_event(client.local.db, plan_id, NewEvent("note", {"i": i}))
    if old:
        with client.local.db.engine.begin() as c:
            c.execute(text("UPDATE events SET created_at = :t WHERE id IN (SELECT id FROM events "
                           "WHERE plan_id = :p ORDER BY id LIMIT :n)"),
                      {"t": (utcnow() - timedelta(days=3)).replace(tzinfo=None), "p": plan_id, "n": old})


def _event_ids(client: Any, plan_id: str) -> list[int]:
    return [e.id for e in outbox.list_events(client.local.db, plan_id, limit=100_000)]


def test_retention_prunes_finished_plans_only(client: Any) -> None:
    active = client.submit(board_plan("still running"))
    done = client.submit(board_plan("completed"))
    _run_in_process(client, done)
    gone = client.submit(board_plan("cancelled"))
    client.cancel(gone)
    for pid in (active, done, gone):
        _add_events(client, pid, 250, old=40)
    client.resume(active)  # transient rows on the active plan: a resume guard, an enqueue mark
    plans.acquire_resume_guard(client.local.db, gone, "test", timedelta(hours=1))
    active_events = _event_ids(client, active)
    done_before = ledger(client.local.db, done)
    assert done_before.plan.status == "completed"

    pruned = client.local.coordinator.prune(now=utcnow() + retention.GRACE + timedelta(minutes=1))
    assert pruned is not None and pruned.events > 0 and pruned.plans == 0  # whole plans are kept unless asked

    assert _event_ids(client, active) == active_events  # an active plan is never pruned
    cutoff = utcnow() - timedelta(days=1)
    for pid in (done, gone):
        kept = outbox.list_events(client.local.db, pid, limit=100_000)
        assert len(kept) == CAP  # bounded: the newest CAP events
        assert kept[-1].id == max(_event_ids(client, pid)) and all(e.created_at > cutoff for e in kept)
    with client.local.db.engine.connect() as c:
        guards = dict(c.execute(text("SELECT id, resume_until IS NOT NULL FROM plans")).all())
    assert guards == {active: True, done: False, gone: False}  # transient rows of finished plans cleared
    assert plans.load_state(client.local.db, active).by_key()["opening"].enqueued_at is not None
    done_after = ledger(client.local.db, done)  # results, contents and usage are the record: kept
    assert done_after.content_rows == done_before.content_rows
    assert done_after.usage_rows == done_before.usage_rows
    assert_exactly_once(done_after)


def test_retention_is_bounded_per_pass_yet_reaches_every_finished_plan(client: Any) -> None:
    finished = []
    for i in range(12):
        pid = client.submit(board_plan(f"finished {i}"))
        client.cancel(pid)
        _add_events(client, pid, CAP + 10)
        finished.append(pid)
    now = utcnow() + retention.GRACE + timedelta(minutes=1)
    cutoff = now - timedelta(days=30)
    for _ in range(3):  # each pass looks at a bounded number of plans (5 per pass, one per transaction)
        done = retention.prune(client.local.db, older_than=cutoff, max_events_per_plan=CAP, batch=1, per_pass=5,
                               now=now)
        assert done.trimmed <= 5
    with client.local.db.engine.connect() as c:
        counts = dict(c.execute(select(Event.plan_id, func.count()).group_by(Event.plan_id)).all())
    assert {pid: counts[pid] for pid in finished} == {pid: CAP for pid in finished}


def test_capacity_limit_refuses_new_submissions_with_a_clear_error(client: Any) -> None:
    first = [client.submit(board_plan(f"active {i}", task_id=f"cap-{i}")) for i in range(3)]
    with pytest.raises(CapacityExceeded) as refused:
        client.submit(board_plan("one too many"))
    err = refused.value
    assert err.code == "plan.capacity_exceeded" and err.http_status == 429
    assert "3 plans are active, the limit is 3" in err.message and "CONCLAVE_MAX_ACTIVE_PLANS" in err.message
    with client.local.db.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(Plan)).scalar() == 3  # nothing stored for it
    # an idempotent re-submission of a stored plan is not a new plan: it is answered, not refused
    assert client.submit(board_plan("active 0", task_id="cap-0")) == first[0]
    client.cancel(first[0])  # a finished plan frees its slot
    assert client.submit(board_plan("now there is room"))


def test_capacity_limit_holds_when_submissions_race(client: Any, settings: Any) -> None:
    from orchestrator.client.conclave import Conclave

    barrier = threading.Barrier(12)
    outcomes: list[str] = []
    lock = threading.Lock()

    def submit(i: int) -> None:
        c = Conclave(settings, worker=False)  # its own engine, as another API process would have
        try:
            barrier.wait()
            c.submit(board_plan(f"race {i}"))
            result = "created"
        except ConclaveError as exc:
            result = exc.code
        finally:
            c.close()
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["created"] * 3 + ["plan.capacity_exceeded"] * 9
    with client.local.db.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(Plan).where(Plan.status == "running")).scalar() == 3
