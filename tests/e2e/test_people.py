"""People at the table, end to end: a real ``conclave api``, real worker subprocesses, a private
Redis the test may flush, httpx as the person's client.

A person's seat waits holding nothing — no worker thread (the worker's in-flight gauge is 0), no
broker message (the queue and the unacked set are empty) — across a worker SIGKILL, a Redis flush
and an API restart; the answer posted to the new API resumes the plan on a new worker; a second
answer with another key is refused and the same key is told the stored outcome; another tenant
finds no plan. Then approval and steering over the same routes, and the CLI's commands over
``--url``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from storage import connect, outbox, plans
from storage.status import PhaseStatus, PlanStatus
from tests.conftest import free_port, settings_env
from tests.e2e.test_api import api, assert_error  # noqa: F401  (api: the API server fixture)
from tests.e2e.test_plan_page import make_tokens
from tests.integration.durability import wait_for
from tests.integration.test_worker_metrics import scrape, total

QUESTION = "Should Ledgerly move to usage-based pricing next quarter?"
CONCLAVE = [sys.executable, "-m", "orchestrator.cli"]


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    """The broker, the results and the bus on a private Redis: this test flushes it."""
    return private_settings


def seated_board(*, approve: bool = False, rounds: int = 1, task_id: str | None = None) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "kind": "board", "title": "A board with a person", "question": QUESTION, "rounds": rounds,
        "moderator": {"name": "Morgan", "role": "Chair of the board"},
        "experts": [{"name": "Dana", "role": "Chief Financial Officer"},
                    {"name": "You", "role": "Founder", "human": True, "respond_within": "1h"}],
        "models": {"default": {"provider": "offline", "options": {"words": 30}}},
    }
    if approve:
        plan["final"] = {"approve": True}
    if task_id:
        plan["task_id"] = task_id
    return plan


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def status_of(url: str, token: str, plan_id: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/v1/plans/{plan_id}", headers=bearer(token), timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def phase(view: dict[str, Any], key: str) -> dict[str, Any]:
    return next(p for p in view["phases"] if p["key"] == key)


def broker_holds(url: str) -> tuple[int, int]:
    """(messages queued for the workers, messages delivered and not acknowledged) in the broker."""
    r = redis.Redis.from_url(url)
    return int(r.llen("conclave")), int(r.hlen("unacked"))


@pytest.mark.slow
def test_a_seat_waits_holding_nothing_across_a_worker_kill_a_redis_flush_and_an_api_restart(
        api: Any, workers: Any, settings: Any, redis_server: Any, tmp_path: Path) -> None:  # noqa: F811
    tokens = make_tokens(settings.database_url, ("founder", "acme", ["plans:read", "plans:write"]),
                         ("rival", "globex", ["plans:read", "plans:write"]))
    founder, rival = tokens["founder"][1], tokens["rival"][1]
    env = {"CONCLAVE_AUTH": "tokens"}
    server = api(env=env)
    port = free_port()
    worker = workers(settings=settings.model_copy(update={"metrics_port": port}))
    r = httpx.post(f"{server.url}/v1/plans", json=seated_board(), headers=bearer(founder), timeout=30)
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]

    def asked() -> dict[str, Any] | None:
        view = status_of(server.url, founder, plan_id)
        ready = phase(view, "r1.you")["status"] == "awaiting_input" and phase(view, "r1.dana")["status"] == "completed"
        return view if ready else None

    view = wait_for(asked, 60, interval=0.2, what="the seat asked and Dana's turn done")
    seat = phase(view, "r1.you")
    assert view["awaiting"] == [{"phase": "r1.you", "expert": "You", "since": seat["asked_at"],
                                 "due_at": seat["due_at"]}]
    # it waits holding nothing: no phase in flight on the worker, no message in the broker
    time.sleep(1.5)  # the chord's advance ran; give any stray message time to show
    assert total(scrape(port), "conclave_phases_in_flight") == 0
    assert broker_holds(settings.broker_url) == (0, 0)

    worker.kill()  # SIGKILL
    redis_server.flushall()
    server.stop()
    server = api(env=env)
    view = status_of(server.url, founder, plan_id)
    assert view["status"] == "running" and phase(view, "r1.you")["status"] == "awaiting_input"
    assert phase(view, "r1.you")["due_at"] == seat["due_at"]  # the same deadline, from the database

    answer = {"text": "We pilot it with two segments first.", "idempotency_key": "answer-1"}
    url = f"{server.url}/v1/plans/{plan_id}/phases/r1.you/input"
    assert_error(httpx.post(url, json=answer, headers=bearer(rival), timeout=10), 404)  # another tenant's
    r = httpx.post(url, json=answer, headers=bearer(founder), timeout=30)
    assert r.status_code == 200, r.text
    stored = r.json()
    assert stored["status"] == "completed" and stored["replayed"] is False
    assert stored["answered_by"] == {"id": tokens["founder"][0], "name": "founder"}
    assert stored["enqueued"] == ["r1.summary", "final"]  # sent, though no worker listens yet
    workers()
    done = wait_for(lambda: (v := status_of(server.url, founder, plan_id))["status"] != "running" and v, 90,
                    interval=0.3, what="the plan to end")
    assert done["status"] == "completed"
    assert "We pilot it with two segments first." in httpx.get(
        f"{server.url}/v1/plans/{plan_id}/phases/r1.you/content", headers=bearer(founder)).json()["text"]

    again = httpx.post(url, json=answer, headers=bearer(founder), timeout=10)
    assert again.status_code == 200 and again.json() == {**stored, "replayed": True, "enqueued": []}
    other = httpx.post(url, json={"text": "Changed my mind.", "idempotency_key": "answer-2"}, headers=bearer(founder),
                       timeout=10)
    err = assert_error(other, 409)
    assert err["code"] == "phase.not_waiting" and err["details"][0]["status"] == "completed"
    header = httpx.post(url, json={"text": "Same key, by header."}, headers={**bearer(founder),
                                                                            "Idempotency-Key": "answer-1"})
    assert header.status_code == 200 and header.json()["replayed"] is True
    db = connect(settings.database_url)
    try:
        received = [e for e in outbox.list_events(db, plan_id) if e.type == "input_received"]
        assert len(received) == 1 and received[0].data["actor"]["name"] == "founder"
        assert founder not in json.dumps([e.data for e in outbox.list_events(db, plan_id)])  # never a token
    finally:
        db.dispose()


@pytest.mark.slow
def test_approval_steering_and_answers_over_the_api_and_the_cli(api: Any, workers: Any, settings: Any,  # noqa: F811
                                                                 tmp_path: Path) -> None:
    tokens = make_tokens(settings.database_url, ("founder", "acme", ["plans:read", "plans:write"]),
                         ("reader", "acme", ["plans:read"]))
    founder, reader = tokens["founder"][1], tokens["reader"][1]
    server = api(env={"CONCLAVE_AUTH": "tokens"})
    workers()
    r = httpx.post(f"{server.url}/v1/plans", json=seated_board(approve=True, rounds=2), headers=bearer(founder))
    assert r.status_code == 201, r.text
    plan_id = r.json()["plan_id"]
    env = {**settings_env(settings), "CONCLAVE_URL": server.url, "CONCLAVE_TOKEN": founder}

    def cli(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CONCLAVE, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={**env, **({"CONCLAVE_TOKEN": token} if token else {})})

    wait_for(lambda: phase(status_of(server.url, founder, plan_id), "r1.you")["status"] == "awaiting_input", 60,
             what="round 1's seat")
    refused = cli("steer", plan_id, "Weigh churn first.", token=reader)
    assert refused.returncode == 2 and "[auth.forbidden]" in refused.stderr  # plans:write is needed
    steered = cli("steer", plan_id, "Weigh churn first.", "--json")
    assert steered.returncode == 0, steered.stderr
    assert json.loads(steered.stdout) == {"plan_id": plan_id, "status": "running", "n": 1}
    (tmp_path / "answer.md").write_text("My answer, from a file.\n", encoding="utf-8")
    answered = cli("answer", plan_id, "r1.you", "--file", "answer.md")
    assert answered.returncode == 0 and f"{plan_id}: r1.you answered" in answered.stdout, answered.stderr
    again = cli("answer", plan_id, "r1.you", "Twice?")
    assert again.returncode == 1 and "[phase.not_waiting]" in again.stderr and "already answered" in again.stderr
    wait_for(lambda: phase(status_of(server.url, founder, plan_id), "r2.you")["status"] == "awaiting_input", 60,
             what="round 2's seat")
    shown = cli("status", plan_id)
    assert "waiting for You (r2.you) since" in shown.stdout and "note 1 from founder: Weigh churn first." \
        in shown.stdout, shown.stdout
    asked = next(p for p in status_of(server.url, founder, plan_id)["phases"] if p["key"] == "r2.you")["asked"]
    assert "Weigh churn first." in asked  # round 2 started after the note: the person is given it too
    r = httpx.post(f"{server.url}/v1/plans/{plan_id}/phases/r2.you/input", json={"text": "Round two."},
                   headers=bearer(founder))
    assert r.status_code == 200, r.text
    wait_for(lambda: status_of(server.url, founder, plan_id)["status"] == "awaiting_approval", 60,
             what="the draft")
    result = httpx.get(f"{server.url}/v1/plans/{plan_id}/result", headers=bearer(founder)).json()
    assert result["status"] == "awaiting_approval" and "Recommendation:" in result["text"]
    assert_error(httpx.post(f"{server.url}/v1/plans/{plan_id}/send-back", json={"note": ""},
                            headers=bearer(founder)), 422)
    sent = cli("send-back", plan_id, "Lead with cash flow.")
    assert sent.returncode == 0 and "final.revised rewrites it" in sent.stdout, sent.stderr
    wait_for(lambda: status_of(server.url, founder, plan_id)["status"] == "awaiting_approval"
             and phase(status_of(server.url, founder, plan_id), "final.revised")["status"] == "completed", 60,
             what="the revision")
    second = httpx.post(f"{server.url}/v1/plans/{plan_id}/send-back", json={"note": "Again."}, headers=bearer(founder))
    assert assert_error(second, 409)["code"] == "plan.already_revised"
    approved = cli("approve", plan_id, "--json")
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout) == {"plan_id": plan_id, "status": "completed", "phase": "final.revised",
                                           "revision": 1}
    final = httpx.get(f"{server.url}/v1/plans/{plan_id}/result", headers=bearer(founder)).json()
    revised = httpx.get(f"{server.url}/v1/plans/{plan_id}/phases/final.revised/content",
                        headers=bearer(founder)).json()
    assert final["status"] == "completed" and final["text"] == revised["text"]
    db = connect(settings.database_url)
    try:
        state = plans.load_state(db, plan_id)
        assert state.plan.status == PlanStatus.COMPLETED and state.by_key()["r1.you"].status == PhaseStatus.COMPLETED
        who = {e.type: e.data.get("actor") for e in outbox.list_events(db, plan_id)
               if e.type in ("steered", "sent_back", "approved", "input_received")}
        assert all(a == {"id": tokens["founder"][0], "name": "founder"} for a in who.values()), who
        assert set(who) == {"steered", "sent_back", "approved", "input_received"}
    finally:
        db.dispose()
