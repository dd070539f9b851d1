"""Cancellation is a stored flag every safe point checks: queued phases end
cancelled without running, a running phase ends cancelled (stopped at its next
heartbeat, or refused at completion when its model call returns after the
cancel), the plan ends cancelled — never a success after a cancel — and the
tokens already spent stay on record.

Real worker subprocesses on a private Redis and the test Postgres.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

from orchestrator.fleet.celery_app import QUEUE
from storage import plans, usage
from tests.conftest import ROOT, settings_env
from tests.integration.durability import assert_exactly_once, board_plan, ledger, wait_for

KEYS = ["opening", "r1.dana", "r1.ravi", "r1.summary", "final"]


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


def _events(client: Any, plan_id: str) -> list[Any]:
    return list(client.local.reads.list_events(plan_id))


def _running_for(client: Any, plan_id: str, key: str, seconds: float) -> bool:
    p = plans.load_state(client.local.db, plan_id).by_key()[key]
    return p.status == "running" and p.started_at is not None and time.time() - p.started_at.timestamp() > seconds


def test_cancel_queued_phases_end_cancelled_without_running(client: Any, workers: Any, settings: Any) -> None:
    plan_id = client.submit(board_plan("cancel while queued"))  # no worker: the message waits
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "cancel", plan_id, "--json"], cwd=ROOT,
                         env=settings_env(settings), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["status"] == "cancelled" and sorted(res["cancelled"]) == sorted(KEYS)
    assert redis.Redis.from_url(settings.broker_url).llen(QUEUE) == 1  # the message is still queued
    worker = workers()
    # the queued message is delivered, finds its phase cancelled, and is acknowledged as a no-op
    wait_for(lambda: ": 'noop'" in worker.log(), 30, interval=0.1, what="the queued message acknowledged")
    assert redis.Redis.from_url(settings.broker_url).llen(QUEUE) == 0

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "cancelled" and led.plan.error_code == "plan.cancelled"
    assert set(led.statuses().values()) == {"cancelled"}
    assert all(p.attempt == 0 for p in led.phases)  # none was ever claimed
    assert not led.content_rows and not led.usage_rows
    types = [e.type for e in _events(client, plan_id)]
    assert "phase_started" not in types and "phase_completed" not in types
    finished = [e for e in _events(client, plan_id) if e.type == "plan_finished"]
    assert [e.data["status"] for e in finished] == ["cancelled"]
    res2 = client.resume(plan_id)  # a cancelled plan stays cancelled
    assert (res2.enqueued, res2.status) == ([], "cancelled")


def test_cancel_stops_a_running_phase_and_keeps_its_spend(client: Any, workers: Any) -> None:
    workers(beat=True)
    plan_id = client.submit(board_plan("cancel while running", latency=0.1))
    wait_for(lambda: _running_for(client, plan_id, "opening", 0.5), 30, interval=0.02, what="opening mid-call")
    res = client.cancel(plan_id)
    assert sorted(res.cancelled) == sorted(KEYS[1:]) and res.status == "running"  # opening still running
    wait_for(lambda: client.get(plan_id).final, 30, interval=0.1, what="plan final")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "cancelled"
    assert set(led.statuses().values()) == {"cancelled"}  # the running one too: not completed
    assert_exactly_once(led)
    opening = led.phase("opening")
    assert opening.id not in led.content_rows
    spent = led.usage_of(opening)
    assert len(spent) == 1 and not spent[0].counted and spent[0].output_tokens > 0  # partial spend, on record
    assert usage.spent_tokens(client.local.db, plan_id) == spent[0].input_tokens + spent[0].output_tokens
    assert client.get(plan_id).usage.wasted_tokens == spent[0].input_tokens + spent[0].output_tokens
    types = [e.type for e in _events(client, plan_id)]
    assert "phase_completed" not in types
    assert [e.data["status"] for e in _events(client, plan_id) if e.type == "plan_finished"] == ["cancelled"]


def test_model_call_returning_after_cancel_ends_cancelled_not_completed(client: Any, workers: Any,
                                                                         settings: Any) -> None:
    # a long lease: no heartbeat interrupts the call, so it returns normally after the cancel
    workers(settings=settings.model_copy(update={"lease_seconds": 60.0}))
    plan_id = client.submit(board_plan("cancel before completion", latency=0.06))
    wait_for(lambda: _running_for(client, plan_id, "opening", 0.3), 30, interval=0.02, what="opening mid-call")
    client.cancel(plan_id)
    wait_for(lambda: client.get(plan_id).final, 30, interval=0.1, what="plan final")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "cancelled"
    opening = led.phase("opening")
    assert opening.status == "cancelled" and opening.id not in led.content_rows
    assert opening.lease_owner is None
    spent = led.usage_of(opening)
    assert len(spent) == 1 and not spent[0].counted  # the whole call's tokens, kept as spend
    cancelled = [e for e in _events(client, plan_id) if e.type == "phase_cancelled" and e.phase_key == "opening"]
    assert len(cancelled) == 1 and "while the model ran" in cancelled[0].data["reason"]
    assert "phase_completed" not in [e.type for e in _events(client, plan_id)]
    assert client.get(plan_id).status == "cancelled"
