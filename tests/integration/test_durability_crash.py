"""Durability under process faults and at-least-once delivery: a worker SIGKILLed
mid-phase, the same message delivered twice or to two workers at once.

Real worker subprocesses on a private Redis and the test Postgres; every test
asserts what is stored afterwards (statuses, content and usage rows, attempts).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from storage import plans
from tests.integration.durability import (
    TcpProxy,
    assert_exactly_once,
    board_plan,
    ledger,
    owner_pid,
    wait_for,
    wait_leases_expired,
)


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


def _all_final(client: Any, plan_ids: list[str]) -> bool:
    return all(client.get(pid).final for pid in plan_ids)


@pytest.mark.slow
def test_sigkill_mid_phase_another_worker_takes_over(client: Any, workers: Any) -> None:
    survivor, victim = workers.many(2, beat=True)  # beat (the reconciler) runs on the survivor
    plan_ids = [client.submit(board_plan(f"kill {i}", latency=0.12)) for i in range(3)]

    def victim_mid_call() -> tuple[str, str, int] | None:
        for pid in plan_ids:
            for p in plans.load_state(client.local.db, pid).phases:
                if (p.status == "running" and owner_pid(p) == victim.pid and p.started_at is not None
                        and time.time() - p.started_at.timestamp() > 0.4):
                    return pid, p.key, p.attempt
        return None

    killed_plan, killed_key, killed_attempt = wait_for(victim_mid_call, 30, interval=0.05,
                                                       what="a phase running on the victim")
    victim.kill()  # SIGKILL: no ack, no cleanup, the lease is left to expire
    wait_for(lambda: _all_final(client, plan_ids), 90, interval=0.25, what="every plan final")

    for pid in plan_ids:
        led = ledger(client.local.db, pid)
        assert led.plan.status == "completed", (pid, led.statuses())
        assert set(led.statuses().values()) == {"completed"}
        assert_exactly_once(led)
    led = ledger(client.local.db, killed_plan)
    taken = led.phase(killed_key)
    assert taken.attempt > killed_attempt  # run again by a new attempt ...
    assert owner_pid(taken) is None and taken.lease_expires_at is None  # ... and its lease cleared
    started = [e for e in client.local.reads.list_events(killed_plan)
               if e.type == "phase_started" and e.phase_key == killed_key]
    assert str(survivor.pid) in started[-1].data["worker"]  # by the survivor
    # Killed mid-call, the attempt has (normally) no usage row yet: rows are written when a call
    # ends. Whatever it left is never cost — assert_exactly_once counts only the completing
    # attempt's rows. The kill that does leave a row behind: test_durability_fence.py.
    view = client.get(killed_plan)
    assert view.usage.total_tokens == sum(u.input_tokens + u.output_tokens for u in led.counted) > 0
    assert view.usage.wasted_tokens == sum(u.input_tokens + u.output_tokens for u in led.waste)


def _completed_count(client: Any, plan_ids: list[str]) -> int:
    return sum(1 for pid in plan_ids for p in plans.load_state(client.local.db, pid).phases if p.status == "completed")


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["flushall", "restart"])
def test_broker_loses_everything_reconciler_finishes_plans(client: Any, workers: Any, redis_server: Any,
                                                          fault: str) -> None:
    fleet = workers.many(2, beat=True)
    plan_ids = [client.submit(board_plan(f"broker {fault} {i}", latency=0.05)) for i in range(3)]
    # mid-plan: some phases done, others queued, running, or waiting on a chord counter
    wait_for(lambda: _completed_count(client, plan_ids) >= 3, 30, interval=0.05, what="first phases")
    if fault == "flushall":
        redis_server.flushall()  # queues, unacked messages, chord counters, results: all gone
    else:
        redis_server.restart(down_for=1.5)  # killed, then back empty on the same port
    assert not any(client.get(pid).final for pid in plan_ids)

    def supervised_all_final() -> bool:
        # Like a supervisor (docker restart policy, systemd) would: kombu 5.7's Redis
        # transport can crash a worker while the broker is away ("Unrecoverable error:
        # AttributeError ... 'hostname'" in Channel._connparams); it is started again.
        for w in fleet:
            if not w.alive:
                w.start()
        return _all_final(client, plan_ids)

    wait_for(supervised_all_final, 60, interval=0.25, what="every plan final")

    for pid in plan_ids:
        led = ledger(client.local.db, pid)
        assert led.plan.status == "completed", (pid, led.statuses())
        assert set(led.statuses().values()) == {"completed"}
        assert_exactly_once(led)


@pytest.mark.slow
def test_database_refuses_connections_during_completion(client: Any, workers: Any, settings: Any,
                                                        pg_url: str) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(pg_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).accept()
    try:
        via_proxy = settings.model_copy(update={"database_url": url.set(host="127.0.0.1", port=proxy.port)
                                                .render_as_string(hide_password=False)})
        (worker,) = workers.many(1, beat=True, settings=via_proxy)
        plan_id = client.submit(board_plan("db outage", latency=0.05))

        def opening_mid_call() -> bool:
            p = plans.load_state(client.local.db, plan_id).by_key()["opening"]
            return (p.status == "running" and p.started_at is not None
                    and time.time() - p.started_at.timestamp() > 0.3)

        wait_for(opening_mid_call, 30, interval=0.02, what="opening mid-call")
        proxy.refuse()  # the model call returns into an unreachable database
        wait_leases_expired(client.local.db, plan_id)  # heartbeats fail and the lease expires
        wait_for(lambda: "database unavailable, retrying" in worker.log(), 30, interval=0.1,
                 what="the result write waiting for the database")
        assert plans.load_state(client.local.db, plan_id).by_key()["opening"].status == "running"
        proxy.accept()
        wait_for(lambda: client.get(plan_id).final, 90, interval=0.25, what="plan final")
    finally:
        proxy.close()

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed", led.statuses()
    assert set(led.statuses().values()) == {"completed"}
    assert_exactly_once(led)  # nothing recorded twice, nothing lost
    assert "database unavailable, retrying" in worker.log()  # the result write waited it out
    completed = [e for e in client.local.reads.list_events(plan_id) if e.type == "phase_completed"]
    assert sorted(e.phase_key for e in completed) == sorted(p.key for p in led.phases)
