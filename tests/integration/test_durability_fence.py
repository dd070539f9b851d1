"""A worker that stalls past its lease and comes back, and one killed between its
model call and its completion — with real worker processes, SIGSTOP and SIGKILL.

To stop worker A at the one moment that matters (its call is over and its usage is on
record, its completing transaction has not run), the test holds a ``FOR KEY SHARE``
lock on the plan row from its own connection: A's completion begins by locking that
row ``FOR UPDATE`` and waits, while everything else a takeover needs passes — claims
and heartbeats update phase rows, usage and event inserts take ``KEY SHARE`` locks for
their foreign keys, and the reconciler's ``UPDATE plans SET updated_at`` takes a
``NO KEY UPDATE`` lock; none of them conflicts with ``KEY SHARE``. The test sees A
waiting in ``pg_stat_activity``, then stops or kills it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from storage import Database, contents, plans, usage
from tests.integration.durability import assert_exactly_once, ledger, owner_pid, wait_for
from tests.llm_server import LLMServer

KEY_ENV = "DURABILITY_TEST_FENCE_KEY"  # not CONCLAVE_*: settings_env drops those
QUESTION = "Should Ledgerly move to usage-based pricing next quarter?"


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


class PlanRowLock:
    """``SELECT … FROM plans WHERE id = … FOR KEY SHARE`` held in an open transaction."""

    def __init__(self, db: Database, plan_id: str) -> None:
        self._conn = db.engine.connect()
        self._tx = self._conn.begin()
        got = self._conn.execute(text("SELECT id FROM plans WHERE id = :id FOR KEY SHARE"), {"id": plan_id})
        assert got.scalar() == plan_id
        self._db = db

    def completion_waiting(self) -> bool:
        """Some backend waits for this lock in a completing transaction (``SELECT plans … FOR UPDATE``)."""
        with self._db.engine.connect() as c:
            n = c.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query ILIKE '%FROM plans%FOR UPDATE%'")).scalar()
        return bool(n)

    def release(self) -> None:
        if self._conn.closed:
            return
        self._tx.rollback()
        self._conn.close()


@pytest.fixture()
def row_lock(client: Any) -> Iterator[Any]:
    held: list[PlanRowLock] = []

    def take(plan_id: str) -> PlanRowLock:
        lock = PlanRowLock(client.db, plan_id)
        held.append(lock)
        return lock

    yield take
    for lock in held:
        lock.release()


def answer(n: int) -> str:
    return f"Answer of call {n}: pilot usage-based pricing with two segments first."


class SecondCallWaits:
    """Replies of the test model server: the first call answers at once, every later
    one waits (headers sent, no text yet — mid-call) until :attr:`go` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> str:
        with self._lock:
            self.calls += 1
            n = self.calls
        if n > 1:
            self.go.wait(120)
        return answer(n)


@pytest.fixture()
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LLMServer, SecondCallWaits]]:
    monkeypatch.setenv(KEY_ENV, "sk-test-fence")  # inherited by the worker subprocesses
    replies = SecondCallWaits()
    with LLMServer(reply=replies) as server:
        try:
            yield server, replies
        finally:
            replies.go.set()


def _plan(title: str, model: dict[str, Any]) -> dict[str, Any]:
    """Phase ``a`` (Ada, on ``model``), then the synthesis (offline)."""
    return {
        "kind": "team", "title": title, "divergence": "off", "question": QUESTION,
        "models": {"contested": model, "default": {"provider": "offline", "options": {"words": 30}}},
        "experts": [{"name": "Ada", "role": "Analyst", "model": "contested"},
                    {"name": "Cy", "role": "Lead expert", "model": "default"}],
        "phases": [{"id": "a", "expert": "Ada", "prompt": "Estimate the revenue impact."}],
        "synthesis": {"expert": "Cy"},
    }


def _phase(client: Any, plan_id: str, key: str = "a") -> Any:
    return plans.load_state(client.db, plan_id).by_key()[key]


def _a_blocked_in_completion(client: Any, plan_id: str, lock: PlanRowLock, worker: Any) -> None:
    """Wait until ``worker``'s attempt 1 has its usage on record and its completion waits on the lock."""
    a = _phase(client, plan_id)
    wait_for(lambda: any(u.phase_id == a.id and u.attempt == 1 for u in usage.rows_for_plan(client.db, plan_id)),
             60, interval=0.05, what="attempt 1's usage row")
    wait_for(lock.completion_waiting, 30, interval=0.05, what="attempt 1's completion waiting on the plan row")
    a = _phase(client, plan_id)
    assert (a.status, a.attempt, owner_pid(a)) == ("running", 1, worker.pid)


def _taken_over_by(client: Any, plan_id: str, worker: Any) -> None:
    """Wait until attempt 1's lease has expired and ``worker`` has claimed attempt 2 (its
    ``phase_started`` event: the phase may already be done when a fast worker is polled)."""
    expires = _phase(client, plan_id).lease_expires_at
    wait_for(lambda: datetime.now(UTC) > expires, 30, interval=0.05, what="attempt 1's lease to expire")

    def second_attempt() -> bool:
        return any(e.type == "phase_started" and e.phase_key == "a" and e.data["attempt"] == 2
                   and e.data["worker"].split(":")[1] == str(worker.pid)
                   for e in client.coordinator.list_events(plan_id))

    wait_for(second_attempt, 60, interval=0.05, what="attempt 2 claimed by the other worker")


def _tokens(rows: list[Any]) -> int:
    return sum(u.input_tokens + u.output_tokens for u in rows)


@pytest.mark.slow
def test_a_stalled_worker_comes_back_and_its_result_is_discarded(
        client: Any, workers: Any, settings: Any, row_lock: Any, served: Any) -> None:
    server, replies = served
    model = {"provider": "openai", "model": "normal", "base_url": server.url, "api_key_env": KEY_ENV,
             "max_retries": 0, "first_chunk_timeout": 300, "idle_timeout": 300, "deadline": 600}
    plan_id = client.submit(_plan("a stalled worker", model))  # no worker yet: the message waits
    lock = row_lock(plan_id)
    (a,) = workers.many(1)
    _a_blocked_in_completion(client, plan_id, lock, a)

    os.killpg(a.pid, signal.SIGSTOP)  # a long GC pause, a partition: A stops renewing its lease
    try:
        (b,) = workers.many(1, beat=True)  # its reconciler re-sends the phase once the lease expires
        _taken_over_by(client, plan_id, b)
        wait_for(lambda: server.count() == 2, 30, interval=0.05, what="attempt 2's model call")
        lock.release()  # A's completion gets the plan row ...
    finally:
        os.killpg(a.pid, signal.SIGCONT)  # ... and runs, while attempt 2 is mid-call
    wait_for(lambda: "result discarded" in a.log() or "phase a completed" in a.log(), 30, interval=0.05,
             what="worker A's completion to finish")
    assert "result discarded: another attempt owns the phase" in a.log()  # A logs the fenced outcome

    now = ledger(client.db, plan_id)
    contested = now.phase("a")
    assert (contested.status, contested.attempt, owner_pid(contested)) == ("running", 2, b.pid)
    assert contested.id not in now.content_rows  # nothing of attempt 1 was written
    assert [(u.attempt, u.counted) for u in now.usage_of(contested)] == [(1, False)]
    assert not [e for e in client.coordinator.list_events(plan_id) if e.type == "phase_completed"]

    replies.go.set()  # attempt 2's model call answers
    view = client.wait(plan_id, timeout=60)
    assert view.status == "completed"
    led = ledger(client.db, plan_id)
    assert_exactly_once(led)
    contested = led.phase("a")
    assert contested.attempt == 2
    assert led.content_rows[contested.id] == 1
    assert contents.read_text(client.db, plan_id, "a") == answer(2)  # the text is attempt 2's
    spent = sorted(led.usage_of(contested), key=lambda u: u.attempt)
    assert [(u.attempt, u.counted) for u in spent] == [(1, False), (2, True)]
    shown = view.phase("a").usage
    assert shown.wasted_tokens == _tokens(spent[:1]) > 0  # A's spend: waste ...
    assert shown.total_tokens == _tokens(spent[1:]) > 0  # ... B's: the phase's cost
    assert view.usage.total_tokens == _tokens(led.counted)
    assert view.usage.wasted_tokens == _tokens(led.waste) == _tokens(spent[:1])
    finished = [e for e in client.coordinator.list_events(plan_id) if e.type == "plan_finished"]
    assert [e.data["status"] for e in finished] == ["completed"]  # the plan completed exactly once
    completed = [e for e in client.coordinator.list_events(plan_id)
                 if e.type == "phase_completed" and e.phase_key == "a"]
    assert [e.data["attempt"] for e in completed] == [2]


@pytest.mark.slow
def test_a_worker_killed_after_its_usage_was_recorded(client: Any, workers: Any, row_lock: Any) -> None:
    plan_id = client.submit(_plan("killed after the call", {"provider": "offline", "options": {"words": 40}}))
    lock = row_lock(plan_id)
    (a,) = workers.many(1)
    _a_blocked_in_completion(client, plan_id, lock, a)

    a.kill()  # SIGKILL after the model call reported usage, before the completing transaction
    lock.release()
    (b,) = workers.many(1, beat=True)
    _taken_over_by(client, plan_id, b)
    view = client.wait(plan_id, timeout=60)

    assert view.status == "completed"
    led = ledger(client.db, plan_id)
    assert_exactly_once(led)
    contested = led.phase("a")
    assert contested.attempt == 2
    spent = sorted(led.usage_of(contested), key=lambda u: u.attempt)
    assert [(u.attempt, u.counted) for u in spent] == [(1, False), (2, True)]  # the killed attempt's row
    killed = _tokens(spent[:1])
    assert killed > 0
    assert view.phase("a").usage.wasted_tokens == killed  # on record as waste ...
    assert view.phase("a").usage.total_tokens == _tokens(spent[1:])  # ... never counted as cost
    assert view.usage.wasted_tokens == killed
    assert view.usage.total_tokens == _tokens(led.counted) == _tokens(led.usage_rows) - killed
