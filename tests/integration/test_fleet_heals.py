"""The fleet heals itself with no singleton: three ``celery -A tasks worker`` processes
and no beat, under SIGKILLs (whichever worker was reconciling included), a Redis restart
(it comes back empty) and a Postgres outage (every connection cut, new ones refused for a
while). Every plan completes, exactly once: recovery runs in whichever workers are alive,
one sweep at a time across the fleet (``tasks.housekeeping``)."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from storage import outbox, plans
from tests.integration.durability import TcpProxy, assert_exactly_once, board_plan, ledger, wait_for

PLANS = 8
FAULTS = ("kill", "kill", "redis", "kill", "postgres", "kill", "kill")


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


def _completed_phases(client: Any, plan_ids: list[str]) -> int:
    return sum(p.status == "completed" for pid in plan_ids for p in plans.load_state(client.local.db, pid).phases)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_workers_without_beat_finish_every_plan_through_kills_and_outages(
        client: Any, workers: Any, redis_server: Any, settings: Any) -> None:
    url = make_url(settings.database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).accept()
    fleet_settings = settings.model_copy(update={"database_url": url.set(host="127.0.0.1", port=proxy.port)
                                                 .render_as_string(hide_password=False)})
    rng = random.Random(7)
    try:
        fleet = workers.many(3, settings=fleet_settings)  # no beat anywhere
        everyone = list(fleet)
        wait_for(lambda: all("reconciling every" in w.log() for w in fleet), 30, what="every worker's reconciler")
        plan_ids = [client.submit(board_plan(f"fleet {i}", experts=3, rounds=2, latency=0.15, words=150))
                    for i in range(PLANS)]
        done = []
        for fault in FAULTS:  # one every few seconds, while the plans run
            time.sleep(2.5)
            if fault == "kill":  # whichever worker: the one reconciling is as likely as any
                victim = rng.choice([w for w in fleet if w.alive])
                victim.kill()
                fleet.remove(victim)
                fleet.append(workers(settings=fleet_settings))  # a supervisor restarts what dies
                everyone.append(fleet[-1])
            elif fault == "redis":
                redis_server.restart(down_for=1.0)  # the broker comes back empty
            elif fault == "postgres":
                proxy.refuse()  # every connection cut, new ones refused
                time.sleep(3.0)
                proxy.accept()
            done.append((fault, _completed_phases(client, plan_ids)))
        wait_for(lambda: all(client.get(pid).final for pid in plan_ids), 300, interval=0.5,
                 what="every plan to end")
    finally:
        proxy.close()

    total = sum(len(plans.load_state(client.local.db, pid).phases) for pid in plan_ids)
    assert [f for f, _ in done] == list(FAULTS) and done[-1][1] < total, (done, total)  # all hit mid-run
    for pid in plan_ids:
        led = ledger(client.local.db, pid)
        assert led.plan.status == "completed", (pid, led.statuses())
        assert_exactly_once(led)
        finished = [e for e in outbox.list_events(client.local.db, pid) if e.type == "plan_finished"]
        assert len(finished) == 1, finished
    # recovery ran where there was no beat: some worker's own reconciler re-sent what the
    # kills and the empty broker lost
    assert any("reconciled" in w.log() for w in everyone), [w.name for w in everyone]
