"""Issue 8, attack 4: an upstream error body never reaches a plan's readers.

A real ``conclave api`` and a real worker subprocess; the operator's registry points four
models at the test LLM server, which answers 401, 400 and 500 — and, inside a 200 stream,
an error object — with a body holding a traceable sentence, a token-like secret of its own
and the key it received. Readers (the plan view, the stored events, the SSE stream, the
stored phase and plan rows) see each phase's stable code and a reason made of the status
and the provider's error type; the worker's log has the body, redacted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import select

from orchestrator.client.conclave import Conclave
from storage.models import Phase, Plan
from tests.e2e.test_api import ApiServer, follow
from tests.llm_server import LEAK_SECRET, LEAK_SENTENCE, LLMServer

KEY = "sk-worker-KEY-0a1b2c3d4e5f6789"
#: phase id -> (registry model: wire and scenario, the code and reason readers see)
CASES = {
    "unauthorized": ("openai", "leaky-401", "llm.auth", "openai HTTP 401 (invalid_api_key)"),
    "rejected": ("anthropic", "leaky-400", "llm.bad_request", "anthropic HTTP 400 (invalid_request_error)"),
    "broken": ("ollama", "leaky-500", "llm.unavailable", "ollama HTTP 500"),
    "in-stream": ("openai", "leaky-stream", "llm.bad_request", "openai stream error (invalid_request_error)"),
}


def _registry(path: Path, url: str) -> Path:
    models: dict[str, Any] = {"lead": {"provider": "offline"}}
    for phase, (wire, scenario, _, _) in CASES.items():
        models[phase] = {"provider": wire, "model": scenario, "base_url": url, "api_key_env": "UPSTREAM_TEST_KEY",
                         "max_retries": 0, "first_chunk_timeout": 10, "idle_timeout": 10, "deadline": 30}
    path.write_text(yaml.safe_dump({"models": models}))
    return path


def _plan() -> dict[str, Any]:
    return {
        "kind": "team", "title": "Upstream errors", "divergence": "off",
        "question": "Should we move to usage-based pricing?",
        "experts": [{"name": f"E{i}", "role": "Analyst", "model": phase} for i, phase in enumerate(CASES)]
        + [{"name": "Lead", "role": "Lead", "model": "lead"}],
        "phases": [{"id": phase, "expert": f"E{i}", "prompt": "Analyse it."} for i, phase in enumerate(CASES)],
        "synthesis": {"expert": "Lead"},
    }


def test_upstream_error_bodies_reach_only_the_worker_log(settings: Any, workers: Any, tmp_path: Path,
                                                        monkeypatch: Any) -> None:
    monkeypatch.setenv("UPSTREAM_TEST_KEY", KEY)  # the worker inherits it
    with LLMServer() as llm:
        cluster = settings.model_copy(update={"models": _registry(tmp_path / "models.yaml", llm.url),
                                              "allow_plan_models": False})
        worker = workers(settings=cluster)
        server = ApiServer(cluster, tmp_path)
        try:
            r = httpx.post(f"{server.url}/v1/plans", json=_plan())
            assert r.status_code == 201, r.text
            plan_id = r.json()["plan_id"]
            streamed = follow(server.url, plan_id)  # the SSE stream, to the plan's end
            view = httpx.get(f"{server.url}/v1/plans/{plan_id}")
            replay = httpx.get(f"{server.url}/v1/plans/{plan_id}/events", timeout=30)
        finally:
            server.stop()
        # every scenario was really asked, and answered with the leaks (the key echoed too)
        assert {rec.scenario for rec in llm.requests} == {scenario for _, scenario, _, _ in CASES.values()}
        assert all(KEY in " ".join(rec.headers.values()) for rec in llm.requests)

    assert view.status_code == 200 and view.json()["status"] == "failed"
    phases = {p["key"]: p for p in view.json()["phases"]}
    for phase, (_, _, code, reason) in CASES.items():
        assert (phases[phase]["status"], phases[phase]["error_code"], phases[phase]["error"]) == \
            ("failed", code, reason), phases[phase]
    failed = {e["data"]["phase"]: e["data"]["data"] for e in streamed if e["event"] == "phase_failed"}
    assert {k: (d["error_code"], d["error"]) for k, d in failed.items()} == {
        phase: (code, reason) for phase, (_, _, code, reason) in CASES.items()}

    with Conclave(cluster, worker=False) as c:
        stored_events = [e.message() for e in c.local.reads.list_events(plan_id)]
        with c.local.db.engine.connect() as conn:
            phase_rows = [dict(row._mapping) for row in conn.execute(select(Phase).where(Phase.plan_id == plan_id))]
            plan_row = dict(conn.execute(select(Plan).where(Plan.id == plan_id)).one()._mapping)
    readers = {"plan view": view.text, "SSE stream": json.dumps(streamed), "SSE replay": replay.text,
               "stored events": json.dumps(stored_events, default=str),
               "stored phase rows": json.dumps(phase_rows, default=str),
               "stored plan row": json.dumps(plan_row, default=str)}
    for reader, text in readers.items():
        for leak in (LEAK_SENTENCE, LEAK_SECRET, KEY, "Upstream credential"):
            assert leak not in text, (reader, leak)
    assert server.log() and LEAK_SENTENCE not in server.log() and KEY not in server.log()

    # the worker's log has each body, redacted, with the plan and phase it belongs to
    log = worker.log()
    assert KEY not in log and LEAK_SECRET not in log
    upstream = [json.loads(line) for line in log.splitlines() if LEAK_SENTENCE in line]  # JSON lines: not a tty
    for phase in CASES:
        assert any(line["plan_id"] == plan_id and line["phase"] == phase for line in upstream), phase
    assert any("rejected the key ***" in line["message"] for line in upstream)
