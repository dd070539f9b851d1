"""Usage is the sum of per-(phase, attempt, seq) rows: written once however often
the write is retried, counted only for the attempt that completed its phase, and
provider-reported tokens kept apart from estimates.

A real worker subprocess calls a real HTTP model server (tests/llm_server.py)
that reports usage, one that does not, and the offline model (which estimates).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.gateway.model_gateway import default_providers
from orchestrator.gateway.types import ModelSpec, Usage
from storage import usage
from tasks.claimed import PhaseWork
from tasks.runner import PhaseRunner
from tests.integration.durability import assert_exactly_once, board_plan, ledger, wait_for
from tests.llm_server import LLMServer

KEY_ENV = "DURABILITY_TEST_USAGE_KEY"  # not CONCLAVE_*: settings_env drops those


@pytest.fixture()
def settings(private_settings: Any, server: LLMServer) -> Any:
    """The operator lets plans use the test server (a listed literal address) and its key."""
    return private_settings.model_copy(update={"allowed_key_envs": [KEY_ENV], "allowed_base_urls": [server.url]})


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLMServer]:
    monkeypatch.setenv(KEY_ENV, "sk-test-usage")  # inherited by the worker subprocess
    with LLMServer(prompt_tokens=17, completion_tokens=42) as running:
        yield running


def _usage_plan(url: str) -> dict[str, Any]:
    def model(scenario: str) -> dict[str, Any]:
        return {"provider": "openai", "model": scenario, "base_url": url, "api_key_env": KEY_ENV,
                "max_retries": 0}

    return {
        "kind": "team", "title": "usage sources", "divergence": "off",
        "question": "Should Ledgerly move to usage-based pricing next quarter?",
        "models": {"reported": model("normal"), "unreported": model("no-usage"),
                   "default": {"provider": "offline", "options": {"words": 30}}},
        "experts": [{"name": "Ada", "role": "Analyst", "model": "reported"},
                    {"name": "Bo", "role": "Analyst", "model": "unreported"},
                    {"name": "Cy", "role": "Analyst", "model": "default"}],
        "phases": [{"id": "a", "expert": "Ada", "prompt": "Estimate the revenue impact."},
                   {"id": "b", "expert": "Bo", "prompt": "Estimate the churn risk."},
                   {"id": "c", "expert": "Cy", "prompt": "List the legal constraints."}],
        "synthesis": {"expert": "Cy"},
    }


def test_usage_is_the_sum_of_rows_provider_and_estimated_kept_apart(client: Any, workers: Any,
                                                                   server: LLMServer) -> None:
    workers(beat=True)
    plan_id = client.submit(_usage_plan(server.url))
    wait_for(lambda: client.get(plan_id).final, 60, interval=0.2, what="plan final")

    led = ledger(client.local.db, plan_id)
    assert led.plan.status == "completed", [(p.key, p.error_message) for p in led.phases]
    assert_exactly_once(led)
    by_key = {p.key: led.usage_of(p) for p in led.phases}
    (a,) = by_key["a"]
    assert (a.source, a.input_tokens, a.output_tokens) == ("provider", 17, 42)  # as reported, not estimated
    (b,) = by_key["b"]
    assert b.source == "estimated" and b.method  # the server reported nothing: the row says so
    (c,) = by_key["c"]
    assert (c.source, c.method) == ("estimated", "offline:chars/4")

    totals = client.get(plan_id).usage  # what a user sees
    rows = led.usage_rows
    assert totals.provider_tokens == 17 + 42
    assert totals.estimated_tokens == sum(u.input_tokens + u.output_tokens for u in rows if u.source != "provider")
    assert totals.total_tokens == sum(u.input_tokens + u.output_tokens for u in rows)  # the sum of rows
    assert totals.provider_tokens + totals.estimated_tokens == totals.total_tokens
    assert totals.calls == len(rows) == len(led.phases) and totals.wasted_tokens == 0
    view = client.get(plan_id)
    assert view.usage.estimated
    assert view.phase("a").usage.estimated is False and view.phase("b").usage.estimated is True


def test_usage_write_is_idempotent_under_retries_and_races(client: Any) -> None:
    """A usage write retried (the database failed after committing) or raced by a
    duplicate never adds a row; a completion marks exactly that attempt's rows."""
    plan_id = client.submit(board_plan("usage writes"))
    runner = PhaseRunner(client.local.db, client.settings, client.local.bus, default_providers())
    opening_id = client.local.reads.state(plan_id).by_key()["opening"].id
    work = runner.claim(opening_id, owner="test:1:usage")
    assert isinstance(work, PhaseWork) and work.attempt == 1
    spec = ModelSpec(name="default", provider="offline")
    used = Usage(input_tokens=100, output_tokens=50, source="provider", method=None)

    barrier = threading.Barrier(8)

    def write() -> None:
        barrier.wait()
        runner.record_usage(work, seq=1, purpose="chat", spec=spec, used=used)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runner.record_usage(work, seq=1, purpose="chat", spec=spec, used=used)  # a retry after commit
    runner.record_usage(work, seq=2, purpose="summarise", spec=spec,
                             used=Usage(input_tokens=10, output_tokens=5, source="estimated", method="chars/4"))
    rows = usage.rows_for_plan(client.local.db, plan_id)
    assert [(r.seq, r.source, r.counted) for r in rows] == [(1, "provider", False), (2, "estimated", False)]

    from orchestrator.gateway.types import Completion

    done = Completion(text="The meeting is open.", usage=used, finish_reason="stop")
    assert runner.complete(work, done) == "completed"
    assert runner.complete(work, done) == "completed"  # a retried completion: same answer, no new row
    led = ledger(client.local.db, plan_id)
    assert led.content_rows == {opening_id: 1}
    assert [(r.seq, r.counted) for r in led.usage_rows] == [(1, True), (2, True)]
    totals = client.get(plan_id).usage
    assert (totals.provider_tokens, totals.estimated_tokens, totals.wasted_tokens) == (150, 15, 0)
