"""Resume is a rebuild from stored status: one resume at a time across processes,
by plan id or external task id, failed phases re-run only on request, and debates
inserted while the plan ran survive a crash without exceeding ``max_debates``.

Real worker subprocesses on a private Redis (which the tests flush to lose the
queued messages, as a broker restart would) and the test Postgres.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import text

from orchestrator.core.errors import ResumeInProgress
from orchestrator.fleet.celery_app import QUEUE
from storage import plans
from tests.conftest import ROOT, settings_env
from tests.integration.durability import (
    assert_exactly_once,
    board_plan,
    expire_leases,
    lapse_resume_guard,
    ledger,
    owner_pid,
    team_plan,
    wait_for,
)

GUARD = 3.0  # seconds a resume holds its plan's guard in these tests


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings.model_copy(update={"resume_guard_seconds": GUARD})


def _queued(settings: Any) -> int:
    return int(redis.Redis.from_url(settings.broker_url).llen(QUEUE))


def _lose_broker(settings: Any) -> None:
    redis.Redis.from_url(settings.broker_url).flushall()


RESUMER = """
import json, os, sys, threading, time
from orchestrator.client.conclave import Conclave
from orchestrator.core.errors import ConclaveError
from orchestrator.core.settings import Settings

ref, go, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Conclave(Settings(), worker=False)
c.get(ref)  # warm the connection pool
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
out = []
def one():
    try:
        r = c.resume(ref)
        out.append({"ok": True, "plan_id": r.plan_id, "enqueued": r.enqueued})
    except ConclaveError as e:
        out.append({"ok": False, "code": e.code, "http": e.http_status, "message": e.message})
threads = [threading.Thread(target=one) for _ in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out), flush=True)
c.close()
"""


def test_concurrent_resumes_from_many_processes_exactly_one_proceeds(client: Any, settings: Any,
                                                                     tmp_path: Path) -> None:
    plan_id = client.submit(board_plan("concurrent resume", task_id="crm-deal-7"))
    _lose_broker(settings)  # the queued message is gone: the plan needs a resume
    go = tmp_path / "go"
    env = settings_env(settings)
    procs = [subprocess.Popen([sys.executable, "-c", RESUMER, ref, str(go), "6"], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for ref in (plan_id, "crm-deal-7", plan_id, "crm-deal-7")]  # by id and by task id
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read() if p.stderr else line
        go.touch()  # 4 processes x 6 threads = 24 resumes at once
        results = [r for p in procs for r in json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1])]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)

    assert len(results) == 24
    winners = [r for r in results if r["ok"]]
    refused = [r for r in results if not r["ok"]]
    assert len(winners) == 1, winners
    # the board is static: the one resume that proceeded sent all of it, as one canvas
    assert winners[0]["plan_id"] == plan_id and winners[0]["enqueued"] == _keys(client, plan_id)
    assert {(r["code"], r["http"]) for r in refused} == {(ResumeInProgress.code, 409)}
    assert all("resume already in progress" in r["message"] for r in refused)
    assert _queued(settings) == 1  # one canvas sent, by the one resume that proceeded
    opening = plans.load_state(client.local.db, plan_id).by_key()["opening"]
    assert opening.status == "pending" and opening.enqueued_at is not None


def test_resume_by_external_task_id_rebuilds_from_stored_status(client: Any, workers: Any,
                                                               settings: Any) -> None:
    plan_id = client.submit(board_plan("resume by task id", task_id="crm:deal/42"))
    _lose_broker(settings)
    res = client.resume("crm:deal/42")
    assert (res.plan_id, res.enqueued, res.retried, res.status) == (plan_id, _keys(client, plan_id), [], "running")
    assert _queued(settings) == 1
    workers(beat=True)
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")
    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed"
    assert_exactly_once(led)
    attempts = {p.key: p.attempt for p in led.phases}

    lapse_resume_guard(client.local.db, plan_id)  # the first resume's guard is over
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "crm:deal/42", "--json",
                          "--no-follow"], cwd=ROOT, env=settings_env(settings), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    again = json.loads(out.stdout)
    assert (again["plan_id"], again["status"], again["enqueued"]) == (plan_id, "completed", [])
    after = ledger(client.local.db, plan_id)  # nothing was sent (no new enqueue mark) and nothing ran again
    assert {p.key: p.attempt for p in after.phases} == attempts  # final phases left alone
    assert {p.key: p.enqueued_at for p in after.phases} == {p.key: p.enqueued_at for p in led.phases}
    assert len(after.usage_rows) == len(led.usage_rows)


def _keys(client: Any, plan_id: str) -> list[str]:
    """Every phase of the plan, in plan order."""
    return [p.key for p in plans.load_state(client.local.db, plan_id).phases]


def _without_fault(client: Any, plan_id: str) -> None:
    """The operator fixes the model configuration stored with the plan."""
    spec = plans.get_plan(client.local.db, plan_id).spec
    spec["models"]["default"]["options"].pop("fail")
    with client.local.db.engine.begin() as c:
        c.execute(text("UPDATE plans SET spec = :spec WHERE id = :id"), {"spec": json.dumps(spec), "id": plan_id})


@pytest.mark.slow
def test_failed_phases_rerun_only_with_retry_failed(client: Any, workers: Any) -> None:
    worker = workers(beat=True)
    plan_id = client.submit(board_plan("retry failed", fail=["Ravi"], model={"max_retries": 0},
                                       plan={"missing_expert": "fatal"}))
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")
    before = ledger(client.local.db, plan_id)
    assert before.plan.status == "failed"
    assert before.statuses() == {"opening": "completed", "r1.dana": "completed", "r1.ravi": "failed",
                                 "r1.summary": "skipped", "final": "skipped"}

    res = client.resume(plan_id)  # without retry_failed: failed stays failed
    assert (res.enqueued, res.retried, res.status) == ([], [], "failed")
    same = ledger(client.local.db, plan_id)  # nothing was sent (no new enqueue mark) and nothing ran again
    assert same.statuses() == before.statuses()
    assert {p.key: p.enqueued_at for p in same.phases} == {p.key: p.enqueued_at for p in before.phases}
    assert same.phase("r1.ravi").attempt == 1 and same.phase("r1.ravi").retries_requested == 0
    assert len(same.usage_rows) == len(before.usage_rows)

    _without_fault(client, plan_id)
    # a stored spec is immutable by contract and workers cache it parsed: an operator who
    # edits one in the database restarts the workers that may hold the old one
    worker.stop()
    workers(beat=True)
    lapse_resume_guard(client.local.db, plan_id)
    res = client.resume(plan_id, retry_failed=True)
    assert sorted(res.retried) == ["final", "r1.ravi", "r1.summary"]
    assert res.enqueued[0] == "r1.ravi" and res.status == "running"
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final after retry")
    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed"
    assert set(led.statuses().values()) == {"completed"}
    assert_exactly_once(led)
    ravi = led.phase("r1.ravi")
    assert ravi.retries_requested == 1 and ravi.attempt == 2  # the retry is recorded on the phase
    assert {p.key: p.attempt for p in led.phases if p.key != "r1.ravi"} == {
        "opening": 1, "r1.dana": 1, "r1.summary": 1, "final": 1}  # nothing completed ran again
    retry_events = [e for e in client.local.reads.list_events(plan_id) if e.type == "retry_requested"]
    assert len(retry_events) == 1 and "r1.ravi" in retry_events[0].data["phases"]


def test_retry_failed_leaves_a_completed_plan_alone(client: Any, workers: Any) -> None:
    workers(beat=True)  # a tolerated failure: the board completes without Ravi
    plan_id = client.submit(board_plan("completed with a failure", fail=["Ravi"], model={"max_retries": 0}))
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")
    before = ledger(client.local.db, plan_id)
    assert before.plan.status == "completed" and before.phase("r1.ravi").status == "failed"

    res = client.resume(plan_id, retry_failed=True)
    assert (res.enqueued, res.retried, res.status) == ([], [], "completed")
    after = ledger(client.local.db, plan_id)
    assert after.statuses() == before.statuses()  # a final plan keeps its final phases
    assert after.phase("r1.ravi").retries_requested == 0
    assert not [e for e in client.local.reads.list_events(plan_id) if e.type == "retry_requested"]


@pytest.mark.slow
def test_debates_survive_a_crash_and_max_debates_holds(client: Any, workers: Any) -> None:
    (victim,) = workers.many(1)  # no beat: only the resume below brings the plan back
    plan_id = client.submit(team_plan("debates and a crash", groups=2, max_debates=1, latency=0.08))

    def debate_mid_call() -> list[str] | None:
        running = [p for p in plans.load_state(client.local.db, plan_id).phases
                   if p.kind == "debate" and p.status == "running" and owner_pid(p) == victim.pid
                   and p.started_at is not None and time.time() - p.started_at.timestamp() > 0.3]
        return [p.key for p in running] or None

    wait_for(debate_mid_call, 60, interval=0.05, what="a debate running")
    victim.kill()
    debates = [p for p in plans.load_state(client.local.db, plan_id).phases if p.kind == "debate"]
    assert len(debates) == 2 and {p.group_key for p in debates} == {"debate-check-1"}

    expire_leases(client.local.db, plan_id)  # the killed worker's leases are over
    res = client.resume(plan_id)
    assert {p.key for p in debates} & set(res.enqueued)  # resume sees the inserted debates
    workers(beat=True)
    wait_for(lambda: client.get(plan_id).final, 90, interval=0.25, what="plan final")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed", led.statuses()
    assert set(led.statuses().values()) == {"completed"}
    assert_exactly_once(led)
    groups = {p.group_key for p in led.phases if p.kind == "debate"}
    assert groups == {"debate-check-1"}  # the second divergence found the limit reached
    assert len([p for p in led.phases if p.kind == "debate"]) == 2
    kinds = [e.type for e in client.local.reads.list_events(plan_id)]
    assert kinds.count("debate_inserted") == 1
    assert kinds.count("debate_limit_reached") == 1
    assert any(p.attempt > 1 for p in led.phases if p.kind == "debate")  # taken over after the crash
