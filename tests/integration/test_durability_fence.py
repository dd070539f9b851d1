"""A worker that stalls past its lease and comes back, and one killed between its
model call and its completion — with real worker processes, SIGSTOP and SIGKILL.

To stop worker A at the one moment that matters (its call is over and its usage is on
record, its completing transaction has not written anything), the test gates A's
completion and nothing else. Worker A connects with its own ``application_name`` (a
query parameter of its database URL), and the test installs a statement-level trigger
``BEFORE UPDATE ON plans FOR EACH STATEMENT`` that, for that application name only,
takes and drops an advisory lock the test holds from its own connection. A completion
starts with ``UPDATE plans SET updated_at … RETURNING`` (the plan-row lock, then the
folded completion statement), so A's completion waits in the trigger — before any row
is locked, holding no lock any other session needs. Everything a takeover needs (the
reconciler's and the enqueue's ``UPDATE plans``, claims, heartbeats, usage and events)
runs on other workers' connections and passes. The test sees A waiting in
``pg_stat_activity``, then stops or kills it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from storage import contents, plans, usage
from tests.integration.durability import assert_exactly_once, ledger, owner_pid, wait_for
from tests.llm_server import LLMServer
from tests.statement_gate import StatementGate, statement_gate
from tests.stored_rows import content_rows

KEY_ENV = "DURABILITY_TEST_FENCE_KEY"  # not CONCLAVE_*: settings_env drops those
QUESTION = "Should Ledgerly move to usage-based pricing next quarter?"


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


@pytest.fixture()
def settings(private_settings: Any, served: tuple[LLMServer, SecondCallWaits]) -> Any:
    """The operator lets plans use the test server (a listed literal address) and its key."""
    server, _ = served
    return private_settings.model_copy(update={"allowed_key_envs": [KEY_ENV], "allowed_base_urls": [server.url]})


@pytest.fixture()
def gate(client: Any) -> Iterator[StatementGate]:
    """Holds worker A's plan-row lock (``UPDATE plans SET updated_at … RETURNING``), the first
    statement of its completion."""
    with statement_gate(client.local.db, name="fence-worker-a", event="UPDATE",
                        query_like="UPDATE plans SET updated_at%RETURNING plans.cancel_requested%") as held:
        yield held


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
    return plans.load_state(client.local.db, plan_id).by_key()[key]


def _worker_a(workers: Any, settings: Any, gate: StatementGate) -> Any:
    """Worker A: its database sessions are the ones the gate holds."""
    (a,) = workers.many(1, settings=settings.model_copy(
        update={"database_url": gate.url(settings.database_url)}))
    return a


def _a_held_in_completion(client: Any, plan_id: str, gate: StatementGate, worker: Any) -> None:
    """Wait until ``worker``'s attempt 1 has its usage on record and its completion waits at the gate."""
    a = _phase(client, plan_id)
    wait_for(lambda: any(u.phase_id == a.id and u.attempt == 1 for u in usage.rows_for_plan(client.local.db, plan_id)),
             60, interval=0.05, what="attempt 1's usage row")
    wait_for(gate.waiting, 30, interval=0.05, what="attempt 1's completion waiting at the gate")
    a = _phase(client, plan_id)
    assert (a.status, a.attempt, owner_pid(a)) == ("running", 1, worker.pid)
    assert a.id not in content_rows(client.local.db, plan_id)


def _taken_over_by(client: Any, plan_id: str, worker: Any) -> None:
    """Wait until attempt 1's lease has expired and ``worker`` has claimed attempt 2 (its
    ``phase_started`` event: the phase may already be done when a fast worker is polled)."""
    expires = _phase(client, plan_id).lease_expires_at
    wait_for(lambda: datetime.now(UTC) > expires, 30, interval=0.05, what="attempt 1's lease to expire")

    def second_attempt() -> bool:
        return any(e.type == "phase_started" and e.phase_key == "a" and e.data["attempt"] == 2
                   and e.data["worker"].split(":")[1] == str(worker.pid)
                   for e in client.local.reads.list_events(plan_id))

    wait_for(second_attempt, 60, interval=0.05, what="attempt 2 claimed by the other worker")


def _tokens(rows: list[Any]) -> int:
    return sum(u.input_tokens + u.output_tokens for u in rows)


@pytest.mark.slow
def test_a_stalled_worker_comes_back_and_its_result_is_discarded(
        client: Any, workers: Any, settings: Any, gate: StatementGate, served: Any) -> None:
    server, replies = served
    model = {"provider": "openai", "model": "normal", "base_url": server.url, "api_key_env": KEY_ENV,
             "max_retries": 0, "first_chunk_timeout": 300, "idle_timeout": 300, "deadline": 600}
    plan_id = client.submit(_plan("a stalled worker", model))  # no worker yet: the message waits
    a = _worker_a(workers, settings, gate)
    _a_held_in_completion(client, plan_id, gate, a)

    os.killpg(a.pid, signal.SIGSTOP)  # a long GC pause, a partition: A stops renewing its lease
    try:
        (b,) = workers.many(1, beat=True)  # its reconciler re-sends the phase once the lease expires
        _taken_over_by(client, plan_id, b)
        wait_for(lambda: server.count() == 2, 30, interval=0.05, what="attempt 2's model call")
    finally:
        os.killpg(a.pid, signal.SIGCONT)  # A comes back ...
        gate.open()  # ... and its completion runs, while attempt 2 is mid-call
    wait_for(lambda: "result discarded" in a.log() or "phase a completed" in a.log(), 60, interval=0.05,
             what="worker A's completion to finish")
    assert "result discarded: another attempt owns the phase" in a.log()  # A logs the fenced outcome
    assert "phase a completed" not in a.log()

    now = ledger(client.local.db, plan_id)
    contested = now.phase("a")
    assert (contested.status, contested.attempt, owner_pid(contested)) == ("running", 2, b.pid)
    assert contested.id not in now.content_rows  # nothing of attempt 1 was written
    assert [(u.attempt, u.counted) for u in now.usage_of(contested)] == [(1, False)]
    assert not [e for e in client.local.reads.list_events(plan_id) if e.type == "phase_completed"]
    running = client.local.reads.view(plan_id).phase("a").usage
    assert (running.wasted_tokens, running.total_tokens) == (_tokens(now.usage_of(contested)), 0)

    replies.go.set()  # attempt 2's model call answers
    view = client.wait(plan_id, timeout=60)
    assert view.status == "completed"
    led = ledger(client.local.db, plan_id)
    assert_exactly_once(led)
    contested = led.phase("a")
    assert (contested.status, contested.attempt) == ("completed", 2)
    assert led.content_rows[contested.id] == 1
    assert contents.read_text(client.local.db, plan_id, "a") == answer(2)  # the text is attempt 2's
    spent = sorted(led.usage_of(contested), key=lambda u: u.attempt)
    assert [(u.attempt, u.counted) for u in spent] == [(1, False), (2, True)]
    shown = view.phase("a").usage
    assert shown.wasted_tokens == _tokens(spent[:1]) > 0  # A's spend: waste ...
    assert shown.total_tokens == _tokens(spent[1:]) > 0  # ... B's: the phase's cost
    assert view.usage.total_tokens == _tokens(led.counted)
    assert view.usage.wasted_tokens == _tokens(led.waste) == _tokens(spent[:1])
    finished = [e for e in client.local.reads.list_events(plan_id) if e.type == "plan_finished"]
    assert [e.data["status"] for e in finished] == ["completed"]  # the plan completed exactly once
    completed = [e for e in client.local.reads.list_events(plan_id)
                 if e.type == "phase_completed" and e.phase_key == "a"]
    assert [e.data["attempt"] for e in completed] == [2]


@pytest.mark.slow
def test_a_worker_killed_after_its_usage_was_recorded(
        client: Any, workers: Any, settings: Any, gate: StatementGate) -> None:
    plan_id = client.submit(_plan("killed after the call", {"provider": "offline", "options": {"words": 40}}))
    a = _worker_a(workers, settings, gate)
    _a_held_in_completion(client, plan_id, gate, a)

    a.kill()  # SIGKILL after the model call reported usage, before the completing transaction wrote
    gate.open()
    (b,) = workers.many(1, beat=True)
    _taken_over_by(client, plan_id, b)
    view = client.wait(plan_id, timeout=60)

    assert view.status == "completed"
    led = ledger(client.local.db, plan_id)
    assert_exactly_once(led)
    contested = led.phase("a")
    assert (contested.status, contested.attempt) == ("completed", 2)
    assert content_rows(client.local.db, plan_id)[contested.id] == 1
    spent = sorted(led.usage_of(contested), key=lambda u: u.attempt)
    assert [(u.attempt, u.counted) for u in spent] == [(1, False), (2, True)]  # the killed attempt's row
    killed = _tokens(spent[:1])
    assert killed > 0
    assert view.phase("a").usage.wasted_tokens == killed  # on record as waste ...
    assert view.phase("a").usage.total_tokens == _tokens(spent[1:])  # ... never counted as cost
    assert view.usage.wasted_tokens == killed
    assert view.usage.total_tokens == _tokens(led.counted) == _tokens(led.usage_rows) - killed
    finished = [e for e in client.local.reads.list_events(plan_id) if e.type == "plan_finished"]
    assert [e.data["status"] for e in finished] == ["completed"]
