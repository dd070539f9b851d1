"""A worker's metrics, scraped over HTTP from a real worker subprocess and checked against
what the plan stored: phases by outcome, tokens by who counted them, model calls with their
retries, fallbacks and truncations (models served by tests/llm_server.py); and, under the
prefork pool, one scrape adding up every process of the worker — a SIGKILLed child's phase
is taken over, counted once, and no longer reported in flight; and a sweep skipped because
another process holds the fleet-wide lock."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.client.conclave import Conclave
from storage import connect, locks, plans
from storage.status import PhaseStatus
from tasks.housekeeping import LOCK, Housekeeper
from tests.conftest import free_port
from tests.integration.durability import board_plan, ledger, owner_pid, wait_for
from tests.llm_server import LLMServer

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, got), v in samples.items() if n == name and set(labels.items()) <= set(got))


def assert_measured_as_stored(samples: Samples, led: Any) -> None:
    completed = Counter(p.kind for p in led.phases if p.status == PhaseStatus.COMPLETED)
    assert completed.total() == len(led.phases), [(p.key, p.status, p.error_code, p.error_message) for p in led.phases]
    for kind, n in completed.items():
        assert total(samples, "conclave_phase_duration_seconds_count", kind=kind, outcome="completed") == n, kind
    assert total(samples, "conclave_phase_duration_seconds_count", outcome="completed") == completed.total()
    for source in ("provider", "estimated"):
        rows = [u for u in led.usage_rows if u.source == source]
        assert total(samples, "conclave_model_tokens_total", source=source, direction="input") \
            == sum(u.input_tokens for u in rows), source
        assert total(samples, "conclave_model_tokens_total", source=source, direction="output") \
            == sum(u.output_tokens for u in rows), source
    assert total(samples, "conclave_phases_in_flight") == 0


@pytest.fixture()
def settings(private_settings: Any) -> Any:
    return private_settings


REPLY = "Usage-based pricing fits how our customers grow. Position: SUPPORT."


def test_a_worker_serves_its_metrics_and_they_match_what_was_stored(client: Any, workers: Any, settings: Any,
                                                                    tmp_path: Path) -> None:
    with LLMServer(reply=REPLY, chunk_chars=10, retry_after="1") as server:
        registry = tmp_path / "models.yaml"
        remote = {"provider": "openai", "base_url": server.url, "first_chunk_timeout": 10, "idle_timeout": 5,
                  "deadline": 20, "max_retries": 2}
        registry.write_text(yaml.safe_dump({"models": {
            "default": {"provider": "offline"},
            "steady": {**remote, "model": "normal"},  # streams, usage reported
            "silent": {**remote, "model": "hang-first", "first_chunk_timeout": 1},  # no first chunk: the fallback
            "stalling": {**remote, "model": "stall-mid", "idle_timeout": 1},  # two pieces, then silence: truncated
            "limited": {**remote, "model": "rate-limit-then-ok"},  # 429 once, retried after 1 s
        }}))
        port = free_port()
        worker = workers(settings=settings.model_copy(update={"models": registry, "metrics_port": port}))
        cluster = Conclave(settings.model_copy(update={"models": registry}), worker=False)  # submits by its names
        try:
            plan_id = cluster.submit({
                "kind": "board", "title": "metrics", "question": "Should Ledgerly move to usage-based pricing?",
                "rounds": 1, "moderator": {"name": "Morgan", "role": "Chair"},
                "experts": [{"name": n, "role": "Analyst", "model": m} for n, m in
                            (("Dana", "steady"), ("Ravi", "silent"), ("Sofia", "stalling"), ("Tomas", "limited"))]})
            view = cluster.wait(plan_id, timeout=90)
        finally:
            cluster.close()
        assert view.status == "completed", view
        samples = scrape(port)

    led = ledger(client.local.db, plan_id)
    assert_measured_as_stored(samples, led)
    assert {u.source for u in led.usage_rows} == {"provider", "estimated"}  # both kinds were counted
    ok = total(samples, "conclave_model_call_duration_seconds_count", outcome="ok")
    assert ok == len(led.usage_rows)  # every call that ended wrote its usage row
    assert total(samples, "conclave_model_call_duration_seconds_count", model="rate-limit-then-ok",
                 outcome="llm.rate_limited") == 1
    assert total(samples, "conclave_model_retries_total", provider="openai", model="rate-limit-then-ok",
                 code="llm.rate_limited") == 1
    assert total(samples, "conclave_model_fallbacks_total", provider="openai", model="hang-first",
                 reason="first_chunk_timeout") == 1
    assert total(samples, "conclave_model_truncations_total", provider="openai", model="stall-mid",
                 reason="idle_timeout") == 1
    assert total(samples, "conclave_model_retries_total") == 1
    assert total(samples, "conclave_model_fallbacks_total") == total(samples, "conclave_model_truncations_total") == 1
    stalling = led.phase("r1.sofia")
    assert stalling.truncated  # what the metric says is what the phase stores
    assert total(samples, "conclave_model_first_chunk_seconds_count", model="normal") == 1
    assert 0 < total(samples, "conclave_model_first_chunk_seconds_sum", model="normal") < 10
    assert total(samples, "conclave_reconciler_sweeps_total", result="swept") >= 1  # it reconciled when ready
    assert f"metrics on http://127.0.0.1:{port}/metrics" in worker.log()


@pytest.mark.slow
def test_a_prefork_worker_adds_up_its_processes_and_forgets_a_killed_child(client: Any, workers: Any,
                                                                           settings: Any, tmp_path: Path) -> None:
    port = free_port()
    state = tmp_path / "state"
    # CONCLAVE_POOL too: Celery's CLI takes `--pool prefork` for its default and lets the app's setting win
    worker = workers(settings=settings.model_copy(update={"metrics_port": port, "state_dir": state, "pool": "prefork"}),
                     pool="prefork", concurrency=2)
    directory = state / "metrics" / str(worker.pid)
    assert directory.is_dir()
    plan_id = client.submit(board_plan("prefork metrics", latency=0.1))

    def running_in_a_child() -> tuple[str, int] | None:
        for p in plans.load_state(client.local.db, plan_id).phases:
            pid = owner_pid(p)
            if p.status == "running" and pid not in (None, worker.pid) and p.started_at is not None \
                    and time.time() - p.started_at.timestamp() > 0.3:
                return p.key, int(pid or 0)
        return None

    key, child = wait_for(running_in_a_child, 60, interval=0.05, what="a phase running in a pool child")
    assert total(scrape(port), "conclave_phases_in_flight") == 1
    os.kill(child, signal.SIGKILL)  # the child dies mid-call; its gauge file says one phase in flight
    wait_for(lambda: client.get(plan_id).final, 90, interval=0.25, what="the plan to end")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed", led.statuses()
    assert led.phase(key).attempt >= 2  # taken over after the kill
    samples = scrape(port)
    assert_measured_as_stored(samples, led)  # in flight: 0 — the dead child is forgotten
    assert not list(directory.glob(f"gauge_live*_{child}.db"))
    assert total(samples, "conclave_lease_takeovers_total") >= 1  # the parent's reconciler handed it on
    assert total(samples, "conclave_reconciler_actions_total", action="nudged") >= 1
    assert total(samples, "conclave_reconciler_sweeps_total", result="swept") >= 1
    worker.stop()
    assert not directory.exists()  # a stopped worker's values go with it


class DeadlinesOnly:
    """A coordinator whose only part a skipped sweep reaches: the deadlines, ended on every tick."""

    def expire_deadlines(self) -> dict[str, list[str]]:
        return {}


def test_a_sweep_while_another_process_holds_the_lock_is_counted_skipped(clean_db: str) -> None:
    other, mine = connect(clean_db, pool_size=2), connect(clean_db, pool_size=2)  # two processes' engines
    try:
        keeper = Housekeeper(mine, DeadlinesOnly(), interval=60, stalled_after=60)  # type: ignore[arg-type]
        skipped = REGISTRY.get_sample_value("conclave_reconciler_sweeps_total", {"result": "skipped"}) or 0.0
        with locks.exclusive(other, LOCK, stalled_after=60) as held:
            assert held
            assert keeper.sweep() is False
        assert REGISTRY.get_sample_value("conclave_reconciler_sweeps_total", {"result": "skipped"}) == skipped + 1
    finally:
        other.dispose()
        mine.dispose()
