"""Real providers inside real plans: the stream guard's outcomes as stored state and as
what a watcher receives, honest usage, token budgets, context budgets, and keys that
never leave the environment. Models are served by tests/llm_server.py on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.llm_server import LLMServer

REPLY = "Margins improve once metering is automated; payback is about eighteen months. Position: SUPPORT."


@pytest.fixture()
def server() -> Iterator[LLMServer]:
    with LLMServer(reply=REPLY, chunk_chars=10) as s:
        yield s


@pytest.fixture()
def embedded(tmp_path: Path) -> Iterator[Any]:
    from orchestrator.client.conclave import Conclave
    from orchestrator.core.settings import Settings

    c = Conclave(Settings(home=tmp_path / "home", offline_latency=0.0, reconcile_interval=0.5))
    yield c
    c.close()


def model(server: LLMServer, scenario: str, **extra: Any) -> dict[str, Any]:
    """A model on the test server; its clocks are generous (a loaded machine answers late), and a
    test of a stall sets its own."""
    return {"provider": "openai", "model": scenario, "base_url": server.url, "first_chunk_timeout": 3,
            "idle_timeout": 3, "deadline": 10, "max_retries": 2, **extra}


def board(models: dict[str, Any], *, dana: str = "default", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "board", "title": "Models in plans", "question": "Should we switch to usage-based pricing?",
        "rounds": 1, "models": {"default": {"provider": "offline", "options": {"latency": 0.01}}, **models},
        "moderator": {"name": "Morgan", "role": "Chair"},
        "experts": [{"name": "Dana", "role": "CFO", "model": dana}, {"name": "Ravi", "role": "CTO"}], **extra,
    }


def collect(conclave: Any, plan_id: str) -> tuple[list[dict[str, Any]], threading.Thread]:
    """Subscribe to a plan's live messages in the background, as a watcher would."""
    received: list[dict[str, Any]] = []
    sub = conclave.subscribe(plan_id)

    def run() -> None:
        while True:
            msg = sub.get(0.2)
            if msg is not None:
                received.append(msg)
                if msg.get("type") == "plan_finished":
                    sub.close()
                    return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return received, t


def streamed(received: list[dict[str, Any]], key: str) -> str:
    return "".join(m["text"] for m in received if m.get("type") == "chunk" and m.get("phase") == key)


def test_openai_expert_streams_and_usage_is_as_reported(embedded: Any, server: LLMServer) -> None:
    plan_id = embedded.submit(board({"gpt": model(server, "normal")}, dana="gpt"))
    received, t = collect(embedded, plan_id)
    view = embedded.wait(plan_id, timeout=60)
    t.join(5)
    assert view.status == "completed"
    dana = view.phase("r1.dana")
    assert embedded.phase_text(plan_id, "r1.dana") == REPLY and not dana.truncated
    assert dana.usage.input_tokens == 17 and dana.usage.output_tokens == 42 and not dana.usage.estimated
    assert view.phase("r1.ravi").usage.estimated  # the offline model's usage is marked as an estimate
    assert streamed(received, "r1.dana") == REPLY  # every chunk arrived once, in order


def test_no_first_chunk_falls_back_and_replays(embedded: Any, server: LLMServer) -> None:
    plan_id = embedded.submit(board({"gpt": model(server, "hang-first", first_chunk_timeout=0.5)}, dana="gpt"))
    received, t = collect(embedded, plan_id)
    view = embedded.wait(plan_id, timeout=60)
    t.join(5)
    assert view.status == "completed"
    assert embedded.phase_text(plan_id, "r1.dana") == REPLY
    assert streamed(received, "r1.dana") == REPLY  # watchers still saw it arrive, once
    assert server.count("hang-first", stream=False) == 1
    events = [e for e in embedded.events(plan_id) if e.type == "phase_completed" and e.phase_key == "r1.dana"]
    assert events[0].data["fallback"] is True


def test_break_mid_stream_keeps_partial_text_marked_truncated(embedded: Any, server: LLMServer) -> None:
    plan_id = embedded.submit(board({"gpt": model(server, "break-mid")}, dana="gpt"))
    received, t = collect(embedded, plan_id)
    view = embedded.wait(plan_id, timeout=60)
    t.join(5)
    assert view.status == "completed"
    stored = embedded.phase_text(plan_id, "r1.dana")
    assert view.phase("r1.dana").truncated is True
    assert stored and REPLY.startswith(stored) and stored != REPLY
    assert streamed(received, "r1.dana") == stored  # never the full text again on top
    assert server.count("break-mid", stream=False) == 0  # no fallback after partial output


def test_auth_error_fails_the_expert_and_the_board_goes_on(embedded: Any, server: LLMServer) -> None:
    os.environ["CONCLAVE_TEST_SECRET_KEY"] = "sk-test-do-not-leak-4242"
    try:
        plan_id = embedded.submit(board({"gpt": model(server, "auth", api_key_env="CONCLAVE_TEST_SECRET_KEY")},
                                        dana="gpt"))
        view = embedded.wait(plan_id, timeout=60)
    finally:
        del os.environ["CONCLAVE_TEST_SECRET_KEY"]
    dana = view.phase("r1.dana")
    assert dana.status == "failed" and dana.error_code == "llm.auth"
    assert server.count("auth") == 1  # 401 is never retried
    assert view.status == "completed"  # a missing expert does not sink the meeting
    assert "Dana" in embedded.phase_text(plan_id, "r1.summary")
    dump = json.dumps(view.to_dict()) + "".join(json.dumps(e.data) for e in embedded.events(plan_id))
    assert "sk-test-do-not-leak-4242" not in dump  # the server echoed the key; we never repeat it


def test_rate_limit_is_retried_after_retry_after(embedded: Any) -> None:
    with LLMServer(reply=REPLY, retry_after="1") as s:
        plan_id = embedded.submit(board({"gpt": model(s, "rate-limit-then-ok")}, dana="gpt"))
        view = embedded.wait(plan_id, timeout=60)
        assert view.phase("r1.dana").status == "completed"
        assert s.count("rate-limit-then-ok") == 2


def test_token_budget_stops_the_plan_before_the_call_that_would_exceed_it(embedded: Any) -> None:
    plan_id = embedded.submit(board({}, budget={"max_tokens": 2500}))
    view = embedded.wait(plan_id, timeout=60)
    assert view.status == "budget_exhausted"
    statuses = {p.key: p.status for p in view.phases}
    assert statuses["opening"] == "completed"
    # the call that did not fit was refused; what ran fitted (which phases, depends on the race
    # between the round's turns for the reservations), and nothing ended any other way
    assert any(p.error_code == "llm.budget_exhausted" for p in view.phases)
    assert all(p.status in ("completed", "skipped") or p.error_code == "llm.budget_exhausted" for p in view.phases)
    assert view.usage.total_tokens + view.usage.wasted_tokens <= 2500


def test_small_context_window_summarises_and_counts_the_summariser(embedded: Any, server: LLMServer) -> None:
    long_context = {"provider": "offline", "context_window": 900, "max_output_tokens": 200,
                    "options": {"latency": 0, "words": 260}}
    plan = board({"tight": long_context})
    plan["rounds"] = 2
    plan["moderator"]["model"] = "tight"
    plan_id = embedded.submit(plan)
    view = embedded.wait(plan_id, timeout=90)
    assert view.status == "completed", view.error
    engine = create_engine(embedded.settings.effective_database_url)
    with engine.connect() as c:
        purposes = [r[0] for r in c.execute(text("select u.purpose from usage u join phases p on p.id = u.phase_id "
                                                 "where u.plan_id = :p and p.status = 'completed' "
                                                 "and p.attempt = u.attempt"),
                                            {"p": plan_id})]
    engine.dispose()
    assert "summarise" in purposes  # the summariser's tokens are on the plan's bill
    assert view.usage.total_tokens >= sum(p.usage.total_tokens for p in view.phases) > 0


def test_conclave_run_board_with_openai_experts(tmp_path: Path, server: LLMServer) -> None:
    plan = board({"gpt": model(server, "normal")}, dana="gpt")
    for e in plan["experts"]:
        e["model"] = "gpt"
    plan["moderator"]["model"] = "gpt"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(path), "--json"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["status"] == "completed" and summary["synthesis"] == REPLY
    assert summary["usage"]["estimated"] is False
    assert server.count("normal") == 5  # opening, two turns, summary, final
